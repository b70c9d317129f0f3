"""`train.compile` end to end: whole `translate train` runs with and without `torch.compile`.

    python benchmarks/compile_train.py --data ../shared/data/multi30k --steps 100 --rounds 2 \
        --json benchmarks/results/compile_train.json

Three setups of the Multi30k Transformer recipe run in turns, round after round, so the
machine's drift hits all alike: the plain engine in eager mode, the plain engine under
`torch.compile` (the engine a compiled run takes), and the recipe's own engine (`auto`) in eager
mode. Each run trains `--steps` steps without validation at the recipe's precision. From each
run's `metrics.jsonl`: the seconds to reach the last step (compilation included: that is what a
user waits for), the steady speed (median target tokens/s of the logged windows after the first
`--warm-steps` steps), and the warm-up (the first window's extra seconds over the steady pace:
compilation, for the compiled runs, which start from an empty kernel cache unless
`--warm-cache`).
Printed per setup: medians over the rounds, and each setup's ratio to eager plain.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from translate.hardware import cpu_has_amx, cpu_name  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
RECIPE = ROOT / "recipes/multi30k/transformer.yaml"
SETUPS = {
    "eager plain": ["train.engine=plain"],
    "compiled plain": ["train.engine=plain", "train.compile=true"],
    "eager auto": ["train.engine=auto"],
}


def run(data: str, steps: int, log_every: int, overrides: list[str], run_dir: Path,
        compile_cache: Path | None = None, recipe: Path = RECIPE) -> tuple[list[dict], dict]:
    """One `translate train` run: its train records, and the process's peak memory (MB) and
    page faults. With `compile_cache`, torch.compile's kernels are kept there (a fresh folder:
    compiled from nothing, as in a user's first run)."""
    sets = [f"train.max_steps={steps}", "train.eval_every=0", "train.eval_every_minutes=0",
            "train.max_minutes=0", f"train.log_every={log_every}", "data.test_splits=[]",
            *overrides]
    cmd = [sys.executable, "-m", "translate", "train", str(recipe), "--data", data,
           "--run-dir", str(run_dir), "--no-progress"]
    for s in sets:
        cmd += ["--set", s]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    if compile_cache is not None:
        env["TORCHINDUCTOR_CACHE_DIR"] = str(compile_cache)
    child = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, env=env)
    _, status, usage = os.wait4(child.pid, 0)  # the child's own resource usage
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode:
        raise subprocess.CalledProcessError(child.returncode, cmd)
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").open()]
    return ([r for r in records if r.get("kind") == "train"],
            {"peak_mb": usage.ru_maxrss / 1024, "page_faults": usage.ru_minflt})


def figures(records: list[dict], warm_steps: int) -> dict:
    """Seconds to the last step, steady tokens/s, and warm-up seconds of one run."""
    steady = [r for r in records if r["step"] > warm_steps]
    tok_s = statistics.median(r["tok_per_s"] for r in steady)
    first = records[0]
    steady_step_s = statistics.median(r["step_tokens"] / r["tok_per_s"] for r in steady)
    return {"seconds": records[-1]["train_seconds"], "tok_per_s": tok_s,
            "warmup_s": first["train_seconds"] - first["step"] * steady_step_s}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", required=True, help="Multi30k: hub name or local folder")
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--log-every", type=int, default=10)
    parser.add_argument("--warm-steps", type=int, default=20,
                        help="steps left out of the steady speed")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--warm-cache", action="store_true",
                        help="let compiled runs reuse torch.compile's kernel cache (default: each "
                        "compiled run starts from an empty cache, as a user's first run does)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    if args.steps <= args.warm_steps + args.log_every:
        parser.error("--steps must leave at least one logged window after --warm-steps")

    results: dict[str, list[dict]] = {name: [] for name in SETUPS}
    with tempfile.TemporaryDirectory() as tmp:
        for round_ in range(args.rounds):
            names = list(SETUPS) if round_ % 2 == 0 else list(reversed(SETUPS))
            for name in names:
                run_dir = Path(tmp) / f"{name.replace(' ', '_')}_{round_}"
                cache = None if args.warm_cache else Path(tmp) / f"inductor_{round_}"
                got = figures(run(args.data, args.steps, args.log_every, SETUPS[name], run_dir,
                                  cache)[0], args.warm_steps)
                results[name].append(got)
                print(f"round {round_ + 1} {name:15s} {got['seconds']:7.1f} s to step "
                      f"{args.steps}, {got['tok_per_s']:6.0f} tok/s steady, warm-up "
                      f"{got['warmup_s']:5.1f} s", flush=True)

    summary = {}
    for name, runs in results.items():
        summary[name] = {key: statistics.median(r[key] for r in runs)
                         for key in ("seconds", "tok_per_s", "warmup_s")}
    base = summary["eager plain"]
    print(f"\nmedians over {args.rounds} rounds, {args.steps} steps each")
    print(f"{'setup':15s} {'s to end':>9s} {'tok/s':>7s} {'warm-up s':>10s} "
          f"{'speed vs eager plain':>21s} {'end to end vs eager plain':>26s}")
    for name, s in summary.items():
        s["steady_ratio"] = s["tok_per_s"] / base["tok_per_s"]
        s["end_to_end_ratio"] = base["seconds"] / s["seconds"]
        print(f"{name:15s} {s['seconds']:9.1f} {s['tok_per_s']:7.0f} {s['warmup_s']:10.1f} "
              f"{s['steady_ratio']:21.2f} {s['end_to_end_ratio']:26.2f}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({
            "cpu": cpu_name(), "amx": cpu_has_amx(), "steps": args.steps,
            "compile_cache": "warm" if args.warm_cache else "cold",
            "rounds": args.rounds, "runs": results, "summary": summary}, indent=2) + "\n")


if __name__ == "__main__":
    main()
