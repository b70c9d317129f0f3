"""Two training setups over a long run, taking turns on the cores: does either slow down as the
run goes on (a fragmenting heap, growing caches, validation's leftovers)?

    python benchmarks/long_run_ab.py --data ../shared/data/multi30k --steps 1400 \
        --a train.keep_freed_memory=true --b train.keep_freed_memory=false \
        --json benchmarks/results/long_run_ab.json

A short A/B (`ab_train.py`, `freed_memory.py`) times a few dozen steps of fresh processes; what
builds up over thousands of steps and validations escapes it. Here both `translate train` runs
live for the whole comparison, and take turns: one trains for `--slice` seconds while the other
is stopped (SIGSTOP), so the machine's drift over the minutes hits both alike. Both validate at
the same steps (`--eval-every`). A logged window that a pause fell into is left out (its wall
time is more than three times the run's median window). Printed: each setup's median target
tokens/s over each stretch of `--bucket` steps, the ratio B / A there, and each process's
resident memory when its turns ended.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from translate.hardware import cpu_has_amx, cpu_name  # noqa: E402

RECIPE = ROOT / "recipes/multi30k/transformer.yaml"


def start(name: str, args: argparse.Namespace, overrides: list[str], extra_env: list[str],
          run_dir: Path) -> subprocess.Popen:
    """One `translate train` run in a process group of its own, stopped at once; `extra_env`:
    KEY=VALUE pairs added to its environment (LD_PRELOAD=... for another allocator, say)."""
    sets = [f"train.max_steps={args.steps}", f"train.eval_every={args.eval_every}",
            "train.eval_every_minutes=0", "train.max_minutes=0", "train.keep_last=1",
            f"train.log_every={args.log_every}", "data.test_splits=[]", *overrides]
    cmd = [sys.executable, "-m", "translate", "train", str(args.recipe), "--data", args.data,
           "--run-dir", str(run_dir), "--no-progress"]
    for s in sets:
        cmd += ["--set", s]
    env = {**os.environ, "PYTHONPATH": str(ROOT),
           **dict(pair.split("=", 1) for pair in extra_env)}
    child = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, env=env,
                             start_new_session=True)
    os.killpg(child.pid, signal.SIGSTOP)
    print(f"{name}: {' '.join(extra_env + overrides) or '(the recipe)'}", flush=True)
    return child


def resident_mb(pid: int) -> float:
    """The process's resident memory now (MB); 0 once it has ended."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def windows(run_dir: Path, log_every: int) -> list[dict]:
    """The run's logged training windows (of `log_every` steps), those a pause fell into left
    out."""
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").open()]
    train = [r for r in records if r.get("kind") == "train"]
    for r in train:
        r["seconds"] = r["step_tokens"] * log_every / r["tok_per_s"]
    typical = statistics.median(r["seconds"] for r in train)
    return [r for r in train if r["seconds"] <= 3 * typical]


def take_turns(children: dict[str, subprocess.Popen], slice_s: float
               ) -> tuple[dict[str, list], dict[str, float]]:
    """Let each run train for `slice_s` seconds in turn until all have ended; each one's
    resident memory (MB) at the end of each turn, and its seconds on the cores in all (start-up,
    validation and saving included: the whole run's time)."""
    memory: dict[str, list] = {name: [] for name in children}
    active = {name: 0.0 for name in children}
    turn = 0
    while any(c.poll() is None for c in children.values()):
        names = list(children) if turn % 2 == 0 else list(reversed(children))
        for name in names:
            child = children[name]
            if child.poll() is not None:
                continue
            os.killpg(child.pid, signal.SIGCONT)
            began = time.monotonic()
            deadline = began + slice_s
            while time.monotonic() < deadline and child.poll() is None:
                time.sleep(0.2)
            active[name] += time.monotonic() - began
            if child.poll() is None:
                memory[name].append(round(resident_mb(child.pid)))
                os.killpg(child.pid, signal.SIGSTOP)
        turn += 1
    for name, child in children.items():
        if child.returncode != 0:
            raise SystemExit(f"{name}: translate train exited with {child.returncode}")
    return memory, active


def by_bucket(records: list[dict], bucket: int) -> dict[int, float]:
    """Median target tokens/s over each stretch of `bucket` steps, keyed by its first step."""
    groups: dict[int, list[float]] = {}
    for r in records:
        groups.setdefault((r["step"] - 1) // bucket * bucket, []).append(r["tok_per_s"])
    return {start: statistics.median(v) for start, v in sorted(groups.items())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", required=True, help="Multi30k: hub name or local folder")
    parser.add_argument("--recipe", type=Path, default=RECIPE)
    parser.add_argument("--a", action="append", default=[], metavar="KEY=VALUE",
                        help="a --set for setup A (repeatable); none: the recipe as it is")
    parser.add_argument("--b", action="append", default=[], metavar="KEY=VALUE",
                        help="a --set for setup B (repeatable)")
    parser.add_argument("--a-env", action="append", default=[], metavar="KEY=VALUE",
                        help="an environment variable for setup A's process (repeatable)")
    parser.add_argument("--b-env", action="append", default=[], metavar="KEY=VALUE",
                        help="an environment variable for setup B's process (repeatable)")
    parser.add_argument("--steps", type=int, default=1400)
    parser.add_argument("--eval-every", type=int, default=350)
    parser.add_argument("--log-every", type=int, default=10)
    parser.add_argument("--bucket", type=int, default=200, help="steps per reported stretch")
    parser.add_argument("--slice", type=float, default=60.0, help="seconds of each turn")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    if (args.a, args.a_env) == (args.b, args.b_env):
        parser.error("A and B are the same setup")
    for pair in args.a_env + args.b_env:
        if "=" not in pair:
            parser.error(f"{pair!r}: an environment variable is KEY=VALUE")

    # stopped children outlive a killed driver: a SIGTERM ends it through the `finally` below
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("long_run_ab: terminated"))
    with tempfile.TemporaryDirectory() as tmp:
        children = {name: start(name, args, sets, env, Path(tmp) / name)
                    for name, sets, env in (("A", args.a, args.a_env), ("B", args.b, args.b_env))}
        try:
            memory, active = take_turns(children, args.slice)
        finally:
            for child in children.values():
                if child.poll() is None:
                    os.killpg(child.pid, signal.SIGKILL)
        speeds = {name: by_bucket(windows(Path(tmp) / name, args.log_every), args.bucket) for name in children}

    print(f"\n{cpu_name()} (AMX: {cpu_has_amx()}), {args.steps} steps, validation every "
          f"{args.eval_every}, turns of {args.slice:.0f} s")
    print(f"{'steps':>11s} {'A tok/s':>8s} {'B tok/s':>8s} {'B / A':>6s}")
    rows = []
    for first in speeds["A"]:
        a, b = speeds["A"][first], speeds["B"].get(first)
        if b is None:
            continue
        rows.append({"from_step": first + 1, "a_tok_per_s": a, "b_tok_per_s": b, "ratio": b / a})
        print(f"{first + 1:5d}-{first + args.bucket:<5d} {a:8.0f} {b:8.0f} {b / a:6.3f}")
    for name in children:
        print(f"{name}: {active[name]:.0f} s on the cores for the whole run; resident MB at "
              f"the end of its turns: {memory[name]}")
    print(f"whole run, A's seconds / B's: {active['A'] / active['B']:.3f}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({
            "cpu": cpu_name(), "amx": cpu_has_amx(), "a": args.a_env + args.a,
            "b": args.b_env + args.b,
            "steps": args.steps, "eval_every": args.eval_every, "slice_s": args.slice,
            "buckets": rows, "resident_mb": memory, "active_s": active,
            "whole_run_a_over_b": active["A"] / active["B"]}, indent=2) + "\n")


if __name__ == "__main__":
    main()
