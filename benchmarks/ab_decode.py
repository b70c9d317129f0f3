"""Decoding speed of two revisions of this repository, measured against each other chunk by chunk.

    python benchmarks/ab_decode.py CHECKPOINT REV_A REV_B --data ../shared/data/multi30k \
        --beams 1,5 --precisions fp32,int8 --rounds 3 --json ab.json

Each revision's `translate/` package is exported (`git archive`) under a name of its own, so both
live in one process. The split is sorted by source length and cut into chunks of `--chunk`
sentences (default `--batch`); every chunk is decoded by A and then B (the order
alternating), so the VM's noise, which drifts over seconds, hits both alike. Printed per
precision and beam: sentences/s of each, B's speed over A's in every round and their median,
and how many outputs are identical. A revision with engines (`translate.engine`) decodes with
`--engine` (default fast); an older one with what it had.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import importlib
import importlib.util
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def benchmark_threads(default: int = 2) -> int:
    """OMP_NUM_THREADS where it is a whole number of at least 1, else `default`: the rule of
    translate.hardware.benchmark_threads, here without importing `translate` (this script
    compares two copies of it)."""
    value = os.environ.get("OMP_NUM_THREADS", "").strip()
    return int(value) if value.isdigit() and int(value) >= 1 else default


def export(rev: str, name: str, into: Path) -> None:
    """`translate/` at `rev` as the package `name` under `into`, its imports renamed. `rev` is a
    git revision, or a folder holding a copy of the repository (where there is no git history,
    as on a lent GPU machine: `git archive REV translate recipes | tar -x -C FOLDER`)."""
    if Path(rev).is_dir():
        shutil.copytree(Path(rev) / "translate", into / name,
                        ignore=shutil.ignore_patterns("__pycache__"))
    else:
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "translate"],
                                 check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
        (into / "translate").rename(into / name)
    for path in (into / name).rglob("*.py"):
        text = re.sub(r"\btranslate\b(?=[. ])", name, path.read_text(encoding="utf-8"))
        path.write_text(text, encoding="utf-8")


def first_module(name: str, *places: str):
    """The first of `places` (dotted paths inside the exported package `name`) that its revision
    has: the layout moved, e.g. `load_split` from `data` to `data.read`."""
    for place in places[:-1]:
        try:
            return importlib.import_module(f"{name}.{place}")
        except ModuleNotFoundError:
            continue
    return importlib.import_module(f"{name}.{places[-1]}")


def decoder(name: str, checkpoint: str, precision: str, engine: str):
    """(translate(sentences, cfg) -> translations, loaded checkpoint) for the exported package
    `name`, its model prepared for `precision` as `translate decode` prepares it."""
    import torch

    room = "loading" if importlib.util.find_spec(f"{name}.loading") else "checkpoint"  # moved
    loaded = importlib.import_module(f"{name}.{room}").load_checkpoint(checkpoint)
    cpu = torch.device("cpu")
    if importlib.util.find_spec(f"{name}.inference"):  # a revision with engines and inference.py
        inference = importlib.import_module(f"{name}.inference")
    else:
        inference = importlib.import_module(f"{name}.evaluation")
    if importlib.util.find_spec(f"{name}.ready"):  # a revision that sets the model up once
        ready = importlib.import_module(f"{name}.ready").Ready.prepare(
            loaded.model, loaded.tokenizer, cpu, precision, engine)
        translate = functools.partial(inference.translate_sentences, ready)
    else:
        if hasattr(inference, "decoding_model"):  # a revision with engines
            chosen = importlib.import_module(f"{name}.engine").resolve_engine(engine, cpu)
            model, precision = inference.decoding_model(loaded.model, precision, cpu, chosen)
            extra = {"engine": chosen}
        else:
            quantize = importlib.import_module(f"{name}.quantize")
            model, precision = quantize.decoding_model(loaded.model, precision, cpu)
            extra = {}
        translate = functools.partial(inference.translate_sentences, model, loaded.tokenizer,
                                      device="cpu", precision=precision, **extra)
    own = importlib.import_module(f"{name}.config").DecodeConfig
    known = {f.name for f in dataclasses.fields(own)}

    def run(sentences, cfg):
        """`cfg` as this revision's own DecodeConfig: the settings it knows, its defaults for
        the rest."""
        return translate(sentences, own(**{k: v for k, v in dataclasses.asdict(cfg).items()
                                           if k in known}))
    return run, loaded


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("checkpoint")
    ap.add_argument("rev_a")
    ap.add_argument("rev_b")
    ap.add_argument("--data", default="../shared/data/multi30k")
    ap.add_argument("--split", default="test_2016_flickr")
    ap.add_argument("--beams", default="1,5")
    ap.add_argument("--precisions", default="fp32", help="comma-separated: fp32, bf16, int8")
    ap.add_argument("--engine", default="fast", help="for revisions with engines")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--batch", type=int, default=32, help="sentences decoded at once")
    ap.add_argument("--chunk", type=int, default=0,
                    help="sentences per call (default: --batch)")
    ap.add_argument("--threads", type=int, default=benchmark_threads(),
                    help="CPU threads (default: OMP_NUM_THREADS, else 2)")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()

    import torch

    torch.set_num_threads(args.threads)
    tmp = Path(tempfile.mkdtemp(prefix="ab_decode-"))
    sys.path.insert(0, str(tmp))
    names = {}
    for label, rev in (("A", args.rev_a), ("B", args.rev_b)):
        names[label] = f"translate_{label.lower()}"
        export(rev, names[label], tmp)
    data = first_module(names["A"], "data.read", "data")
    config = importlib.import_module(f"{names['A']}.config")
    report = {"rev_a": args.rev_a, "rev_b": args.rev_b, "engine": args.engine, "results": {}}
    for precision in args.precisions.split(","):
        systems = {label: decoder(name, args.checkpoint, precision, args.engine)
                   for label, name in names.items()}
        loaded = systems["A"][1]
        src, _ = data.load_split(replace(loaded.recipe.data, dataset=args.data), args.split)
        src = sorted(src, key=lambda s: len(loaded.tokenizer.encode_src([s])[0]))
        size = args.chunk or args.batch
        chunks = [src[i: i + size] for i in range(0, len(src), size)]
        cfg = config.DecodeConfig(lenpen=0.6, batch_size=args.batch, max_tokens=10 ** 9)
        report["sentences"] = len(src)
        for beam in (int(b) for b in args.beams.split(",")):
            row = ab_rounds(systems, chunks, replace(cfg, beam=beam), args.rounds)
            report["results"][f"{precision} beam {beam}"] = row
            print(f"{precision} beam {beam}: {speeds(row, 'sent_per_s', 'sent/s', 1)}; "
                  f"identical outputs {row['identical']}/{len(src)}", flush=True)
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")


def speeds(row: dict, key: str, unit: str, digits: int) -> str:
    """'A x, B y unit; B/A r (rounds r1, r2, ...)' for a row of an A/B."""
    a, b = row[key]["A"], row[key]["B"]
    rounds = ", ".join(f"{x:.3f}" for x in row["b_over_a_per_round"])
    return (f"A {a:.{digits}f}, B {b:.{digits}f} {unit}; B/A {row['b_over_a']:.3f} "
            f"(rounds {rounds})")


def ab_rounds(systems: dict, chunks: list[list[str]], cfg, rounds: int) -> dict:
    """Time A and B chunk by chunk, in alternating order, for `rounds` rounds."""
    seconds = {label: [0.0] * rounds for label in systems}
    outputs = {label: [] for label in systems}
    for translate, _ in systems.values():  # warm up
        translate(chunks[0], cfg)
    for r in range(rounds):
        for c, chunk in enumerate(chunks):
            for label in ("A", "B") if (c + r) % 2 == 0 else ("B", "A"):
                start = time.perf_counter()
                out = systems[label][0](chunk, cfg)
                seconds[label][r] += time.perf_counter() - start
                if r == 0:
                    outputs[label] += out
    ratios = [a / b for a, b in zip(seconds["A"], seconds["B"])]
    sentences = sum(len(c) for c in chunks)
    return {"sent_per_s": {label: sentences / statistics.median(s) for label, s in seconds.items()},
            "b_over_a_per_round": ratios, "b_over_a": statistics.median(ratios),
            "identical": sum(a == b for a, b in zip(outputs["A"], outputs["B"]))}


if __name__ == "__main__":
    main()
