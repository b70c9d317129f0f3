"""Data pipeline at WMT size: pairs/s and peak memory from raw text to token batches.

    python benchmarks/data_scale.py --sizes 1000000,4500000 --work /tmp/data_scale \
        --json benchmarks/results/data_scale.json

A synthetic EN-DE corpus of each size is written by this script (no network): Zipf-distributed
pseudo-words, 4-40 words a sentence, the German side a noisy rewrite of the English one. One
SentencePiece model (8k unigram) is trained on the smallest corpus and used for all sizes, so the
figures measure the pipeline, not tokenizer training. Each measurement runs in a fresh process,
so its peak RSS (VmHWM) is its own; the encoding workers' figure is `ru_maxrss` over them, an
upper bound (it counts what the measuring process held when it started them):

  cold        encode the train split onto disk (`translate.data.cache`, cache empty, --num-proc
              worker processes), filter lengths, build the epoch's token batches
  warm        the same with the encoded corpus in place: what `translate train` does before its
              first step on an already-encoded corpus
  spm_encode  SentencePiece's command-line encoder (C++) on the same text as plain files, both
              sides: the limit that encoding through Python can approach
  first_step  `translate train` (the Multi30k recipe's model, this tokenizer) on the already-
              encoded corpus: seconds from the command's start to its first optimizer step
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import resource
import shutil
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


def measure(corpus: Path, tokenizer: Path, cache: Path, num_proc: int = 2) -> dict:
    """One measurement (run in a child process): seconds per stage and peak RSS."""
    import torch

    from translate.config import DataConfig
    from translate.data.batch import token_batches
    from translate.data.cache import encoded_corpus
    from translate.data.encode import filter_lengths
    from translate.hardware import benchmark_threads
    from translate.tokenizer import Tokenizer

    torch.set_num_threads(benchmark_threads())
    model = tokenizer.read_bytes()
    times, start = {}, time.perf_counter()
    built = encoded_corpus(DataConfig(dataset=str(corpus), cache_dir=str(cache)), "train",
                           Tokenizer(model, model), num_proc)
    times["encode"] = time.perf_counter() - start
    t0 = time.perf_counter()
    train = filter_lengths(built.pairs, 250, 3.0, built.stats)
    batches = token_batches(train.src.lengths, train.tgt.lengths, 25000, True, 1,
                            train.length_filter)
    times["batches"] = time.perf_counter() - t0
    times["total"] = time.perf_counter() - start
    pairs = built.stats.total
    workers_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return {"seconds": times, "peak_rss_gib": peak_rss_gib(),
            "workers_peak_rss_gib": workers_kib / 2 ** 20, "pairs": pairs,
            "kept": len(train), "batches": len(batches), "pairs_per_s": pairs / times["total"],
            "encode_pairs_per_s": pairs / times["encode"]}


def peak_rss_gib(pid: str = "self") -> float:
    """A process's peak resident memory (VmHWM). Not `ru_maxrss`: Linux carries that across
    fork and exec, so a child would report its parent's peak when that was higher."""
    status = Path(f"/proc/{pid}/status").read_text()
    return int(next(line.split()[1] for line in status.splitlines()
                    if line.startswith("VmHWM"))) / 2 ** 20


def spm_encode(text: Path, tokenizer: Path) -> dict:
    """SentencePiece's own command-line encoder over both sides (one thread, C++)."""
    seconds = 0.0
    for side in ("en", "de"):
        t0 = time.perf_counter()
        subprocess.run(["spm_encode", f"--model={tokenizer}", "--output_format=id",
                        f"--input={text / f'train.{side}'}", "--output=/dev/null"], check=True)
        seconds += time.perf_counter() - t0
    pairs = sum(1 for _ in open(text / "train.en", "rb"))
    return {"seconds": {"encode": seconds}, "pairs": pairs, "encode_pairs_per_s": pairs / seconds}


def first_step(corpus: Path, tokenizer: Path, cache: Path, run_dir: Path) -> dict:
    """Seconds from `translate train` starting to its first step's record; its peak RSS then."""
    subprocess.run(["rm", "-rf", str(run_dir)], check=True)
    metrics = run_dir / "metrics.jsonl"
    settings = [f"tokenizer.model={tokenizer}", f"data.cache_dir={cache}", "data.test_splits=[]",
                "data.max_len=250", "train.log_every=1", "train.max_steps=5",
                "train.max_tokens=4096"]
    command = [sys.executable, "-m", "translate", "train",
               str(ROOT / "recipes/multi30k/transformer.yaml"), "--data", str(corpus),
               "--run-dir", str(run_dir), "--device", "cpu",
               *(arg for setting in settings for arg in ("--set", setting))]
    start = time.perf_counter()
    process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True)
    try:
        while not (metrics.is_file() and '"train"' in metrics.read_text()):
            if process.poll() is not None:
                raise RuntimeError(f"translate train ended: {process.stderr.read()[-2000:]}")
            time.sleep(0.05)
        seconds = time.perf_counter() - start
        peak = peak_rss_gib(str(process.pid))
    finally:
        process.kill()
        process.wait()
    return {"seconds": {"total": seconds}, "peak_rss_gib": peak}


def child(corpus: Path, tokenizer: Path, cache: Path, num_proc: int) -> dict:
    out = subprocess.run([sys.executable, __file__, "--measure", str(corpus), str(tokenizer),
                          str(cache), str(num_proc)], check=True, capture_output=True, text=True,
                         cwd=ROOT)
    return json.loads(out.stdout.strip().splitlines()[-1])


def plain_text(corpus: Path) -> Path:
    """The corpus's train split as train.en + train.de, for spm_encode (once)."""
    folder = corpus / "text"
    if not (folder / "train.de").is_file():
        folder.mkdir(exist_ok=True)
        with open(corpus / "train.jsonl", encoding="utf-8") as rows, \
                open(folder / "train.en", "w", encoding="utf-8") as en, \
                open(folder / "train.de.tmp", "w", encoding="utf-8") as de:
            for line in rows:
                row = json.loads(line)
                en.write(row["en"] + "\n")
                de.write(row["de"] + "\n")
        (folder / "train.de.tmp").rename(folder / "train.de")
    return folder


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1000000,4500000")
    ap.add_argument("--work", type=Path, default=Path("/tmp/data_scale"))
    ap.add_argument("--json", type=Path)
    ap.add_argument("--num-proc", type=int, default=2, help="encoding worker processes")
    ap.add_argument("--measure", nargs=4, metavar=("CORPUS", "TOKENIZER", "CACHE", "NUM_PROC"),
                    help=argparse.SUPPRESS)
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    if args.measure:
        corpus, tokenizer, cache, num_proc = args.measure
        print(json.dumps(measure(Path(corpus), Path(tokenizer), Path(cache), int(num_proc))))
        return
    sizes = [int(s) for s in args.sizes.split(",")]
    corpora = {n: make_corpus(args.work / f"corpus-{n}", n) for n in sizes}
    tokenizer = args.work / "spm.model"
    if not tokenizer.is_file():
        from translate.config import DataConfig, TokenizerConfig
        from translate.data.read import load_split
        from translate.tokenizer import train_sentencepiece

        src, tgt = load_split(DataConfig(dataset=str(corpora[min(sizes)])), "train")
        tokenizer.write_bytes(train_sentencepiece(src[:200000] + tgt[:200000],
                                                  TokenizerConfig(vocab_size=8000)))
    report = {"sizes": {}}
    for n in sizes:
        cache = args.work / f"cache-{n}"
        subprocess.run(["rm", "-rf", str(cache)], check=True)
        row = {mode: child(corpora[n], tokenizer, cache, args.num_proc)  # cold: cache empty
               for mode in ("cold", "warm")}
        if shutil.which("spm_encode"):
            row["spm_encode"] = spm_encode(plain_text(corpora[n]), tokenizer)
            row["encode_vs_spm_encode"] = (row["cold"]["encode_pairs_per_s"]
                                           / row["spm_encode"]["encode_pairs_per_s"])
        row["first_step"] = first_step(corpora[n], tokenizer, cache, args.work / "run")
        report["sizes"][n] = row
        print(f"{n:>9,} pairs: cold {row['cold']['seconds']['total']:.0f} s "
              f"({row['cold']['encode_pairs_per_s']:,.0f} pairs/s encoding; peak "
              f"{row['cold']['peak_rss_gib']:.2f} GiB, workers {row['cold']['workers_peak_rss_gib']:.2f}"
              f" GiB); warm {row['warm']['seconds']['total']:.1f} s (peak "
              f"{row['warm']['peak_rss_gib']:.2f} GiB); encoding at "
              f"{row.get('encode_vs_spm_encode', float('nan')):.2f}x spm_encode; first step "
              f"after {row['first_step']['seconds']['total']:.1f} s (peak "
              f"{row['first_step']['peak_rss_gib']:.2f} GiB)", flush=True)
    if len(sizes) > 1:
        small, big = report["sizes"][min(sizes)], report["sizes"][max(sizes)]
        report["rss_growth"] = {mode: big[mode]["peak_rss_gib"] / small[mode]["peak_rss_gib"]
                                for mode in ("cold", "warm", "first_step")}
        print("peak RSS, largest vs smallest corpus:", {k: f"{v:.2f}x" for k, v in
                                                        report["rss_growth"].items()})
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
