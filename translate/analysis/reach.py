"""Time to quality: when a run's validations first reached a dev BLEU ("minutes to 38").

A validation record whose "dev_bleu_sentences" is set scored only the first dev sentences (the
cheap probe an untrained model gets, translate/training/validation.py): it never counts as
reaching a threshold, nor as the run's best.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Optional, Sequence

from translate.analysis.plots import MetricsError, plot_learning_curves, read_metrics
from translate.utils import atomic_write


@dataclass(frozen=True)
class Reached:
    """The first full-dev validation at or over a threshold."""

    minutes: float  # wall-clock since the run began, validations included
    train_minutes: Optional[float]  # time in optimizer steps alone (None: not logged)
    step: int
    dev_bleu: float


@dataclass(frozen=True)
class Reach:
    """One run's answer for one threshold: when it was first reached, or the best it got to."""

    run: str
    threshold: float
    reached: Optional[Reached]
    best_bleu: Optional[float]  # over full-dev validations (None: there were none)
    best_minutes: Optional[float]

    def line(self) -> str:
        head = f"{self.run}: dev BLEU {self.threshold:.1f}"
        if self.reached is not None:
            r = self.reached
            training = "" if r.train_minutes is None else f", {r.train_minutes:.1f} training min"
            return f"{head} first at {r.minutes:.1f} min (step {r.step}{training})"
        if self.best_bleu is None:
            return f"{head} never reached (no full-dev validation)"
        return (f"{head} never reached (best {self.best_bleu:.1f} at {self.best_minutes:.1f} "
                f"min)")


def _number(record: dict, key: str, where: str, optional: bool = False) -> Optional[float]:
    value = record.get(key)
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        raise MetricsError(f"{where}: its validation at step {record.get('step')!r} has "
                           f"{value!r} under '{key}', not a number")
    return value


def full_dev(valid: Sequence[dict], source: str | Path = "metrics log") -> list[dict]:
    """The validations that scored all of dev (probes left out), checked to hold step, elapsed
    and dev_bleu as numbers and to be in order (steps rising, elapsed never falling).

    Raises:
        MetricsError naming `source` (the metrics log the records came from).
    """
    previous = None
    for record in valid:
        for key in ("step", "elapsed", "dev_bleu"):
            _number(record, key, str(source))
        _number(record, "train_seconds", str(source), optional=True)
        if previous is not None and (record["step"] <= previous["step"]
                                     or record["elapsed"] < previous["elapsed"]):
            raise MetricsError(
                f"{source}: validations out of order: step {record['step']} (elapsed "
                f"{record['elapsed']} s) after step {previous['step']} (elapsed "
                f"{previous['elapsed']} s)")
        previous = record
    return [r for r in valid if "dev_bleu_sentences" not in r]


def first_reached(valid: Sequence[dict], threshold: float,
                  source: str | Path = "metrics log") -> Optional[Reached]:
    """When `valid` (a run's "valid" records, in order) first scored a dev BLEU of at least
    `threshold` on all of dev; None if it never did. Probes on the first dev sentences don't
    count."""
    for record in full_dev(valid, source):
        if record["dev_bleu"] >= threshold:
            seconds = record.get("train_seconds")
            return Reached(record["elapsed"] / 60, None if seconds is None else seconds / 60,
                           record["step"], record["dev_bleu"])
    return None


def run_reach(run_dir: str | Path, thresholds: Sequence[float]) -> list[Reach]:
    """`first_reached` of each threshold for the run in `run_dir`, with its best dev BLEU."""
    source = Path(run_dir) / "metrics.jsonl"
    valid = [r for r in read_metrics(run_dir) if r["kind"] == "valid"]
    full = full_dev(valid, source)
    best = max(full, key=lambda r: r["dev_bleu"], default=None)  # the first of equal bests
    return [Reach(str(run_dir), t, first_reached(valid, t, source),
                  None if best is None else best["dev_bleu"],
                  None if best is None else best["elapsed"] / 60) for t in thresholds]


def curve(run_dirs: Sequence[str | Path], output: str | Path, monitor: str = "test_2016_flickr",
          x: str = "minutes", reach: Sequence[float] = (),
          json_path: str | Path | None = None) -> list[str]:
    """`translate curve`: the learning-curve figure (with `reach`'s thresholds drawn), then the
    lines to print: one per run and threshold, and where the figure (and JSON) went."""
    reaches = [r for run_dir in run_dirs for r in run_reach(run_dir, reach)]
    figure = plot_learning_curves(list(run_dirs), output, monitor, x, thresholds=reach)
    lines = [r.line() for r in reaches] + [f"wrote {figure}"]
    if json_path is not None:
        with atomic_write(json_path, "w") as f:
            f.write(json.dumps([asdict(r) for r in reaches], indent=2) + "\n")
        lines.append(f"wrote {json_path}")
    return lines
