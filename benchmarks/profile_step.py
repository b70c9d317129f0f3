"""Where a training step's time goes: PyTorch's profiler over steps of `train_speed.py`'s model
(the Transformer recipe's shape) on real Multi30k batches, operators ranked by their own time.

    python benchmarks/profile_step.py --data ../shared/data/multi30k --dropout 0.3 \
        --json benchmarks/results/profile_step.json

Printed: milliseconds per step (profiled, so a little slower than `train_speed.py`'s) and the
operators that took the most of it. A diagnosis, not a speed figure: changes are kept on an
interleaved A/B (`ab_train.py`).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

from train_speed import Ours, make_batches
from translate.engine import FAST, PLAIN
from translate.utils import cpu_name


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default="../shared/data/multi30k")
    ap.add_argument("--max-tokens", type=int, default=4096)
    ap.add_argument("--steps", type=int, default=8, help="profiled steps, after 4 untimed")
    ap.add_argument("--dropout", type=float, default=0.3, help="the recipe's")
    ap.add_argument("--engine", choices=["fast", "plain"], default="fast")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--json", type=Path, default=Path("benchmarks/results/profile_step.json"))
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    tok, batches = make_batches(args.data, args.max_tokens, 4 + args.steps)
    system = Ours(tok.tgt_vocab_size, "fp32", FAST if args.engine == "fast" else PLAIN,
                  dropout=args.dropout)
    for batch in batches[:4]:
        system.step(batch)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        start = time.perf_counter()
        for batch in batches[4:]:
            system.step(batch)
        step_ms = (time.perf_counter() - start) / args.steps * 1e3
    ops = sorted(prof.key_averages(), key=lambda e: -e.self_cpu_time_total)[:args.top]
    total = sum(e.self_cpu_time_total for e in prof.key_averages())
    print(f"{cpu_name()}, {args.threads} threads, {args.engine} engine: {step_ms:.0f} ms a step "
          f"(profiled)\n{'operator':<48} {'ms/step':>8} {'share':>6} {'calls/step':>10}")
    rows = []
    for e in ops:
        row = {"op": e.key, "ms_per_step": e.self_cpu_time_total / 1e3 / args.steps,
               "share": e.self_cpu_time_total / total, "calls_per_step": e.count / args.steps}
        rows.append(row)
        print(f"{e.key[:48]:<48} {row['ms_per_step']:8.1f} {row['share']:6.1%} "
              f"{row['calls_per_step']:10.1f}")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"cpu": cpu_name(), "threads": args.threads,
                                     "engine": args.engine, "dropout": args.dropout,
                                     "step_ms": step_ms, "ops": rows}, indent=1))


if __name__ == "__main__":
    main()
