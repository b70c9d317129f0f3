"""`train.keep_freed_memory`: whole `translate train` runs with glibc keeping freed memory and
without, for the Transformer and the attention RNN recipes.

    python benchmarks/freed_memory.py --data ../shared/data/multi30k --steps 60 --rounds 3 \
        --json benchmarks/results/freed_memory.json

The allocator is a setting of the whole process, so each setup is its own run; the two take
turns round after round (who goes first alternates), so the machine's drift hits both alike.
Each run trains `--steps` steps without validation at the recipe's precision. Printed per recipe
and round: the steady speed (median target tokens/s of the logged windows after the first
`--warm-steps` steps), page faults per step and peak memory of each setup, and the speed ratio
kept / not kept; then the median ratio over the rounds.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from compile_train import ROOT, figures, run  # noqa: E402

sys.path.insert(0, str(ROOT))
from translate.hardware import cpu_has_amx, cpu_name  # noqa: E402

RECIPES = {"transformer": ROOT / "recipes/multi30k/transformer.yaml",
           "rnn": ROOT / "recipes/multi30k/rnn_bahdanau.yaml"}
SETUPS = {"not kept": "train.keep_freed_memory=false", "kept": "train.keep_freed_memory=true"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", required=True, help="Multi30k: hub name or local folder")
    parser.add_argument("--recipes", default="transformer,rnn", help="comma-separated: "
                        + ", ".join(RECIPES))
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--log-every", type=int, default=10)
    parser.add_argument("--warm-steps", type=int, default=10,
                        help="steps left out of the steady speed")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    if args.steps <= args.warm_steps + args.log_every:
        parser.error("--steps must leave at least one logged window after --warm-steps")
    recipes = args.recipes.split(",")
    if unknown := set(recipes) - set(RECIPES):
        parser.error(f"unknown recipes {sorted(unknown)}; valid: {', '.join(RECIPES)}")

    results = {recipe: {name: [] for name in SETUPS} for recipe in recipes}
    with tempfile.TemporaryDirectory() as tmp:
        for round_ in range(args.rounds):
            for recipe in recipes:
                names = list(SETUPS) if round_ % 2 == 0 else list(reversed(SETUPS))
                for name in names:
                    run_dir = Path(tmp) / f"{recipe}_{name.replace(' ', '_')}_{round_}"
                    records, usage = run(args.data, args.steps, args.log_every, [SETUPS[name]],
                                         run_dir, recipe=RECIPES[recipe])
                    got = {**figures(records, args.warm_steps), "peak_mb": usage["peak_mb"],
                           "faults_per_step": usage["page_faults"] / args.steps}
                    results[recipe][name].append(got)
                kept, not_kept = (results[recipe][n][-1] for n in ("kept", "not kept"))
                print(f"round {round_ + 1} {recipe:11s} " + "; ".join(
                    f"{n}: {g['tok_per_s']:5.0f} tok/s, {g['faults_per_step']:7.0f} faults/step, "
                    f"peak {g['peak_mb']:5.0f} MB" for n, g in (("not kept", not_kept),
                                                               ("kept", kept)))
                    + f"; kept/not {kept['tok_per_s'] / not_kept['tok_per_s']:.3f}", flush=True)

    summary = {}
    for recipe, runs in results.items():
        ratios = [k["tok_per_s"] / n["tok_per_s"] for k, n in zip(runs["kept"], runs["not kept"])]
        summary[recipe] = {
            **{name: {key: statistics.median(r[key] for r in got)
                      for key in ("tok_per_s", "faults_per_step", "peak_mb")}
               for name, got in runs.items()},
            "kept_over_not_per_round": ratios, "kept_over_not": statistics.median(ratios)}
        print(f"{recipe}: kept / not kept {summary[recipe]['kept_over_not']:.3f} (median of "
              f"{args.rounds} rounds), peak memory {summary[recipe]['not kept']['peak_mb']:.0f} "
              f"-> {summary[recipe]['kept']['peak_mb']:.0f} MB")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({
            "cpu": cpu_name(), "amx": cpu_has_amx(), "steps": args.steps, "rounds": args.rounds,
            "runs": results, "summary": summary}, indent=2) + "\n")


if __name__ == "__main__":
    main()
