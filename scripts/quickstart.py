"""What the quickstart says before and after its training run.

    python scripts/quickstart.py expect MINUTES     # the dev BLEU to expect from the recorded curve
    python scripts/quickstart.py show RUN_DIR       # a few test translations and what to try next
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import replace
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CURVE = REPO / "docs/runs/m30k-transformer-intel-bpe/metrics.jsonl"  # the recipe, 60 minutes
MACHINE = "a 2-core Intel Xeon with AMX"


def recorded_curve() -> list[tuple[float, float]]:
    """(minutes, greedy dev BLEU) of the recipe's recorded 60-minute run."""
    records = [json.loads(line) for line in CURVE.read_text(encoding="utf-8").splitlines()]
    return [(0.0, 0.0)] + [(r["elapsed"] / 60, r["dev_bleu"]) for r in records
                           if r["kind"] == "valid"]


def expected_bleu(minutes: float) -> float:
    """The recorded curve's dev BLEU at `minutes`, interpolated (its last value past its end)."""
    curve = recorded_curve()
    for (m0, b0), (m1, b1) in zip(curve, curve[1:]):
        if minutes <= m1:
            return b0 + (b1 - b0) * (minutes - m0) / (m1 - m0)
    return curve[-1][1]


def expect(minutes: float) -> str:
    points = ", ".join(f"{b:.0f} at {m:.0f} min" for m, b in recorded_curve()[1::3])
    where = f"on {MACHINE} the recipe's greedy dev BLEU was {points} (docs/runs/{CURVE.parent.name})"
    if minutes < 4:
        return (f"training for {minutes:g} minutes: {where}. Under 4 minutes the model is still "
                f"mostly untrained: expect a BLEU near 0 and translations that repeat words.")
    return (f"training for {minutes:g} minutes: expect a dev BLEU of about "
            f"{expected_bleu(minutes):.0f}; {where}. A slower CPU gets less far, a GPU further.")


def show(run_dir: Path, n: int = 3) -> str:
    from translate import Translator
    from translate.data.read import load_split

    translator = Translator.load(run_dir)
    data = translator.recipe.data
    if os.environ.get("TRANSLATE_DATA"):  # quickstart.sh's local copy, which the run read
        data = replace(data, dataset=os.environ["TRANSLATE_DATA"])
    sources, references = load_split(data, "test_2016_flickr")
    translations = translator.translate(sources[:n])
    lines = ["", "A few test sentences (source, this model, reference):"]
    for source, translation, reference in zip(sources, translations, references):
        lines += [f"  en   {source}", f"  ours {translation}", f"  ref  {reference}", ""]
    lines += ["Next:",
              f"  .venv/bin/translate decode {run_dir} -i my.en -o my.de    # your own text",
              f"  .venv/bin/translate serve {run_dir}     # a page that shows the attention",
              "  docs/tour.md and docs/tour.ipynb          # how each part of the model works",
              "  MINUTES=60 bash scripts/quickstart.sh     # the full recipe: ~39 test BLEU"]
    return "\n".join(lines)


def main() -> None:
    if len(sys.argv) != 3 or sys.argv[1] not in ("expect", "show"):
        raise SystemExit(__doc__)
    if sys.argv[1] == "expect":
        print(expect(float(sys.argv[2])))
    else:
        print(show(Path(sys.argv[2])))


if __name__ == "__main__":
    main()
