"""A trained model made ready to decode: on one device, in one precision, with one engine, set
up once and in this one place.

`translate decode`, `evaluate`, `tune-beam`, `compare` and `serve`, the Python API
(`Translator.load`) and the test splits' decode when training ends all build a `Ready` here, and
the decoding functions (`translate.inference`, `translate.evaluation`) take it. A name left None
(the default everywhere: each command's option, each function's argument) means:

    device     the best available: CUDA > MPS > CPU; the CPU for precision int8
    precision  the recipe's `train.precision`, the one the model was trained in: `auto` (every
               shipped recipe's) is resolved for decoding, bf16 on a GPU, on CPUs with AMX and
               on AMD CPUs with AVX512-BF16, else fp32 (`translate.hardware.resolve_precision`)
    engine     auto: fast on the CPU, plain elsewhere (`translate.engine.resolve_engine`)

so that `translate decode RUN` and `Translator.load(RUN).translate` decode alike.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import torch
from torch import nn

from translate.config import Recipe
from translate.config.names import RUN_PRECISIONS
from translate.engine import PLAIN, Engine, engine_note, quantize_int8, resolve_engine
from translate.hardware import autocast, pick_device, resolve_precision
from translate.loading import load_checkpoint
from translate.locate import Location
from translate.tokenizer import Tokenizer

log = logging.getLogger(__name__)

DEFAULT_ENGINE = "auto"  # the engine a None asks for (the precision's default is the recipe's)


@dataclass(frozen=True)
class Ready:
    """A model ready to decode, with what it decodes with: its tokenizer, device, resolved
    precision and engine, and (loaded from a checkpoint) the recipe and step it was saved with.

    Built directly, it decodes the model as it is given: in fp32, with the plain engine (the
    model's own modules and `translate.search`), on the CPU unless `device` says otherwise;
    what a test or a notebook holding a model wants. `Ready.load` and `Ready.prepare` resolve
    the names and prepare the model.
    """

    model: nn.Module
    tokenizer: Tokenizer
    device: torch.device = torch.device("cpu")
    precision: str = "fp32"  # the autocast it runs under: one of RUN_PRECISIONS
    engine: Engine = PLAIN  # applied to the model already (`Engine.prepare`)
    recipe: Optional[Recipe] = None
    step: Optional[int] = None

    def __post_init__(self):
        object.__setattr__(self, "device", torch.device(self.device))  # "cpu" -> device("cpu")
        if self.precision not in RUN_PRECISIONS:
            raise ValueError(f"a Ready runs in {', '.join(RUN_PRECISIONS)}, not "
                             f"{self.precision!r}: Ready.prepare resolves auto and int8")

    def autocast(self):
        """The autocast context the model decodes under (none for fp32)."""
        return autocast(self.device, self.precision)

    @classmethod
    def load(cls, path: str | Path | Location, device: str | torch.device | None = None,
             precision: str | None = None, engine: str | None = None,
             option: str = "--device ") -> "Ready":
        """Load a run folder (its best.pt), a checkpoint file or an exported model folder (or
        its Location, where the caller located it already: translate.loading), and prepare its
        model; None for `device`, `precision` or `engine` is the default the module
        docstring lists. Errors name a bad device as `option` does (`device=` from Python).

        Args:
            device: cpu, cuda, cuda:N or mps.
            precision: auto, fp32, bf16, fp16 or int8 (`translate.hardware.PRECISIONS`).
            engine: auto, fast, plain, gpu or textbook (`translate.engine.ENGINE_NAMES`).
        """
        dev = pick_device(None if device is None else str(device), precision, option)
        loaded = load_checkpoint(path, dev)
        return cls.prepare(loaded.model, loaded.tokenizer, dev,
                           loaded.recipe.train.precision if precision is None else precision,
                           DEFAULT_ENGINE if engine is None else engine, loaded.recipe,
                           loaded.step)

    @classmethod
    def prepare(cls, model: nn.Module, tokenizer: Tokenizer, device: torch.device,
                precision: str, engine: str | Engine, recipe: Optional[Recipe] = None,
                step: Optional[int] = None) -> "Ready":
        """`model` on `device` (where it is already) made ready: `precision` resolved for
        decoding, `engine` (a name, or an Engine already chosen, as a training run's) resolved
        and applied to the model in place; int8 quantizes a copy of every linear layer, which
        then runs without autocast."""
        device = torch.device(device)
        if not isinstance(engine, Engine):
            engine = resolve_engine(engine, device)
        precision = resolve_precision(precision, device, decoding=True)
        if precision == "int8":
            model, precision = quantize_int8(model), "fp32"
        log.debug("decoding on %s in %s with the %s", device, precision, engine_note(engine))
        return cls(engine.prepare(model), tokenizer, device, precision, engine, recipe, step)
