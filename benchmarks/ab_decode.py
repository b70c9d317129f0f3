"""Decoding speed of two revisions of this repository, measured against each other chunk by chunk.

    python benchmarks/ab_decode.py CHECKPOINT REV_A REV_B --data ../shared/data/multi30k \
        --beams 1,5 --rounds 3 --json ab.json

Each revision's `translate/` package is exported (`git archive`) under a name of its own, so both
live in one process. The split is sorted by source length and cut into chunks of `--chunk`
sentences (default `--batch`); every chunk is decoded by A and then B (the order
alternating), so the VM's noise, which drifts over seconds, hits both alike. Printed per beam:
sentences/s of each, B's speed over A's in every round and their median, and how many outputs
are identical.
"""

from __future__ import annotations

import argparse
import importlib
import json
import re
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def export(rev: str, name: str, into: Path) -> None:
    """`translate/` at `rev` as the package `name` under `into`, its imports renamed."""
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "translate"],
                             check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    (into / "translate").rename(into / name)
    for path in (into / name).rglob("*.py"):
        text = re.sub(r"\btranslate\b(?=[. ])", name, path.read_text(encoding="utf-8"))
        path.write_text(text, encoding="utf-8")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("checkpoint")
    ap.add_argument("rev_a")
    ap.add_argument("rev_b")
    ap.add_argument("--data", default="../shared/data/multi30k")
    ap.add_argument("--split", default="test_2016_flickr")
    ap.add_argument("--beams", default="1,5")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--batch", type=int, default=32, help="sentences decoded at once")
    ap.add_argument("--chunk", type=int, default=0,
                    help="sentences per call (default: --batch)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()

    import torch

    torch.set_num_threads(args.threads)
    tmp = Path(tempfile.mkdtemp(prefix="ab_decode-"))
    sys.path.insert(0, str(tmp))
    systems = {}
    for label, rev in (("A", args.rev_a), ("B", args.rev_b)):
        name = f"translate_{label.lower()}"
        export(rev, name, tmp)
        load = importlib.import_module(f"{name}.checkpoint").load_checkpoint
        evaluation = importlib.import_module(f"{name}.evaluation")
        config = importlib.import_module(f"{name}.config")
        data = importlib.import_module(f"{name}.data")
        loaded = load(args.checkpoint)
        cfg = config.DecodeConfig(lenpen=0.6, batch_size=args.batch, max_tokens=10 ** 9)
        systems[label] = (evaluation.translate_sentences, loaded, cfg)
        src, _ = data.load_split(replace(loaded.recipe.data, dataset=args.data), args.split)
    tokenizer = systems["A"][1].tokenizer
    src = sorted(src, key=lambda s: len(tokenizer.encode_src([s])[0]))
    size = args.chunk or args.batch
    chunks = [src[i: i + size] for i in range(0, len(src), size)]

    report = {"rev_a": args.rev_a, "rev_b": args.rev_b, "sentences": len(src), "beams": {}}
    for beam in (int(b) for b in args.beams.split(",")):
        seconds = {label: [0.0] * args.rounds for label in systems}
        outputs = {label: [] for label in systems}
        for translate, loaded, cfg in systems.values():  # warm up
            translate(loaded.model, loaded.tokenizer, chunks[0], replace(cfg, beam=beam))
        for r in range(args.rounds):
            for c, chunk in enumerate(chunks):
                for label in ("A", "B") if (c + r) % 2 == 0 else ("B", "A"):
                    translate, loaded, cfg = systems[label]
                    start = time.perf_counter()
                    out = translate(loaded.model, loaded.tokenizer, chunk, replace(cfg, beam=beam))
                    seconds[label][r] += time.perf_counter() - start
                    if r == 0:
                        outputs[label] += out
        ratios = [a / b for a, b in zip(seconds["A"], seconds["B"])]
        same = sum(a == b for a, b in zip(outputs["A"], outputs["B"]))
        row = {label: len(src) / statistics.median(s) for label, s in seconds.items()}
        report["beams"][beam] = {"sent_per_s": row, "b_over_a_per_round": ratios,
                                 "b_over_a": statistics.median(ratios), "identical": same}
        print(f"beam {beam}: A {row['A']:.1f}, B {row['B']:.1f} sent/s; B/A "
              f"{statistics.median(ratios):.3f} (rounds {', '.join(f'{x:.3f}' for x in ratios)}); "
              f"identical outputs {same}/{len(src)}")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
