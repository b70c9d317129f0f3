"""Record a recipe's dev curve, for the promise `translate train` makes (translate/training/promise.py).

    python scripts/record_curve.py RUN_DIR [RUN_DIR ...] --name "multi30k transformer" \
        --recorded "seeds 1, 2; AMD EPYC fp32; ..." -o translate/training/curves/NAME.json

The runs are named in the curve, relative to the repository (their logs are kept under
docs/runs/, and tests/training/test_promise.py records the curve from them again). Each run
folder gives its recipe (recipe.yaml) and its validations (metrics.jsonl). The runs'
recipes must agree on every key that changes the steps (`promise.comparable`); their greedy dev
BLEU is read by step, each run's interpolated at every step any of them validated at, and
averaged over the runs that reached that step. Validations on the first sentences of dev alone
(a run's untrained start) are left out. One validation's cost in steps of training is the runs'
mean of (wall-clock not spent in steps) / (validations) x (steps a second).
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from translate.config import load_recipe
from translate.models import build_model, count_parameters
from translate.training.promise import RecordedCurve, comparable, differences

REPO = Path(__file__).resolve().parents[1]


def run_curve(run_dir: Path) -> tuple[dict, list[tuple[int, float]], float]:
    """(comparable recipe, [(step, dev BLEU)] from (0, 0), validation cost in steps) of a run."""
    recipe = comparable(load_recipe(run_dir / "recipe.yaml").to_dict())
    rows = [json.loads(line) for line in
            (run_dir / "metrics.jsonl").read_text(encoding="utf-8").splitlines()]
    valid = [r for r in rows if r["kind"] == "valid"]
    if not valid:
        raise SystemExit(f"{run_dir}: no validation in metrics.jsonl")
    points = [(0, 0.0)] + [(r["step"], r["dev_bleu"]) for r in valid
                           if "dev_bleu_sentences" not in r and r["step"] > 0]
    last = [r for r in rows if "train_seconds" in r][-1]
    overhead = (last["elapsed"] - last["train_seconds"]) / len(valid)  # seconds a validation
    return recipe, points, overhead * last["step"] / last["train_seconds"]


def mean_curve(curves: list[list[tuple[int, float]]]) -> list[tuple[int, float]]:
    """The runs' mean dev BLEU at every step any of them validated at, each run counted from its
    first validation to its last (a run validated less often is not read off the straight line
    from (0, 0) to its first validation, where a denser run has measured the curve)."""
    shaped = [RecordedCurve("", {}, tuple(c), 0.0, "") for c in curves]
    steps = sorted({s for c in curves for s, _ in c})
    return [(s, round(statistics.fmean(c.bleu_at(s) for c in shaped
                                       if c.points[min(1, len(c.points) - 1)][0] <= s
                                       <= c.last_step) if s else 0.0, 2))
            for s in steps]


def parameters(recipe) -> int:
    """The weights of `recipe`'s model (its tokenizer's vocabulary sizes as written)."""
    tok = recipe.tokenizer
    return count_parameters(build_model(recipe.model, tok.vocab_size, tok.vocab_size, tok.joint))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path)
    parser.add_argument("--name", required=True)
    parser.add_argument("--recorded", required=True, help="the runs, machines and command")
    parser.add_argument("--size", default="", help="the rung's name in its recipe's ladder "
                        "(translate/training/sizes.py); none: a curve for the promise alone")
    parser.add_argument("-o", "--out", type=Path, required=True)
    args = parser.parse_args()
    recipes, curves, costs = zip(*(run_curve(run) for run in args.runs))
    for run, recipe in zip(args.runs[1:], recipes[1:]):
        if differ := differences(recipe, recipes[0]):
            raise SystemExit(f"{run} was trained with another recipe than {args.runs[0]}: "
                             + "; ".join(differ))
    runs = [str(run.resolve().relative_to(REPO)) if run.resolve().is_relative_to(REPO)
            else str(run) for run in args.runs]
    curve = {"name": args.name, "recorded": args.recorded, "runs": runs, "recipe": recipes[0],
             **({"size": args.size, "parameters": parameters(load_recipe(args.runs[0] /
                                                                          "recipe.yaml"))}
                if args.size else {}),
             "validation_steps": round(statistics.fmean(costs), 1),
             "points": mean_curve(list(curves))}
    args.out.write_text(json.dumps(curve, indent=1) + "\n", encoding="utf-8")
    RecordedCurve.load(args.out)  # reads back
    print(f"{args.out}: {len(curve['points'])} points to step {curve['points'][-1][0]}, "
          f"a validation {curve['validation_steps']} steps")


if __name__ == "__main__":
    main()
