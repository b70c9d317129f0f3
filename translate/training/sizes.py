"""`train.size`: the model size a budget buys the most with on this machine.

A recipe's ladder is its recorded curves (translate/training/curves/*.json, `training.promise`)
that differ from it in the size keys alone: the model's width and depth, its dropout, the batch
and the learning rate's peak and warm-up. Each rung's curve gives its greedy dev BLEU by step,
the same on every machine; what differs between machines is how many steps of each rung a
minute buys. So with `train.size: auto` a run times a few steps of every rung here before it
trains (`time_rung`), reads each curve at the step the rest of the budget reaches at that speed
(`promise.make_promise`), and trains the rung that promises the most. The timing's seconds count
against `train.max_minutes`. A rung's name trains that rung, as `auto` would have set it up.
"""

from __future__ import annotations

import gc
import logging
import time
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from translate.config import ConfigError, Recipe
from translate.models import count_parameters
from translate.training.batches import length_multiple, train_batcher
from translate.training.build import build_model_and_updater
from translate.training.distributed import World
from translate.training.prepare import TrainingData
from translate.training.promise import (Promise, RecordedCurve, comparable, make_promise,
                                        recorded_curves)
from translate.training.state import TrainState
from translate.utils import seed_everything

log = logging.getLogger(__name__)

# the keys a rung sets; the rest of the recipe is the ladder's own
SIZE_KEYS = {"model": ("d_model", "heads", "ffn_dim", "encoder_layers", "decoder_layers",
                       "dropout"),
             "train": ("max_tokens", "lr", "warmup")}
SETTLE_STEPS = 2  # a rung's first steps, whose kernels and allocations are new, are not timed
TIMED_STEPS = 4  # then at least this many steps are timed ...
TIMED_SECONDS = 3.0  # ... and more, up to MOST_STEPS, until this many seconds have passed
MOST_STEPS = 20


def outside_sizes(recipe: dict) -> dict:
    """A comparable recipe without its size keys: what the rungs of one ladder share."""
    return {section: {k: v for k, v in values.items() if k not in SIZE_KEYS.get(section, ())}
            for section, values in recipe.items()}


def ladder(recipe: Recipe, folder: Path | None = None) -> list[RecordedCurve]:
    """The recorded rungs of `recipe`'s ladder (in `folder`, CURVES by default), smallest first
    (by their weights' count)."""
    ours = outside_sizes(comparable(recipe.to_dict()))
    rungs = [c for c in recorded_curves(folder)
             if c.size and outside_sizes(c.recipe) == ours]
    return sorted(rungs, key=lambda c: (c.parameters, c.size))


def sized(recipe: Recipe, rung: RecordedCurve) -> Recipe:
    """`recipe` with `rung`'s size keys, `train.size` naming it."""
    values = {section: {k: rung.recipe[section][k] for k in keys}
              for section, keys in SIZE_KEYS.items()}
    return replace(recipe, model=replace(recipe.model, **values["model"]),
                   train=replace(recipe.train, size=rung.size, **values["train"]))


@dataclass(frozen=True)
class Offer:
    """What one rung would give in the budget on this machine."""

    rung: RecordedCurve
    parameters: int
    steps_per_minute: float
    promise: Promise

    def line(self) -> str:
        p = self.promise
        bleu = "" if p.dev_bleu is None else f", dev BLEU about {p.dev_bleu:.0f}"
        return (f"{self.rung.size} ({self.parameters / 1e6:.1f}M parameters): "
                f"{self.steps_per_minute:.0f} steps a minute, step {p.steps:,}{bleu}")


def time_rung(recipe: Recipe, data: TrainingData, device: torch.device,
              precision: str) -> tuple[float, float, int]:
    """(steps a minute, target tokens a second, parameters) of `recipe`'s model trained here,
    from its first train batches (the weights are thrown away)."""
    world = World()
    seed_everything(recipe.train.seed)
    _, model, updater = build_model_and_updater(recipe, data.tokenizer, device, precision, world)
    parameters = count_parameters(model)
    batcher = train_batcher(recipe, data.tokenizer, data.train, world,
                            length_multiple(recipe.train, device, precision))
    state, timed, seconds, tokens = TrainState(), 0, 0.0, 0
    for indices in batcher.epoch(1)[:SETTLE_STEPS + MOST_STEPS]:
        batch = batcher.batch(indices)
        count = batcher.tokens([indices], [batch], world)
        t0 = time.perf_counter()
        updater.step([batch], count, state)
        updater.settle(state)
        if state.step > SETTLE_STEPS:
            timed, seconds, tokens = timed + 1, seconds + time.perf_counter() - t0, tokens + count
            if timed >= TIMED_STEPS and seconds >= TIMED_SECONDS:
                break
    del model, updater
    gc.collect()
    if not timed:
        raise ConfigError(f"train.size: the train split holds too few batches to time "
                          f"{recipe.train.size} ({SETTLE_STEPS + 1} are needed)")
    return 60 * timed / seconds, tokens / seconds, parameters


def choose_size(recipe: Recipe, data: TrainingData, device: torch.device, precision: str,
                world: World, folder: Path | None = None) -> tuple[Recipe, float]:
    """`recipe` sized as its `train.size` says, and the seconds the choice took (0 but for auto,
    whose timing counts against the budget). Logs what each rung would give."""
    size, rungs = recipe.train.size, ladder(recipe, folder)
    names = ", ".join(r.size for r in rungs) or "none is recorded"
    if size != "auto":
        for rung in rungs:
            if rung.size == size:
                return sized(recipe, rung), 0.0
        raise ConfigError(f"train.size {size}: not a size of this recipe's ladder ({names}); "
                          f"auto picks one for the budget")
    if len(rungs) < 2:
        raise ConfigError(f"train.size auto: this recipe's ladder has {len(rungs)} recorded "
                          f"size(s) ({names}); a recipe that differs from the recorded ones "
                          f"outside the size keys ({', '.join(sorted(k for ks in SIZE_KEYS.values() for k in ks))}) "
                          f"has none: train.size '' trains it as written")
    if world.size > 1:
        raise ConfigError("train.size auto times the sizes in one process; under torchrun "
                          f"name one ({names})")
    if not recipe.train.max_minutes:
        if not recipe.train.max_steps:
            raise ConfigError("train.size auto sizes the model for a budget: set "
                              "train.max_minutes (or train.max_steps)")
        best = max(rungs, key=lambda r: r.bleu_at(recipe.train.max_steps))  # steps: no timing
        log.info("size: %s, whose recorded curve is highest at step %d", best.size,
                 recipe.train.max_steps)
        return sized(recipe, best), 0.0
    start, timings = time.perf_counter(), []
    for rung in rungs:
        timings.append((rung, *time_rung(sized(recipe, rung), data, device, precision)))
    spent = time.perf_counter() - start
    offers = [Offer(rung, parameters, per_minute,
                    make_promise(sized(recipe, rung), rung, "", 0, spent, per_minute, per_second))
              for rung, per_minute, per_second, parameters in timings]
    best = max(offers, key=lambda o: o.promise.dev_bleu)
    log.info("size auto: %d sizes timed on this machine in %.0f s, each read off its recorded "
             "curve at the step %s reach:\n  %s\n-> %s", len(offers), spent,
             best.promise.budget, "\n  ".join(o.line() for o in offers), best.rung.size)
    return sized(recipe, best.rung), spent
