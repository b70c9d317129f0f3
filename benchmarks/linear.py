"""CPU matmul speed at decoding shapes: PyTorch's default `F.linear` (the BLAS it was built with)
against oneDNN's matmul, with the weight as it is and packed once into oneDNN's blocked layout,
as `translate.models.linear.Linear` uses it for fp32 inference.

    python benchmarks/linear.py --json benchmarks/results/linear.json

Shapes are those of the Multi30k Transformer (d_model 256, FFN 1024, vocabulary 8000) decoding
batches of 32 sentences: 32 rows greedily, 160 at beam 5. The two take turns for `--rounds`
rounds; the figure is the median GFLOP/s, and the outputs are checked to agree.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from translate.fast.linear import ONEDNN
from translate.hardware import benchmark_threads, cpu_name

SHAPES = [  # (rows, in, out, what)
    (160, 256, 8000, "output projection, beam 5"),
    (32, 256, 8000, "output projection, greedy"),
    (160, 256, 768, "fused Q/K/V, beam 5"),
    (160, 256, 1024, "FFN in, beam 5"),
    (160, 1024, 256, "FFN out, beam 5"),
    (160, 256, 256, "attention out, beam 5"),
    (32, 256, 1024, "FFN in, greedy"),
]


def onednn_linear(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return torch.ops.mkldnn._linear_pointwise(x, w, None, "none", [], "")


def pack(w: torch.Tensor) -> torch.Tensor:
    return torch.ops.mkldnn._reorder_linear_weight(w)


def time_one(fn, *args) -> float:
    start = time.perf_counter()
    fn(*args)
    return time.perf_counter() - start


@torch.no_grad()
def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=50)
    ap.add_argument("--threads", type=int, default=benchmark_threads(),
                    help="CPU threads (default: OMP_NUM_THREADS, else 2)")
    ap.add_argument("--json", type=Path, default=Path("benchmarks/results/linear.json"))
    args = ap.parse_args()
    if not ONEDNN:
        raise SystemExit("this PyTorch build has no oneDNN linear: nothing to compare")
    torch.set_num_threads(args.threads)
    names = ["F.linear (BLAS)", "oneDNN", "oneDNN packed"]
    rows = []
    print(f"{'rows x in x out':>18s}  {'GFLOP/s: F.linear':>17s}  {'oneDNN':>6s}  {'packed':>6s}  "
          f"{'packed / F.linear':>17s}  what")
    for m, k, n, what in SHAPES:
        x, w = torch.randn(m, k), torch.randn(n, k) * k ** -0.5
        calls = {"F.linear (BLAS)": (F.linear, w), "oneDNN": (onednn_linear, w),
                 "oneDNN packed": (onednn_linear, pack(w))}
        for fn, weight in calls.values():  # warm-up, and the three agree
            torch.testing.assert_close(fn(x, weight), F.linear(x, w), atol=1e-4, rtol=1e-4)
        seconds: dict[str, list[float]] = {name: [] for name in names}
        for _ in range(args.rounds):
            for name, (fn, weight) in calls.items():
                seconds[name].append(time_one(fn, x, weight))
        gflops = {name: 2 * m * k * n / statistics.median(s) / 1e9 for name, s in seconds.items()}
        ratio = gflops["oneDNN packed"] / gflops["F.linear (BLAS)"]
        rows.append({"rows": m, "in": k, "out": n, "what": what, "gflops": gflops,
                     "packed_over_blas": ratio})
        print(f"{f'{m} x {k} x {n}':>18s}  {gflops[names[0]]:17.0f}  {gflops[names[1]]:6.0f}  "
              f"{gflops[names[2]]:6.0f}  {ratio:17.2f}  {what}")
    result = {"threads": args.threads, "rounds": args.rounds, "torch": torch.__version__,
              "cpu": cpu_name(), "shapes": rows}
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=2))
    print(f"\nwrote {args.json}")


if __name__ == "__main__":
    main()
