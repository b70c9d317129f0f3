"""Data pipeline at WMT size: pairs/s and peak memory from raw text to token batches.

    python benchmarks/data_scale.py --sizes 1000000,4500000 --work /tmp/data_scale \
        --json benchmarks/results/data_scale.json

A synthetic EN-DE corpus of each size is written by this script (no network): Zipf-distributed
pseudo-words, 4-40 words a sentence, the German side a noisy rewrite of the English one. One
SentencePiece model (8k unigram) is trained on the smallest corpus and used for all sizes, so the
figures measure the pipeline, not tokenizer training. Each measurement runs in a fresh process,
so its peak RSS (`ru_maxrss`) is its own:

  cold    read the train split, clean it, encode it (cache empty), filter lengths, build the
          epoch's token batches
  warm    the same with the encoded cache in place: what `translate train` does before its first
          step on an already-encoded corpus
  spm     SentencePiece's own batch encoder (C++, 2 threads) on the same text: the limit that
          encoding through Python can approach
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def make_corpus(folder: Path, pairs: int, seed: int = 1) -> Path:
    """train.jsonl with `pairs` synthetic pairs and a 1000-pair validation.jsonl, once."""
    done = folder / "train.jsonl"
    if done.is_file():
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    letters = "abcdefghijklmnopqrstuvwxyz"
    words = ["".join(rng.choice(letters) for _ in range(rng.randint(2, 9))) for _ in range(30000)]
    cumulative = list(itertools.accumulate(1 / (rank + 1) for rank in range(len(words))))  # Zipf

    def sentence_pair() -> dict:
        en = rng.choices(words, cum_weights=cumulative, k=rng.randint(4, 40))
        de = [w[::-1] if rng.random() < 0.3 else w + "en" for w in en]
        return {"en": " ".join(en).capitalize() + ".", "de": " ".join(de).capitalize() + "."}

    for name, n in (("validation.jsonl", 1000), ("train.jsonl.tmp", pairs)):
        with open(folder / name, "w", encoding="utf-8") as f:
            for _ in range(n):
                f.write(json.dumps(sentence_pair()) + "\n")
    (folder / "train.jsonl.tmp").rename(done)
    return folder


def measure(mode: str, corpus: Path, tokenizer: Path, cache: Path) -> dict:
    """One measurement (run in a child process): seconds per stage and peak RSS."""
    import torch

    from translate.config import DataConfig
    from translate.data import clean_text_pairs, encode_pairs, filter_lengths, load_split, \
        token_batches
    from translate.tokenizer import Tokenizer

    torch.set_num_threads(2)
    model = tokenizer.read_bytes()
    tok = Tokenizer(model, model)
    times, start = {}, time.perf_counter()
    src, tgt = load_split(DataConfig(dataset=str(corpus)), "train")
    times["read"] = time.perf_counter() - start
    if mode == "spm":
        t0 = time.perf_counter()
        tok.src.encode(src, num_threads=2)
        tok.src.encode(tgt, num_threads=2)
        times["encode"] = time.perf_counter() - t0
    else:
        t0 = time.perf_counter()
        keep, stats = clean_text_pairs(src, tgt)
        src, tgt = [src[i] for i in keep], [tgt[i] for i in keep]
        times["clean"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        pairs = filter_lengths(encode_pairs(tok, src, tgt, str(cache)), 250, 3.0, stats)
        times["encode"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        token_batches(pairs.src.lengths.tolist(), pairs.tgt.lengths.tolist(), 25000, True, 1)
        times["batches"] = time.perf_counter() - t0
    times["total"] = time.perf_counter() - start
    rss_gib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2 ** 20  # Linux: KiB
    return {"seconds": times, "peak_rss_gib": rss_gib, "pairs": len(src),
            "pairs_per_s": len(src) / times["total"],
            "encode_pairs_per_s": len(src) / times["encode"]}


def child(mode: str, corpus: Path, tokenizer: Path, cache: Path) -> dict:
    out = subprocess.run([sys.executable, __file__, "--measure", mode, str(corpus), str(tokenizer),
                          str(cache)], check=True, capture_output=True, text=True, cwd=ROOT)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1000000,4500000")
    ap.add_argument("--work", type=Path, default=Path("/tmp/data_scale"))
    ap.add_argument("--json", type=Path)
    ap.add_argument("--measure", nargs=4, metavar=("MODE", "CORPUS", "TOKENIZER", "CACHE"),
                    help=argparse.SUPPRESS)
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    if args.measure:
        mode, corpus, tokenizer, cache = args.measure
        print(json.dumps(measure(mode, Path(corpus), Path(tokenizer), Path(cache))))
        return
    sizes = [int(s) for s in args.sizes.split(",")]
    corpora = {n: make_corpus(args.work / f"corpus-{n}", n) for n in sizes}
    tokenizer = args.work / "spm.model"
    if not tokenizer.is_file():
        from translate.config import DataConfig, TokenizerConfig
        from translate.data import load_split
        from translate.tokenizer import train_sentencepiece

        src, tgt = load_split(DataConfig(dataset=str(corpora[min(sizes)])), "train")
        tokenizer.write_bytes(train_sentencepiece(src[:200000] + tgt[:200000],
                                                  TokenizerConfig(vocab_size=8000)))
    report = {"sizes": {}}
    for n in sizes:
        cache = args.work / f"cache-{n}"
        subprocess.run(["rm", "-rf", str(cache)], check=True)
        row = {mode: child(mode, corpora[n], tokenizer, cache) for mode in ("cold", "warm", "spm")}
        row["encode_vs_spm"] = (row["cold"]["encode_pairs_per_s"]
                                / row["spm"]["encode_pairs_per_s"])
        report["sizes"][n] = row
        print(f"{n:>9,} pairs: cold {row['cold']['seconds']['total']:.0f} s "
              f"({row['cold']['pairs_per_s']:,.0f} pairs/s, peak {row['cold']['peak_rss_gib']:.2f}"
              f" GiB); warm {row['warm']['seconds']['total']:.1f} s (peak "
              f"{row['warm']['peak_rss_gib']:.2f} GiB); encoding at "
              f"{row['encode_vs_spm']:.2f}x SentencePiece's C++ batch encoder", flush=True)
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
