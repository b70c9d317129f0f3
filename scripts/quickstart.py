"""What the quickstart says before and after its training run.

    python scripts/quickstart.py expect MINUTES     # what the run will say, and when
    python scripts/quickstart.py show RUN_DIR       # a few test translations and what to try next
"""

from __future__ import annotations

import os
import sys
from dataclasses import replace
from pathlib import Path


def expect(minutes: float) -> str:
    """What the quickstart says before training: the size and the promise come from this
    machine."""
    return (f"training the default recipe for {minutes:g} minutes, at the size of its ladder "
            f"that this machine trains furthest in them: `translate train` first times a few "
            f"steps of each size here, and says the step the {minutes:g} minutes will reach with "
            f"each and the greedy dev BLEU each size's recorded curve gives there "
            f"(translate/training/sizes.py). After the first minute it measures the steps a "
            f"minute again and says what the rest of the budget buys.")


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
