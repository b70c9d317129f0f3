"""Where a training step's time goes: PyTorch's profiler over steps of `train_speed.py`'s model
(the Transformer recipe's shape) on real Multi30k batches, operators ranked by their own time.

    python benchmarks/profile_step.py --data ../shared/data/multi30k --dropout 0.3 \
        --json benchmarks/results/profile_step.json

Printed: milliseconds per step (profiled, so a little slower than `train_speed.py`'s) and the
operators that took the most of it. A diagnosis, not a speed figure: changes are kept on an
interleaved A/B (`ab_train.py`).

On a GPU (`--device cuda`, bf16 autocast by default there) operators are ranked by their time on
the device, and the step's idle share is printed too: the part of the step's wall-clock time in
which no kernel ran (launch overhead, host work, waits). `--text FILE` keeps the printed table.

    python benchmarks/profile_step.py --device cuda --max-tokens 16384 --text OUT/profile.txt
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

from train_speed import SHAPES, Ours, make_batches, synchronize
from translate.engine import FAST, PLAIN
from translate.hardware import benchmark_threads, cpu_name, pick_device


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default="../shared/data/multi30k")
    ap.add_argument("--max-tokens", type=int, default=4096)
    ap.add_argument("--steps", type=int, default=8, help="profiled steps, after 4 untimed")
    ap.add_argument("--dropout", type=float, default=0.3, help="the recipe's")
    ap.add_argument("--engine", choices=["fast", "plain"], default="fast")
    ap.add_argument("--threads", type=int, default=benchmark_threads(),
                    help="CPU threads (default: OMP_NUM_THREADS, else 2)")
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--device", default="cpu", help="cpu, or cuda (a GPU)")
    ap.add_argument("--precision", choices=["fp32", "bf16"], default=None,
                    help="default: fp32 on the CPU, bf16 on a GPU")
    ap.add_argument("--shape", choices=[s for s in SHAPES if s in ("multi30k", "tiny")],
                    default="multi30k")
    ap.add_argument("--text", type=Path, default=None, help="also write the table here")
    ap.add_argument("--json", type=Path, default=Path("benchmarks/results/profile_step.json"))
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    device = pick_device(args.device)
    on_gpu = device.type == "cuda"
    precision = args.precision or ("bf16" if on_gpu else "fp32")
    tok, batches = make_batches(args.data, args.max_tokens, 4 + args.steps)
    batches = [batch.to(device) for batch in batches]
    system = Ours(tok.tgt_vocab_size, precision, FAST if args.engine == "fast" else PLAIN,
                  str(device), dropout=args.dropout, shape=args.shape)
    for batch in batches[:4]:
        system.step(batch)
    synchronize(device)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if on_gpu else [])
    with profile(activities=activities) as prof:
        start = time.perf_counter()
        for batch in batches[4:]:
            system.step(batch)
        synchronize(device)
        step_ms = (time.perf_counter() - start) / args.steps * 1e3
    own = (lambda e: e.self_device_time_total) if on_gpu else (lambda e: e.self_cpu_time_total)
    events = prof.key_averages()
    ops = sorted(events, key=lambda e: -own(e))[:args.top]
    total = sum(own(e) for e in events)
    where = torch.cuda.get_device_name(device) if on_gpu else \
        f"{cpu_name()}, {args.threads} threads"
    lines = [f"{where}, {args.engine} engine, {precision}: {step_ms:.1f} ms a step (profiled)"]
    if on_gpu:  # the device's busy time: kernels' own time over the steps' wall-clock time
        busy_ms = total / 1e3 / args.steps
        lines.append(f"kernels busy {busy_ms:.1f} ms a step: idle {1 - busy_ms / step_ms:.0%}")
    lines.append(f"{'operator':<48} {'ms/step':>8} {'share':>6} {'calls/step':>10}")
    rows = []
    for e in ops:
        row = {"op": e.key, "ms_per_step": own(e) / 1e3 / args.steps,
               "share": own(e) / total, "calls_per_step": e.count / args.steps}
        rows.append(row)
        lines.append(f"{e.key[:48]:<48} {row['ms_per_step']:8.1f} {row['share']:6.1%} "
                     f"{row['calls_per_step']:10.1f}")
    print("\n".join(lines))
    if args.text:
        args.text.write_text("\n".join(lines) + "\n")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"cpu": cpu_name(), "device": str(device), "where": where,
                                     "threads": args.threads, "engine": args.engine,
                                     "precision": precision, "dropout": args.dropout,
                                     "step_ms": step_ms, "ops": rows}, indent=1))


if __name__ == "__main__":
    main()
