"""Engines: the same model run the textbook way (plain) or with the CPU speed work (fast).

An engine is applied once, where training or decoding is set up: `prepare` readies a built model
(the fast engine swaps in its modules, `translate.fast.accelerate`), `loss` is the training
loss, `candidates` beam search's step. Both engines give the same translations to float rounding;
the plain one is there to read and to debug against.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
from torch import nn

from translate import fast, loss, search

ENGINES = ("auto", "fast", "plain")


@dataclass(frozen=True)
class Engine:
    name: str
    prepare: Callable[[nn.Module], nn.Module]  # applied once to a built model, in place
    loss: Callable  # (logits, target, epsilon, ignore_index) -> (summed loss, summed NLL)
    candidates: search.Candidates  # beam search's per-step top candidates


PLAIN = Engine("plain", lambda model: model, loss.label_smoothed_cross_entropy,
               search.top_candidates)
FAST = Engine("fast", fast.accelerate, fast.label_smoothed_cross_entropy, fast.top_candidates)


def resolve_engine(name: str, device: torch.device) -> Engine:
    """'auto' -> fast on the CPU (where it was measured faster), plain elsewhere."""
    if name not in ENGINES:
        raise ValueError(f"engine '{name}' is unknown; valid: {', '.join(ENGINES)}")
    if name == "auto":
        name = "fast" if device.type == "cpu" else "plain"
    return PLAIN if name == "plain" else FAST
