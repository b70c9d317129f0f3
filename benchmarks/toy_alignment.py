"""How fast the toy tasks' one-layer Transformer learns the attention they need, on this machine.

    python benchmarks/toy_alignment.py --tasks copy,reverse --seeds 0,1,2 --seconds 120 \
        --json benchmarks/results/toy_alignment-amd.json

Each task and seed trains `translate.toy.train_toy` for at most `--seconds` (two minutes: the
tour's promise), until `--target` is reached, checking every `--check-every` steps the share of answer positions whose
cross-attention (the last layer's, averaged over its heads) peaks on the source position that
holds the symbol to write. Printed per run: the seconds and steps to the first check at or over
`--target` (90%), and the share at the end; then the median over seeds per task. Time with
nothing else on the cores.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys

import torch

from translate.hardware import cpu_name
from translate.toy import train_toy


def first_reaching(checks: list, target: float) -> tuple[float, int] | tuple[None, None]:
    """(seconds, step) of the first check whose alignment accuracy is >= `target`."""
    for step, seconds, _, accuracy in checks:
        if accuracy >= target:
            return seconds, step
    return None, None


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", default="copy,reverse")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--seconds", type=float, default=120.0)
    ap.add_argument("--steps", type=int, default=100_000, help="a cap on steps as well")
    ap.add_argument("--check-every", type=int, default=25)
    ap.add_argument("--target", type=float, default=0.9)
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    runs = []
    for task in args.tasks.split(","):
        for seed in (int(s) for s in args.seeds.split(",")):
            run = train_toy(task, steps=args.steps, seconds=args.seconds, seed=seed,
                            check_every=args.check_every, until=args.target)
            seconds, step = first_reaching(run.checks, args.target)
            last = run.checks[-1]
            runs.append(dict(task=task, seed=seed, seconds_to_target=seconds, steps_to_target=step,
                             final_accuracy=last[3], final_step=last[0], final_seconds=last[1],
                             checks=run.checks))
            reached = f"{seconds:6.1f} s ({step} steps)" if seconds is not None else "never"
            print(f"{task:8s} seed {seed}: {args.target:.0%} after {reached}; "
                  f"{last[3]:.1%} at {last[1]:.0f} s, step {last[0]}", flush=True)
    summary = {}
    for task in args.tasks.split(","):
        mine = [r for r in runs if r["task"] == task]
        times = [r["seconds_to_target"] for r in mine]
        summary[task] = dict(
            reached=sum(t is not None for t in times), runs=len(mine),
            median_seconds_to_target=statistics.median(times) if None not in times else None,
            median_final_accuracy=statistics.median(r["final_accuracy"] for r in mine))
        print(f"{task:8s} median: {summary[task]}")
    result = dict(machine=dict(cpu=cpu_name(), threads=torch.get_num_threads(),
                               python=platform.python_version(), torch=torch.__version__),
                  args=vars(args), summary=summary, runs=runs)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(result, f, indent=1)
    return result


if __name__ == "__main__":
    sys.exit(main() and 0)
