"""Decoding's memory and speed by the size of its batches (`decode.max_tokens`, source tokens a
batch): a split translated at the recipe's beam, as a training run's end and `translate
evaluate` translate it, each size in a fresh process.

    python benchmarks/decode_batches.py RUN/best.pt --data ../shared/data/multi30k \
        --split test_2016_flickr --sizes 8000,4000,2000,1000 --rounds 3 --json decode_batches.json

Beam search holds every live hypothesis's self-attention keys and values, one row per beam
(K rows a sentence), and the logits of all rows at each step: a batch's memory grows with its
source tokens times the beam. What outlives the batches is read too: glibc's heap in use after
the split against after loading (`kept`: oneDNN's kernels for the shapes decoding met, where
its caches keep them; ONEDNN_PRIMITIVE_CACHE_CAPACITY in this script's environment sizes them).
Each size runs in a process of its own (a process's peak is its own), the sizes one after
another, the order reversed round by round. Printed per size: the decoding's seconds, the
process's resident memory after loading and at its peak, the heap kept, and the BLEU (the
batches change no translation beyond rounding); then each size's medians, its time over the
first size's.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

ONE = """
import json, sys
from dataclasses import replace
from pathlib import Path

import torch
from translate.data.read import load_split
from translate.evaluation import evaluate_split, read_from
from translate.hardware import benchmark_threads, cpu_name, resident_memory
from translate.loading import load_checkpoint
from translate.ready import Ready

sys.path.insert(0, str(Path.cwd() / "benchmarks"))
from memory_growth import heap_reader

checkpoint, data, split, size, beam, precision = sys.argv[1:7]
torch.set_num_threads(benchmark_threads())
loaded = load_checkpoint(checkpoint, "cpu")
recipe = loaded.recipe
src, tgt = load_split(read_from(recipe.data, data or None), split)
ready = Ready.prepare(loaded.model, loaded.tokenizer, torch.device("cpu"),
                      precision or recipe.train.precision, "auto", recipe, loaded.step)
read_heap = heap_reader()
loaded_rss, loaded_peak = resident_memory()
heap_loaded = read_heap().get("in_use")
cfg = replace(recipe.decode, max_tokens=int(size), beam=int(beam) or recipe.decode.beam)
done = evaluate_split(ready, src, tgt, cfg, recipe.data.tgt_lang)
now, peak = resident_memory()
heap_after = read_heap().get("in_use")
kept = None if heap_loaded is None else (heap_after - heap_loaded) / 2**20
print(json.dumps({"seconds": done.seconds, "bleu": done.scores.bleu, "loaded_mb":
                  loaded_rss / 2**20, "loading_peak_mb": loaded_peak / 2**20,
                  "peak_mb": peak / 2**20, "after_mb": now / 2**20, "kept_mb": kept,
                  "precision": ready.precision, "beam": cfg.beam, "cpu": cpu_name(),
                  "threads": torch.get_num_threads(), "sentences": len(src)}))
"""


def one(args, size: int) -> dict:
    """One size decoded in a fresh process: its figures."""
    data = str(Path(args.data).resolve()) if args.data and Path(args.data).exists() else args.data
    done = subprocess.run([sys.executable, "-c", ONE, str(args.checkpoint.resolve()), data or "",
                           args.split, str(size), str(args.beam), args.precision or ""],
                          cwd=ROOT, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        sys.exit(f"decoding with max_tokens {size} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("checkpoint", type=Path)
    ap.add_argument("--data", default=None, help="the dataset (default: the checkpoint's)")
    ap.add_argument("--split", default="test_2016_flickr")
    ap.add_argument("--sizes", default="8000,4000,2000,1000",
                    help="comma-separated decode.max_tokens, the first the reference")
    ap.add_argument("--beam", type=int, default=0, help="default: the recipe's")
    ap.add_argument("--precision", default=None, help="default: the recipe's, as evaluate")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", type=Path, default=Path("benchmarks/results/decode_batches.json"))
    args = ap.parse_args()
    try:
        sizes = [int(s) for s in args.sizes.split(",")]
    except ValueError:
        ap.error(f"--sizes takes whole numbers separated by commas, got {args.sizes!r}")
    if not sizes or min(sizes) < 1:
        ap.error(f"--sizes must be at least 1 each, got {args.sizes!r}")
    if not args.checkpoint.is_file():
        ap.error(f"no checkpoint at {args.checkpoint}")
    runs: dict[int, list[dict]] = {size: [] for size in sizes}
    for r in range(args.rounds):
        for size in sizes if r % 2 == 0 else reversed(sizes):
            row = one(args, size)
            runs[size].append(row)
            kept = float("nan") if row["kept_mb"] is None else row["kept_mb"]
            print(f"round {r + 1}  max_tokens {size:6d}: {row['seconds']:6.1f} s, resident "
                  f"{row['loaded_mb']:5.0f} MB loaded, peak {row['peak_mb']:5.0f} MB, kept "
                  f"{kept:4.0f} MB, BLEU {row['bleu']:.2f}", flush=True)
    first = sizes[0]
    median = {size: {key: statistics.median(r[key] for r in rows)
                     for key in ("seconds", "peak_mb", "loaded_mb", "bleu")}
                 | {"kept_mb": statistics.median(float("nan") if r["kept_mb"] is None
                                                 else r["kept_mb"] for r in rows)}
              for size, rows in runs.items()}
    print(f"\n{'max_tokens':>10s} {'seconds':>8s} {'peak MB':>8s} {'above loaded':>12s} "
          f"{'kept MB':>8s} {'BLEU':>6s} {'time vs ' + str(first):>14s}")
    for size, m in median.items():
        print(f"{size:10d} {m['seconds']:8.1f} {m['peak_mb']:8.0f} "
              f"{m['peak_mb'] - m['loaded_mb']:12.0f} {m['kept_mb']:8.0f} {m['bleu']:6.2f} "
              f"{m['seconds'] / median[first]['seconds']:14.3f}")
    sample = runs[first][0]
    report = {"checkpoint": str(args.checkpoint), "split": args.split, "rounds": args.rounds,
              "onednn_primitive_cache": os.environ.get("ONEDNN_PRIMITIVE_CACHE_CAPACITY"),
              **{k: sample[k] for k in ("precision", "beam", "cpu", "threads", "sentences")},
              "median": {str(k): v for k, v in median.items()},
              "runs": {str(k): v for k, v in runs.items()}}
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(report, indent=1) + "\n")
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
