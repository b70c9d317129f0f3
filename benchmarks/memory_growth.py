"""Where a training run's memory goes, step by step: one `translate train` run with the C
library's heap read after every step.

    python benchmarks/memory_growth.py --data ../shared/data/multi30k --steps 600 \
        --set train.precision=bf16 --json benchmarks/results/memory_growth-bf16.json

The run is `translate train` itself (the default recipe, no validation unless `--set` asks),
started in this process so that after each optimizer step the script can read:

- the process's resident memory (what the kernel counts; `translate.hardware.resident_memory`);
- glibc's heap (`mallinfo2`): the bytes it holds from the OS (`held`: sbrk'd arena plus mmapped
  blocks), the bytes in live allocations (`in_use`) and the free bytes it keeps (`free`): a
  heap whose `held` grows while `in_use` does not is fragmenting;
- the batch's shape (sentences, source and target length), so growth can be put beside the
  shapes that came before it, and the step's seconds (validation included when due);
- with `--profile-steps A:B`, every CPU allocation of steps A to B by size and by the operator
  that made it (torch.profiler's memory events): how many distinct sizes a step asks for.

Printed: the figures every `--every` steps and a summary (growth of held and of in-use memory
over the run's second half, the distinct batch shapes); `--json` keeps every step. Under another
allocator (LD_PRELOAD) mallinfo2 reads glibc's idle heap: only resident memory means anything.
"""

from __future__ import annotations

import argparse
import collections
import ctypes
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from translate.hardware import cpu_has_amx, cpu_name, resident_memory  # noqa: E402

MB = 1 << 20


class MallInfo2(ctypes.Structure):
    """glibc's struct mallinfo2 (malloc.h, glibc >= 2.33): every field a size_t."""

    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
        "fordblks", "keepcost")]


def heap_reader():
    """A function returning glibc's heap figures in bytes ({} where the C library has no
    mallinfo2)."""
    try:
        mallinfo2 = ctypes.CDLL(None).mallinfo2
    except AttributeError:
        return dict
    mallinfo2.restype = MallInfo2

    def read() -> dict:
        m = mallinfo2()
        return {"held": m.arena + m.hblkhd, "mmapped": m.hblkhd, "in_use": m.uordblks + m.hblkhd,
                "free": m.fordblks, "free_chunks": m.ordblks}
    return read


class StepWatch:
    """Wraps `Trainer.next_step` to read the heap and the batch's shape after each step; with a
    profile window, records torch.profiler's memory events over it."""

    def __init__(self, every: int, profile: tuple[int, int] | None):
        self.read_heap, self.every, self.profile = heap_reader(), every, profile
        self.rows: list[dict] = []
        self.allocations: collections.Counter = collections.Counter()  # (op, bytes) -> count
        self.profiler = None

    def install(self) -> None:
        from translate.training.loop import Trainer
        from translate.training.update import Updater

        watch, next_step, step = self, Trainer.next_step, Updater.step

        def watched_step(updater, group, tokens, state):
            watch.shape = [tuple(b.src.shape) + (b.tgt_in.shape[1],) for b in group]
            watch.tokens = sum(b.num_tgt_tokens for b in group)
            return step(updater, group, tokens, state)

        def watched_next_step(trainer, batches):
            watch.before(trainer.state.step)
            start = time.perf_counter()
            stop = next_step(trainer, batches)
            watch.seconds = time.perf_counter() - start
            watch.after(trainer.state.step)
            return stop

        Updater.step, Trainer.next_step = watched_step, watched_next_step

    def before(self, step: int) -> None:
        if self.profile and step == self.profile[0] and self.profiler is None:
            import torch.profiler
            self.profiler = torch.profiler.profile(
                activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True)
            self.profiler.__enter__()

    def after(self, step: int) -> None:
        if self.profiler is not None and step >= self.profile[1]:
            self.profiler.__exit__(None, None, None)
            self.count_allocations(self.profiler)
            self.profiler, self.profile = None, None
        now, _ = resident_memory()
        row = {"step": step, "rss": now, "seconds": self.seconds, "tokens": self.tokens,
               "shape": self.shape,
               **self.read_heap()}
        if self.rows and self.rows[-1]["step"] == step:  # a skipped step: the same counter
            return
        self.rows.append(row)
        if step % self.every == 0:
            print(f"step {step:5d}: resident {now / MB:7.1f} MB"
                  + (f", heap held {row['held'] / MB:7.1f} MB, in use "
                     f"{row['in_use'] / MB:6.1f} MB, free {row['free'] / MB:7.1f} MB in "
                     f"{row['free_chunks']} chunks" if "held" in row else ""), flush=True)

    def count_allocations(self, profiler) -> None:
        """Each allocation (a positive memory event) by its operator and size."""
        for event in profiler.events():
            if event.cpu_memory_usage > 0 and event.name != "[memory]":
                self.allocations[(event.name, event.cpu_memory_usage)] += 1
            elif event.cpu_memory_usage > 0:
                self.allocations[("(unattributed)", event.cpu_memory_usage)] += 1


def summary(rows: list[dict], allocations: collections.Counter, profiled: int) -> dict:
    """Growth over the run's second half, the distinct shapes, the allocations by size."""
    half = rows[len(rows) // 2:]
    steps = half[-1]["step"] - half[0]["step"] or 1
    out = {"steps": rows[-1]["step"],
           "resident_mb": {"first": rows[0]["rss"] / MB, "half": half[0]["rss"] / MB,
                           "last": rows[-1]["rss"] / MB,
                           "peak": max(r["rss"] for r in rows) / MB},
           "resident_growth_kb_per_step": (half[-1]["rss"] - half[0]["rss"]) / 1024 / steps,
           "distinct_batch_shapes": len({tuple(map(tuple, r["shape"])) for r in rows}),
           "median_step_seconds": statistics.median(r["seconds"] for r in half)}
    if "held" in rows[0]:
        for key in ("held", "in_use", "free"):
            out[f"{key}_growth_kb_per_step"] = (half[-1][key] - half[0][key]) / 1024 / steps
        out["in_use_median_mb"] = statistics.median(r["in_use"] for r in half) / MB
        out["held_last_mb"] = rows[-1]["held"] / MB
    if allocations:
        per_step = profiled or 1
        sizes = collections.Counter()
        for (_, size), n in allocations.items():
            sizes[size] += n
        big = {s: n for s, n in sizes.items() if s >= 1 << 16}
        by_op = collections.Counter()
        for (op, size), n in allocations.items():
            by_op[op] += size * n
        out["allocations"] = {
            "per_step": sum(sizes.values()) / per_step,
            "bytes_per_step_mb": sum(s * n for s, n in sizes.items()) / per_step / MB,
            "distinct_sizes": len(sizes), "distinct_sizes_64k_up": len(big),
            "top_ops_mb_per_step": {op: b / per_step / MB for op, b in by_op.most_common(12)}}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", required=True, help="Multi30k: hub name or local folder")
    parser.add_argument("--recipe", default=str(ROOT / "recipes/multi30k/transformer.yaml"))
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--set", dest="sets", action="append", default=[],
                        help="a recipe override, as translate train --set (repeatable)")
    parser.add_argument("--every", type=int, default=50, help="print every this many steps")
    parser.add_argument("--profile-steps", help="A:B: count allocations over steps A to B")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    profile = tuple(int(s) for s in args.profile_steps.split(":")) if args.profile_steps else None

    watch = StepWatch(args.every, profile)
    watch.install()
    from translate.cli import main as cli

    sets = [f"train.max_steps={args.steps}", "train.eval_every=0", "train.eval_every_minutes=0",
            "train.max_minutes=0", "data.test_splits=[]", "train.log_every=50", *args.sets]
    with tempfile.TemporaryDirectory() as tmp:
        argv = ["train", args.recipe, "--data", args.data, "--run-dir", f"{tmp}/run",
                "--no-progress"]
        for s in sets:
            argv += ["--set", s]
        try:
            cli.main(argv, standalone_mode=False)
        except SystemExit as stop:
            if stop.code:
                raise
    profiled = (profile[1] - profile[0]) if profile else 0
    result = summary(watch.rows, watch.allocations, profiled)
    print(json.dumps(result, indent=2))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({
            "cpu": cpu_name(), "amx": cpu_has_amx(), "sets": args.sets, "summary": result,
            "allocations": [[op, size, n] for (op, size), n in watch.allocations.most_common()],
            "steps": watch.rows}) + "\n")


if __name__ == "__main__":
    main()
