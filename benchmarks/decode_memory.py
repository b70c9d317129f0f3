"""A long-lived decoding process's memory, call after call: the API as `translate serve` calls
it, with oneDNN's kernel caches at their sizes and at others, each in a process of its own.

    python benchmarks/decode_memory.py RUN --data ../shared/data/multi30k --calls 3000 \
        --settings default,none,64 --precision bf16 --json decode_memory.json

A server's calls come in every size: `translate serve` gathers what arrives within a few
milliseconds, up to `--max-batch` sentences, and beam search shrinks each call's batch as
its hypotheses finish. Under bf16, oneDNN runs the matmuls and keeps a kernel for each input
shape it meets, in two caches of 1,024 (`translate.hardware.KERNEL_CACHES`); a training
process keeps none, a decoding process keeps them, since kept kernels decode faster. This
script asks whether a decoder that lives for days pays for them in memory.

Each setting runs in a fresh process (the caches read their sizes once): `default` leaves the
sizes unset (1,024 each), `none` sets what a training process sets, a number N sizes both caches
at N. The process loads RUN once (`translate.api.Translator`) and makes `--calls` calls, each
of a random count of sentences (1 to `--max-batch`) drawn from the split, the same draws for
every setting (`--seed`); after each call it reads its resident memory and glibc's heap
(`mallinfo2`, as benchmarks/memory_growth.py). The settings run one after another, the order
alternating round by round over `--rounds`.

Printed per setting and round: resident memory after the first 10% of calls, at the half, at
the end and at its peak, the growth per 1,000 calls over the second half, glibc's free bytes
at the end and the sentences/s over all calls; then each setting's speed over the first's
(the median over rounds).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

MB = 1 << 20
CACHE_NAMES = ("LRU_CACHE_CAPACITY", "ONEDNN_PRIMITIVE_CACHE_CAPACITY")


def cache_env(setting: str) -> dict[str, str]:
    """The environment for one setting: its cache sizes set, or both unset (`default`)."""
    from translate.hardware import KERNEL_CACHES

    env = {k: v for k, v in os.environ.items() if k not in CACHE_NAMES}
    if setting == "none":
        env.update(KERNEL_CACHES)
    elif setting != "default":
        if not setting.isdigit():
            raise SystemExit(f"a setting is default, none or a number of kernels, got {setting!r}")
        env.update({name: setting for name in CACHE_NAMES})
    return env


def draws(count: int, calls: int, max_batch: int, seed: int) -> list[list[int]]:
    """Each call's sentence indices: a random count from 1 to max_batch, drawn at random."""
    rng = random.Random(seed)
    return [rng.sample(range(count), rng.randint(1, min(max_batch, count))) for _ in range(calls)]


def child(args) -> None:
    """One setting's process: load, decode the calls, write a row per call to --rows."""
    from memory_growth import heap_reader

    from translate.api import Translator
    from translate.config import DataConfig
    from translate.data.read import load_split
    from translate.hardware import resident_memory

    sentences = [s for s in load_split(DataConfig(dataset=args.data), args.split)[0] if s.strip()]
    translator = Translator.load(args.run, precision=args.precision)
    read_heap, rows = heap_reader(), []
    for i, call in enumerate(draws(len(sentences), args.calls, args.max_batch, args.seed), 1):
        start = time.perf_counter()
        translator.translate([sentences[j] for j in call], beam=args.beam)
        rows.append({"call": i, "sentences": len(call), "seconds": time.perf_counter() - start,
                     "rss": resident_memory()[0], **read_heap()})
    Path(args.rows).write_text(json.dumps({"precision": translator.precision, "rows": rows}))


def summary(rows: list[dict]) -> dict:
    """Resident memory along the run, its growth over the second half, the median speed."""
    n = len(rows)
    half = rows[n // 2:]
    calls = half[-1]["call"] - half[0]["call"] or 1
    out = {"calls": n,
           "resident_mb": {"tenth": rows[max(0, n // 10 - 1)]["rss"] / MB,
                           "half": half[0]["rss"] / MB, "last": rows[-1]["rss"] / MB,
                           "peak": max(r["rss"] for r in rows) / MB},
           "growth_mb_per_1000_calls": (half[-1]["rss"] - half[0]["rss"]) / MB / calls * 1000,
           "sentences_per_s": sum(r["sentences"] for r in rows) / sum(r["seconds"] for r in rows)}
    if "free" in rows[-1]:
        out["heap_free_last_mb"] = rows[-1]["free"] / MB
        out["heap_in_use_last_mb"] = rows[-1]["in_use"] / MB
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("run", help="a run folder, checkpoint or exported model folder")
    parser.add_argument("--data", required=True, help="where the sentences come from")
    parser.add_argument("--split", default="train")
    parser.add_argument("--calls", type=int, default=3000)
    parser.add_argument("--max-batch", type=int, default=64, help="translate serve's --max-batch")
    parser.add_argument("--beam", type=int, default=5)
    parser.add_argument("--precision", default="bf16")
    parser.add_argument("--settings", default="default,none",
                        help="comma-separated: default, none or a number of kernels")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--rows", help=argparse.SUPPRESS)  # a child's output file
    args = parser.parse_args()
    if args.rows:
        return child(args)

    settings = args.settings.split(",")
    envs = {s: cache_env(s) for s in settings}
    results: dict[str, list[dict]] = {s: [] for s in settings}
    precision = None
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            for s in settings if r % 2 == 0 else settings[::-1]:
                rows_file = Path(tmp) / f"{s}-{r}.json"
                argv = [sys.executable, __file__, *sys.argv[1:], "--rows", str(rows_file)]
                subprocess.run(argv, env=envs[s], check=True)
                got = json.loads(rows_file.read_text())
                precision = got["precision"]
                result = summary(got["rows"])
                results[s].append({**result, "rows": got["rows"]})
                mb = result["resident_mb"]
                print(f"round {r + 1} {s:>8}: resident {mb['tenth']:6.0f} -> {mb['half']:6.0f} "
                      f"-> {mb['last']:6.0f} MB (peak {mb['peak']:6.0f}), "
                      f"{result['growth_mb_per_1000_calls']:+6.1f} MB per 1,000 calls over the "
                      f"second half, heap free {result.get('heap_free_last_mb', float('nan')):6.0f}"
                      f" MB, {result['sentences_per_s']:6.1f} sentences/s", flush=True)
    first = settings[0]
    speed = {s: statistics.median(a["sentences_per_s"] / b["sentences_per_s"]
                                  for a, b in zip(results[s], results[first]))
             for s in settings}
    for s in settings[1:]:
        print(f"{s} over {first}: {speed[s]:.3f}x sentences/s (median over rounds)")
    if args.json:
        from translate.hardware import cpu_name
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({
            "cpu": cpu_name(), "run": str(args.run), "precision": precision,
            "calls": args.calls, "max_batch": args.max_batch, "beam": args.beam,
            "speed_over_first": speed, "results": results}) + "\n")


if __name__ == "__main__":
    main()
