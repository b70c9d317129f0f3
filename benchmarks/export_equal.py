"""How many lines of a split a CTranslate2 export translates exactly as we do, greedy and beam 5.

    python benchmarks/export_equal.py runs/RUN --data ../shared/data/multi30k \
        --split test_2016_flickr --json benchmarks/results/export_equal.json

The run's checkpoint is exported (`translate export --format ctranslate2`, float32) into a
temporary folder and decoded with `translate.export.ct2.decode`; ours is `translate decode
--no-early-exit` in fp32 with the default engine. Differing lines are printed with both outputs.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from dataclasses import replace
from pathlib import Path

import torch

from translate.checkpoint import load_checkpoint
from translate.data.read import load_split
from translate.export import export
from translate.export.ct2 import decode
from translate.hardware import cpu_name
from translate.inference import translate_sentences
from translate.ready import Ready


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run")
    parser.add_argument("--data", default=None)
    parser.add_argument("--split", default="test_2016_flickr")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    import ctranslate2

    torch.set_num_threads(args.threads)
    loaded = load_checkpoint(args.run)
    data = replace(loaded.recipe.data, dataset=args.data) if args.data else loaded.recipe.data
    src, _ = load_split(data, args.split)
    ready = Ready.prepare(loaded.model, loaded.tokenizer, torch.device("cpu"), "fp32", "auto")
    results = {"run": str(args.run), "split": args.split, "sentences": len(src),
               "cpu": cpu_name(), "ctranslate2": ctranslate2.__version__, "modes": {}}
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "ct2"
        export(args.run, "ctranslate2", out)
        translator = ctranslate2.Translator(str(out), "cpu", intra_threads=args.threads)
        for name, beam in (("greedy", 1), ("beam5", 5)):
            cfg = replace(loaded.recipe.decode, beam=beam, early_exit=False)  # as CT2 can
            ours = translate_sentences(ready, src, cfg)
            theirs = decode(translator, loaded.tokenizer, src, cfg, loaded.model.cfg.max_positions)
            differ = [i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b]
            results["modes"][name] = {"equal": len(src) - len(differ), "differ": differ}
            print(f"{name}: {len(src) - len(differ)} of {len(src)} lines equal")
            for i in differ:
                print(f"  line {i + 1}\n    ours: {ours[i]}\n    ct2:  {theirs[i]}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
