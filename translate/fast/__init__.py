"""The fast engine: CPU speed work applied to a built model, beside the textbook code.

`accelerate(model)` swaps the model's modules for the subclasses in this package, in place: the
same parameters and state dict, the same results to float rounding (tests/fast/ checks each
against the textbook path on real data). `translate.engine.FAST` bundles it with this package's
loss and beam-search step; `translate.engine.resolve_engine` picks it (`--engine fast`, the
default on the CPU) or the plain path (`--engine plain`).

    linear.py      packed oneDNN weights, Q/K/V in one matmul, fused activations
    attention.py   explicit small-query attention, shared memory rows, deferred beam reorder
    layers.py      decoder states that share a sentence's memory, byte dropout
    search.py      top-k from the logits, exp2 normalizer, chunked top-k
    loss.py        label-smoothed cross-entropy with a hand-written backward
    quantize.py    int8 dynamic quantization of every linear layer
"""

from __future__ import annotations

from torch import nn

from translate.fast.attention import FastMultiHeadAttention, fuses_projections
from translate.fast.layers import (ByteDropout, FastRNN, FastTransformer, FusedFeedForward,
                                   GroupedAdditiveAttention)
from translate.fast.linear import PackedLinear, watch_optimizer
from translate.fast.loss import label_smoothed_cross_entropy
from translate.fast.quantize import quantize_int8
from translate.fast.search import top_candidates
from translate.models.attention import MultiHeadAttention
from translate.models.rnn import AdditiveAttention, RNNSeq2Seq
from translate.models.transformer import FeedForward, Transformer

FAST_CLASSES: dict[type, type] = {
    Transformer: FastTransformer, RNNSeq2Seq: FastRNN, MultiHeadAttention: FastMultiHeadAttention,
    AdditiveAttention: GroupedAdditiveAttention, FeedForward: FusedFeedForward,
    nn.Linear: PackedLinear, nn.Dropout: ByteDropout,
}


def accelerate(model: nn.Module, fuse_qkv: bool = True) -> nn.Module:
    """Give `model`'s modules the fast engine's classes, in place; returns the model.

    Each module of exactly a textbook class gets the fast subclass; its parameters, buffers and
    state dict stay as they are, so training, saving and loading work as before.

    Args:
        fuse_qkv: compute attention's Q, K and V (cross-attention's K and V) side by side in
            one matmul; the weights stay three matrices either way.
    """
    for module in model.modules():
        fast = FAST_CLASSES.get(type(module))
        if fast is not None:
            module.__class__ = fast
        if isinstance(module, FastMultiHeadAttention):
            module.fuse_qkv = fuses_projections(module, fuse_qkv)
    return model


__all__ = ["accelerate", "label_smoothed_cross_entropy", "quantize_int8", "top_candidates"]
