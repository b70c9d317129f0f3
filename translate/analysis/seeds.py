"""Several runs of one recipe (seeds) as one figure: each score's mean, spread and range.

`seed_spread(run_dirs)` reads each run folder's metrics.jsonl: its best dev BLEU (the highest
`valid` record) and, per test split, the BLEU and chrF of its `test` records (the last one of a
split, should a resumed run have scored it twice). `seed_groups(systems)` gathers the systems of
a comparison into groups by the `-seedN` ending `translate train --seeds` gives their folders.

Tests: tests/training/test_seeds.py, tests/reliability/test_seeds_input.py.
"""

from __future__ import annotations

import math
import re
import statistics
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Optional, Sequence

from translate.analysis.plots import MetricsError, read_metrics

DEV = "dev"  # the split name the best dev BLEU goes under
METRIC_NAMES = {"bleu": "BLEU", "chrf": "chrF"}


@dataclass(frozen=True)
class Spread:
    """One score over n runs: mean, sample standard deviation (n - 1; None for one run), range."""

    mean: float
    sd: Optional[float]
    low: float
    high: float
    n: int

    @classmethod
    def of(cls, values: Sequence[float]) -> "Spread":
        values = [float(v) for v in values]
        sd = statistics.stdev(values) if len(values) > 1 else None
        return cls(statistics.fmean(values), sd, min(values), max(values), len(values))

    def __str__(self) -> str:
        sd = f"± {self.sd:.2f}" if self.sd is not None else "(sd undefined: one run)"
        return f"{self.mean:.2f} {sd}  [{self.low:.2f}, {self.high:.2f}]  n={self.n}"


@dataclass(frozen=True)
class SeedSpread:
    """Every run's scores and their spread. `scores[split][metric]` lists one value per run, in
    `runs` order; `spread[split][metric]` summarises them. Split "dev" holds the best dev BLEU;
    a test split is there only when every run scored it."""

    runs: list[str]
    scores: dict[str, dict[str, list[float]]]
    spread: dict[str, dict[str, Spread]]


def run_scores(run_dir: str | Path) -> dict[str, dict[str, float]]:
    """{"dev": {"bleu": best dev BLEU}, split: {"bleu": ..., "chrf": ...}} from a run's metrics
    log; a MetricsError names a log without validation records."""
    records = read_metrics(run_dir)
    dev = [r["dev_bleu"] for r in records if r["kind"] == "valid"]
    if not dev:
        raise MetricsError(f"{Path(run_dir) / 'metrics.jsonl'}: no validation records")
    scores = {DEV: {"bleu": max(dev)}}
    for r in records:
        if r["kind"] == "test" and isinstance(r.get("split"), str):
            scores[r["split"]] = {"bleu": r["bleu"],
                                  **({"chrf": r["chrf"]} if "chrf" in r else {})}
    return scores


def seed_spread(run_dirs: Sequence[str | Path]) -> SeedSpread:
    """Each split's scores over `run_dirs` (runs of one recipe with different seeds, say)."""
    if not run_dirs:
        raise ValueError("no run folders to summarise")
    each = [run_scores(d) for d in run_dirs]
    scores: dict[str, dict[str, list[float]]] = {}
    for split in each[0]:
        if all(split in s for s in each):
            metrics = [m for m in each[0][split] if all(m in s[split] for s in each)]
            scores[split] = {m: [s[split][m] for s in each] for m in metrics}
    spread = {split: {m: Spread.of(v) for m, v in by_metric.items()}
              for split, by_metric in scores.items()}
    return SeedSpread([str(d) for d in run_dirs], scores, spread)


def spread_text(result: SeedSpread, labels: Optional[Sequence[str]] = None) -> str:
    """The spread as `translate train --seeds` prints it: one line per run and split, then each
    score's mean ± sd [min, max] n."""
    labels = list(labels or result.runs)
    lines = []
    for split, by_metric in result.scores.items():
        name = "best dev" if split == DEV else split
        lines.append(f"\n== {name} ==")
        for i, label in enumerate(labels):
            lines.append(f"{label}: " + "  ".join(f"{METRIC_NAMES[m]} {v[i]:.2f}"
                                                  for m, v in by_metric.items()))
        lines += [f"{METRIC_NAMES[m]} mean {s}"
                  for m, s in result.spread[split].items()]
    return "\n".join(lines)


SEED_SUFFIX = re.compile(r"(.+)-seed\d+")


def seed_group(run_dir: str | Path, checkpoint: str = "best.pt") -> str:
    """The group a run belongs to: its folder's name less the `-seedN` ending (`base-seed2` is in
    `base`), with the checkpoint's name when it is not best.pt; a folder without that ending is a
    group of its own."""
    name = Path(run_dir).resolve().name
    match = SEED_SUFFIX.fullmatch(name)
    group = match.group(1) if match else name
    return group if checkpoint == "best.pt" else f"{group}-{Path(checkpoint).stem}"


def seed_groups(systems: Sequence[dict], metrics: Sequence[str] = ("bleu", "chrf")) -> list[dict]:
    """Each group's spread of `metrics` over its systems (dicts holding run_dir, checkpoint, name
    and the metrics, as compare's results list them), and its difference of means from the first
    group with that difference's standard error, sqrt(sd_a²/n_a + sd_b²/n_b) (None while either
    sd is undefined). Empty when no group holds two systems: there is no spread to show."""
    grouped: dict[str, list[dict]] = {}
    for system in systems:
        grouped.setdefault(seed_group(system["run_dir"], system["checkpoint"]), []).append(system)
    if all(len(members) == 1 for members in grouped.values()):
        return []
    out: list[dict] = []
    for group, members in grouped.items():
        spreads = {m: Spread.of([s[m] for s in members]) for m in metrics}
        entry = {"group": group, "systems": [s["name"] for s in members],
                 **{m: asdict(spread) for m, spread in spreads.items()}}
        if out:
            base = out[0]
            entry["difference"] = {m: _difference(Spread(**base[m]), spreads[m]) for m in metrics}
        out.append(entry)
    return out


def _difference(a: Spread, b: Spread) -> dict:
    se = (math.sqrt(a.sd ** 2 / a.n + b.sd ** 2 / b.n)
          if a.sd is not None and b.sd is not None else None)
    return {"mean": b.mean - a.mean, "se": se}
