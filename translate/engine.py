"""Engines: the same model run exactly as written (textbook), with PyTorch's fused attention
(plain), with the CPU speed work (fast), or with the GPU's searches (gpu).

An engine is applied once, where training or decoding is set up: `prepare` readies a built model
(the fast engine swaps in its modules, `translate.fast.accelerate`), `loss` is the training
loss, `candidates` beam search's step, `beam_search` and `greedy_search` the searches. Every
engine gives the same translations to float rounding.

    textbook   translate/models/ as written, attention included: softmax(q k^T / sqrt(Dh)) v in
               `attention.scaled_dot_product_attention`. Edit it, and a run shows the change.
    plain      the same modules, with attention in `F.scaled_dot_product_attention` (one fused
               kernel; the written-out function runs only where weights are drawn)
    fast       translate/fast/'s modules swapped in: the CPU default; attention's Q, K and V
               in one matmul (`fast_engine(fuse_qkv=False)`: three, for an A/B)
    gpu        plain, with translate/gpu/'s searches, which read the device every few steps

Tests: tests/fast/test_fast_engine.py, tests/test_ready.py, tests/test_config.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Callable

import torch
from torch import nn

from translate import fast, gpu, loss, search
from translate.config.names import ENGINE_NAMES
from translate.models.attention import MultiHeadAttention

@dataclass(frozen=True)
class Engine:
    name: str
    prepare: Callable[[nn.Module], nn.Module]  # applied once to a built model, in place
    loss: Callable  # (logits, target, epsilon, ignore_index) -> (summed loss, summed NLL)
    candidates: search.Candidates  # beam search's per-step top candidates
    beam_search: Callable = search.beam_search  # translate.search.beam_search's signature
    greedy_search: Callable = search.greedy_search
    # called once on a training run's optimizer: what the engine's modules need of its steps
    watch_optimizer: Callable[[torch.optim.Optimizer], None] = lambda optimizer: None


PLAIN = Engine("plain", lambda model: model, loss.label_smoothed_cross_entropy,
               search.top_candidates)


def fast_engine(fuse_qkv: bool = True) -> Engine:
    """The fast engine; `fuse_qkv` computes attention's Q, K and V side by side in one matmul
    (`translate.fast.accelerate`)."""
    return Engine("fast", partial(fast.accelerate, fuse_qkv=fuse_qkv),
                  fast.label_smoothed_cross_entropy, fast.top_candidates,
                  watch_optimizer=fast.watch_optimizer)


FAST = fast_engine()
GPU = Engine("gpu", lambda model: model, loss.label_smoothed_cross_entropy,
             gpu.search.top_candidates, gpu.beam_search, gpu.greedy_search)


def write_out_attention(model: nn.Module) -> nn.Module:
    """Every attention module of `model` computes the written-out attention, in place."""
    for module in model.modules():
        if isinstance(module, MultiHeadAttention):
            module.written_out = True
    return model


TEXTBOOK = Engine("textbook", write_out_attention, loss.label_smoothed_cross_entropy,
                  search.top_candidates)


quantize_int8 = fast.quantize_int8  # decoding's --precision int8: the fast engine's linears

# The engines by the names a recipe gives (translate.config.names.ENGINES, which the recipe's
# train.engine, the --engine option and the errors read). `auto` picks one for the device
# (`resolve_engine`).
ENGINES = {"fast": FAST, "plain": PLAIN, "gpu": GPU, "textbook": TEXTBOOK}


def resolve_engine(name: str, device: torch.device) -> Engine:
    """'auto' -> fast on the CPU (where it was measured faster), plain elsewhere."""
    if name not in ENGINE_NAMES:
        raise ValueError(f"engine '{name}' is unknown; valid: {', '.join(ENGINE_NAMES)}")
    if name == "auto":
        name = "fast" if device.type == "cpu" else "plain"
    return ENGINES[name]


def engine_note(engine: Engine) -> str:
    """For a log line: the engine that runs, and how to run the code as written."""
    if engine is TEXTBOOK:
        return "textbook engine (translate/models/ exactly as written)"
    return (f"{engine.name} engine (--engine textbook, or train.engine: textbook, runs "
            f"translate/models/ exactly as written)")
