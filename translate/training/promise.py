"""What a training budget buys on this machine, said before most of it is spent: the steps this
machine makes a minute, measured on the run's first minute, and the greedy dev BLEU the recipe's
recorded curve gives at the step the budget will reach.

In fp32 a recipe's per-step curve is the same on every CPU (the same batches, the same updates),
and under the inverse square-root learning rate it does not depend on the budget either, so
"N minutes on this machine" is "the step N minutes reach here", read off a curve recorded once.
The curves are translate/training/curves/*.json (scripts/record_curve.py writes one from run
folders), each with the recipe it was recorded with; a run whose recipe differs from every
curve's in a key that changes the steps (model, tokenizer, data filtering, batch, optimizer,
schedule) gets its speed and no BLEU, and is told which key differs.
"""

from __future__ import annotations

import bisect
import json
import logging
import math
from dataclasses import dataclass
from pathlib import Path

from translate.config import Recipe
from translate.metrics import MetricsLog

log = logging.getLogger(__name__)

CURVES = Path(__file__).with_name("curves")
# recipe keys that change neither the updates nor their order, so a curve holds across them;
# precision among them: bf16 steps follow fp32's per-step curve within the seeds' spread; and
# length_multiple, whose padding a step's batches pay for in real tokens (lengths rounded up to 8:
# dev BLEU 32.70 at step 901 against 32 on the curve recorded with 1, Intel Xeon with AMX)
FREE_KEYS = {
    "data": {"dataset", "subset", "test_splits", "cache_dir", "num_proc"},
    "tokenizer": {"spec"},  # the file its keys came from: the keys themselves are compared
    "train": {"seed", "precision", "max_steps", "max_epochs", "max_minutes", "eval_every",
              "eval_every_minutes", "monitor_splits", "valid_beam", "patience", "keep_last",
              "pick", "step_checkpoints", "save_every", "max_bad_losses", "log_every", "threads",
              "keep_freed_memory", "compile", "cuda_graphs", "engine", "loss_chunk", "size",
              "length_multiple"},
}
FREE_SECTIONS = {"decode"}
LONGER = (10, 30, 60)  # budgets (minutes) the promise also prices, where longer than the run's
MEASURE_SECONDS = 60.0  # the run's speed is measured over its first minute of training ...
SETTLE_STEPS = 10  # ... after its first steps, whose kernels and allocations are new


def comparable(recipe: dict) -> dict:
    """`recipe` (Recipe.to_dict()) without the keys and sections a curve holds across."""
    return {section: {k: v for k, v in values.items() if k not in FREE_KEYS.get(section, ())}
            for section, values in recipe.items() if section not in FREE_SECTIONS}


def differences(ours: dict, theirs: dict) -> list[str]:
    """The keys where two comparable recipes differ, as "section.key: ours (curve: theirs)"."""
    found = []
    for section in sorted(set(ours) | set(theirs)):
        a, b = ours.get(section, {}), theirs.get(section, {})
        for key in sorted(set(a) | set(b)):
            if a.get(key) != b.get(key):
                found.append(f"{section}.{key}: {a.get(key)} (curve: {b.get(key)})")
    return found


@dataclass(frozen=True)
class RecordedCurve:
    """A recipe's greedy dev BLEU by step, the mean of recorded runs."""

    name: str
    recipe: dict  # comparable(): what it was recorded with
    points: tuple[tuple[int, float], ...]  # (step, dev BLEU), steps ascending, (0, 0) first
    validation_steps: float  # one validation's time, in steps of training
    recorded: str  # the runs, machines and command that recorded it
    size: str = ""  # its rung's name in the recipe's ladder (`training.sizes`); "": none
    parameters: int = 0  # the model's weights

    @classmethod
    def load(cls, path: Path) -> RecordedCurve:
        raw = json.loads(path.read_text(encoding="utf-8"))
        points = tuple((int(s), float(b)) for s, b in raw["points"])
        if not points or points[0] != (0, 0.0) or any(
                a[0] >= b[0] for a, b in zip(points, points[1:])):
            raise ValueError(f"{path}: points must start at (0, 0) with steps ascending")
        return cls(raw["name"], comparable(raw["recipe"]), points, float(raw["validation_steps"]),
                   raw["recorded"], raw.get("size", ""), int(raw.get("parameters", 0)))

    @property
    def last_step(self) -> int:
        return self.points[-1][0]

    def bleu_at(self, step: float) -> float:
        """The dev BLEU at `step`, interpolated between recorded points; the last one past them."""
        steps = [s for s, _ in self.points]
        i = bisect.bisect_right(steps, step)
        if i >= len(steps):
            return self.points[-1][1]
        (s0, b0), (s1, b1) = self.points[i - 1], self.points[i]
        return b0 + (b1 - b0) * (step - s0) / (s1 - s0)


def recorded_curves(folder: Path | None = None) -> list[RecordedCurve]:
    """The curves recorded in `folder` (CURVES by default), by file name."""
    return [RecordedCurve.load(path) for path in sorted((folder or CURVES).glob("*.json"))]


def find_curve(recipe: Recipe, folder: Path | None = None) -> tuple[RecordedCurve | None, str]:
    """The curve recorded with `recipe` (up to FREE_KEYS), or None and why there is none."""
    if recipe.train.lr_schedule != "inverse_sqrt":
        return None, (f"train.lr_schedule {recipe.train.lr_schedule} decays with the budget, so "
                      f"its curve is the budget's own")
    ours, nearest = comparable(recipe.to_dict()), None
    for curve in recorded_curves(folder):
        differ = differences(ours, curve.recipe)
        if not differ:
            return curve, ""
        if nearest is None or len(differ) < len(nearest[1]):
            nearest = (curve, differ)
    if nearest is None:
        return None, "no curve is recorded"
    curve, differ = nearest
    more = f" and {len(differ) - 2} more" if len(differ) > 2 else ""
    return None, (f"the nearest recorded curve ({curve.name}) differs in "
                  f"{'; '.join(differ[:2])}{more}")


@dataclass(frozen=True)
class Promise:
    """What the rest of a budget buys at the measured speed."""

    steps_per_minute: float
    tokens_per_second: float
    budget: str  # "10 minutes" or "3000 steps"
    steps: int  # the step the run will end near
    minutes: float  # the run's minutes at its end
    dev_bleu: float | None  # the curve's, at `steps`; None without a curve
    longer: tuple[tuple[int, int, float], ...]  # (minutes, steps, dev BLEU) of longer budgets
    curve: str  # the curve's name, or why there is none
    beyond_curve: bool  # `steps` past the curve's last point: its BLEU is a floor

    def message(self) -> str:
        speed = (f"this machine makes {self.steps_per_minute:.0f} steps a minute "
                 f"({self.tokens_per_second:,.0f} target tokens/s)")
        end = f"the {self.budget} end near step {self.steps:,}"
        if self.dev_bleu is None:
            return f"{speed}: {end} (no dev BLEU to expect: {self.curve})"
        floor = "at least " if self.beyond_curve else "about "
        text = (f"{speed}: {end}, where the recipe's recorded curve gives a greedy dev BLEU of "
                f"{floor}{self.dev_bleu:.0f}")
        if self.longer:
            text += "; " + ", ".join(f"{m} minutes: step {s:,}, about {b:.0f}"
                                     for m, s, b in self.longer)
        return text + f" ({self.curve})"

    def record(self, step: int) -> dict:
        """The metrics log's "promise" line."""
        return {"kind": "promise", "step": step, "steps_per_minute": self.steps_per_minute,
                "tok_per_s": self.tokens_per_second, "budget": self.budget,
                "expected_steps": self.steps, "expected_minutes": self.minutes,
                "expected_dev_bleu": self.dev_bleu, "curve": self.curve}


def make_promise(recipe: Recipe, curve: RecordedCurve | None, why_not: str, step: int,
                 elapsed: float, steps_per_minute: float, tokens_per_second: float) -> Promise:
    """The promise of a run at `step` after `elapsed` seconds, making `steps_per_minute`: the
    step its budget (`train.max_minutes` or `train.max_steps`, whichever comes first) ends near,
    each validation still to come taking the curve's `validation_steps` of training time."""
    cfg = recipe.train
    per_validation = curve.validation_steps if curve else 0.0

    def reach(minutes: float) -> int:
        """The step reached after `minutes` of the run, validations deducted."""
        left = max(minutes - elapsed / 60, 0.0)
        validations = math.floor(left / cfg.eval_every_minutes) if cfg.eval_every_minutes else 0
        steps = steps_per_minute * left - per_validation * (validations + 1)  # + the last one
        if cfg.eval_every:  # validations every N steps as well
            steps /= 1 + per_validation / cfg.eval_every
        return step + max(int(steps), 0)

    if cfg.max_minutes:
        steps, minutes = reach(cfg.max_minutes), cfg.max_minutes
        budget = f"{cfg.max_minutes:g} minutes"
        if cfg.max_steps and cfg.max_steps < steps:
            steps, budget = cfg.max_steps, f"{cfg.max_steps} steps"
            minutes = elapsed / 60 + (steps - step) / steps_per_minute
    else:
        steps, budget = cfg.max_steps, f"{cfg.max_steps} steps"
        minutes = elapsed / 60 + (steps - step) / steps_per_minute
    if curve is None:
        return Promise(steps_per_minute, tokens_per_second, budget, steps, minutes, None, (),
                       why_not, False)
    longer = tuple((m, reach(m), curve.bleu_at(reach(m))) for m in LONGER if m > minutes + 1)
    return Promise(steps_per_minute, tokens_per_second, budget, steps, minutes,
                   curve.bleu_at(steps), longer, curve.name, steps > curve.last_step)


class SpeedProbe:
    """Measures a run's steps a minute between its SETTLE_STEPS-th step and MEASURE_SECONDS
    (or a fifth of a shorter budget) later; `due` says when the promise can be made."""

    def __init__(self, budget_minutes: float):
        self.seconds = min(MEASURE_SECONDS, budget_minutes * 12) if budget_minutes \
            else MEASURE_SECONDS
        self.start: tuple[int, float, float] | None = None  # step, elapsed, target tokens
        self.done = False

    def due(self, step: int, elapsed: float, tokens: float) -> tuple[float, float] | None:
        """(steps a minute, target tokens a second) once measured, else None; once only."""
        if self.done:
            return None
        if self.start is None:
            if step >= SETTLE_STEPS:
                self.start = (step, elapsed, tokens)
            return None
        step0, elapsed0, tokens0 = self.start
        if elapsed - elapsed0 < self.seconds:
            return None
        self.done = True
        seconds = elapsed - elapsed0
        return 60 * (step - step0) / seconds, (tokens - tokens0) / seconds


class PromiseWatch:
    """A run's promise, made once: the recipe's curve found when the run is built, its speed
    measured by a SpeedProbe over its first minute, then the promise said (logged) and returned
    into the metrics log by `after_step`. Idle without a budget and on ranks other than 0."""

    def __init__(self, recipe: Recipe, enabled: bool = True):
        cfg = recipe.train
        self.recipe = recipe
        self.curve, self.why_not = find_curve(recipe)
        budget = enabled and bool(cfg.max_minutes or cfg.max_steps)
        self.probe = SpeedProbe(cfg.max_minutes) if budget else None
        self.tokens = 0  # target tokens trained on since the process started

    def after_step(self, step: int, elapsed: float, tokens: int,
                   metrics: MetricsLog | None = None) -> Promise | None:
        """The promise, said and written into `metrics` once the speed is measured (once
        only); else None."""
        if self.probe is None:
            return None
        self.tokens += tokens
        speed = self.probe.due(step, elapsed, self.tokens)
        if speed is None:
            return None
        made = make_promise(self.recipe, self.curve, self.why_not, step, elapsed, *speed)
        log.info("%s", made.message())
        if metrics is not None:
            metrics.write(made.record(step))
        return made
