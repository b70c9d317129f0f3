"""Engines: the same model run the textbook way (plain), with the CPU speed work (fast), or
with the GPU's search (gpu).

An engine is applied once, where training or decoding is set up: `prepare` readies a built model
(the fast engine swaps in its modules, `translate.fast.accelerate`), `loss` is the training
loss, `candidates` beam search's step, `beam_search` and `greedy_search` the searches. Every
engine gives the same translations to float rounding; the plain one is there to read and to debug
against. The gpu engine is the plain model and loss with `translate.gpu`'s searches, which read
the device every few steps instead of at every step.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
from torch import nn

from translate import fast, gpu, loss, search

ENGINES = ("auto", "fast", "plain", "gpu")


@dataclass(frozen=True)
class Engine:
    name: str
    prepare: Callable[[nn.Module], nn.Module]  # applied once to a built model, in place
    loss: Callable  # (logits, target, epsilon, ignore_index) -> (summed loss, summed NLL)
    candidates: search.Candidates  # beam search's per-step top candidates
    beam_search: Callable = search.beam_search  # translate.search.beam_search's signature
    greedy_search: Callable = search.greedy_search


PLAIN = Engine("plain", lambda model: model, loss.label_smoothed_cross_entropy,
               search.top_candidates)
FAST = Engine("fast", fast.accelerate, fast.label_smoothed_cross_entropy, fast.top_candidates)
GPU = Engine("gpu", lambda model: model, loss.label_smoothed_cross_entropy,
             gpu.search.top_candidates, gpu.beam_search, gpu.greedy_search)


def resolve_engine(name: str, device: torch.device) -> Engine:
    """'auto' -> fast on the CPU (where it was measured faster), plain elsewhere."""
    if name not in ENGINES:
        raise ValueError(f"engine '{name}' is unknown; valid: {', '.join(ENGINES)}")
    if name == "auto":
        name = "fast" if device.type == "cpu" else "plain"
    return {"plain": PLAIN, "fast": FAST, "gpu": GPU}[name]
