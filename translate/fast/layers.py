"""The fast engine's models and layers: subclasses of the textbook ones that `accelerate` swaps
in; each keeps its parameters, its state dict and the textbook's results (to float rounding).

  FastTransformer, FastRNN   decoder states keep one memory row per sentence, shared by its
                             beams, instead of a copy per hypothesis; when sentences are done,
                             `kept_sentences` finds their memory rows from the hypotheses kept
  FusedFeedForward           oneDNN applies the activation as it writes fc1's output
  ByteDropout                dropout masks from one random byte per element on the CPU

Shapes: B hypotheses, Bc sentences (B = Bc * G), S source length, D model width.

Tests: tests/fast/test_fast_engine.py.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from torch.ao.nn.intrinsic.quantized.dynamic import LinearReLU as QuantizedLinearReLU

from translate.fast.attention import MemoryKV, PackedKVCache
from translate.fast.linear import POST_OPS, PackedLinear
from translate.models.rnn import AdditiveAttention, RNNSeq2Seq, RNNState
from translate.models.transformer import (ACTIVATIONS, DecoderState, FeedForward, Memory,
                                          Transformer)


def kept_sentences(rows: torch.Tensor, beams: int) -> torch.Tensor:
    """The sentences of the hypotheses `rows` keeps. Search drops a sentence whole, so `rows`
    holds each kept sentence's `beams` rows in one run; row r belongs to sentence r // beams."""
    return rows[::beams] // beams  # (sentences kept,)


@dataclass
class SharedMemoryState(DecoderState):
    """A Transformer decoder state whose memory and cross-attention caches keep a row per
    sentence; self-attention caches have a row per hypothesis and reorder lazily."""

    beams: int = 1  # hypotheses per sentence: 1 until beam search's first step fans out

    def reorder_beams(self, rows: torch.Tensor) -> "SharedMemoryState":
        """Rows stay within their sentence, so only the self-attention caches follow them."""
        return SharedMemoryState(self.memory, [c.index_select(rows) for c in self.self_attn],
                                 self.cross_attn, self.offset,
                                 beams=len(rows) // len(self.memory.states))

    def select(self, rows: torch.Tensor) -> "SharedMemoryState":
        """The hypotheses `rows` keeps, and the memory rows of their sentences."""
        sentences = kept_sentences(rows, self.beams)
        return SharedMemoryState(self.memory.index_select(sentences),
                                 [c.index_select(rows) for c in self.self_attn],
                                 [c.index_select(sentences) for c in self.cross_attn], self.offset,
                                 self.beams)


class FastTransformer(Transformer):
    """The Transformer whose decoding state shares a sentence's memory among its beams."""

    def init_state(self, memory: Memory) -> SharedMemoryState:
        n = len(self.decoder_layers)
        return SharedMemoryState(memory, [PackedKVCache() for _ in range(n)],
                                 [MemoryKV() for _ in range(n)])


@dataclass
class SharedMemoryRNNState(RNNState):
    """An RNN decoder state whose memory keeps a row per sentence, shared by its beams."""

    beams: int = 1  # hypotheses per sentence: 1 until beam search's first step fans out

    def reorder_beams(self, rows: torch.Tensor) -> "SharedMemoryRNNState":
        cell = None if self.cell is None else self.cell.index_select(0, rows)
        return SharedMemoryRNNState(self.hidden.index_select(0, rows), self.memory, cell,
                                    beams=len(rows) // len(self.memory.states))

    def select(self, rows: torch.Tensor) -> "SharedMemoryRNNState":
        """The hypotheses `rows` keeps, and the memory rows of their sentences."""
        cell = None if self.cell is None else self.cell.index_select(0, rows)
        return SharedMemoryRNNState(self.hidden.index_select(0, rows),
                                    self.memory.index_select(kept_sentences(rows, self.beams)),
                                    cell, self.beams)


class FastRNN(RNNSeq2Seq):
    """The attention RNN whose decoding state shares a sentence's memory among its beams."""

    def init_state(self, memory) -> SharedMemoryRNNState:
        cell = torch.zeros_like(memory.init) if self.cfg.cell == "lstm" else None
        return SharedMemoryRNNState(memory.init, memory, cell)


class GroupedAdditiveAttention(AdditiveAttention):
    """AdditiveAttention where B queries read Bc = B / G rows of keys: each run of G query rows
    (a sentence's beams) attends to one row, which is neither copied nor projected again."""

    def forward(self, query: torch.Tensor, projected_keys: torch.Tensor, values: torch.Tensor,
                mask: torch.Tensor) -> torch.Tensor:
        Bc, S, A = projected_keys.shape
        query = self.query_proj(query).view(Bc, -1, 1, A)  # (Bc, G, 1, A)
        hidden = torch.tanh(projected_keys[:, None] + query)  # (Bc, G, S, A)
        energies = self.score(hidden).squeeze(-1)  # (Bc, G, S)
        energies = energies.masked_fill(~mask[:, None], float("-inf"))
        weights = torch.softmax(energies.float(), dim=-1).to(values.dtype)  # (Bc, G, S)
        if self.record_weights is not None:
            self.record_weights(weights.flatten(0, 1))  # (B, S)
        return torch.bmm(weights, values).flatten(0, 1)  # (B, Dv)


class FusedFeedForward(FeedForward):
    """FeedForward whose activation oneDNN applies as it writes fc1's output (fp32 inference
    on the CPU), as an int8 copy's fc1 does with ReLU: for relu and gelu, ungated. Other
    activations and gated networks run the textbook's forward (on packed weights)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.fc3 is not None or self.activation not in POST_OPS:
            return super().forward(x)
        if isinstance(self.fc1, PackedLinear):
            hidden = self.fc1(x, self.activation)
        elif isinstance(self.fc1, QuantizedLinearReLU):  # an int8 copy's fc1 applies ReLU itself
            hidden = self.fc1(x)
        else:
            hidden = ACTIVATIONS[self.activation](self.fc1(x))
        return self.fc2(self.dropout(hidden))  # (B, L, D)


class ByteDropout(nn.Dropout):
    """Inverted dropout that compares one random byte per element to a threshold on the CPU.

    `torch.bernoulli_` is about 2.5x slower on the CPU than drawing uint8 values and comparing
    them to a threshold (benchmarks/train_speed.py), so there the drop probability is rounded to
    a multiple of 1/256 and the kept values scaled to stay unbiased. Elsewhere: `F.dropout`.
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.p == 0:
            return x
        threshold, n = round(self.p * 256), x.numel()
        if x.device.type != "cpu" or threshold >= 256:  # (a p this near 1 would keep nothing)
            return F.dropout(x, self.p, True)
        keep = (random_bytes(n) >= threshold).flatten()[:n].view_as(x)
        # Cast as 0/1 bytes, a vectorized cast (`x * keep` casts the booleans element by element,
        # forward and backward), for a float mask kept for backward.
        return x * keep.view(torch.uint8).to(x.dtype).mul_(256.0 / (256 - threshold))


def random_bytes(n: int) -> torch.Tensor:
    """(ceil(n / 7), 7) uniform random uint8 values on the CPU, seven from each 64-bit draw: n
    of them or up to six more, a strided view (compare it, then take n from the result).

    PyTorch's CPU generator spends one 32-bit draw on each uint8 value `random_()` fills;
    an int64 `random_()` is uniform over [0, 2^63), so all bytes but its most significant are
    uniform: 3.5 bytes a 32-bit draw instead of one.
    """
    rows = -(-n // 7)
    draws = torch.empty(rows, dtype=torch.int64).random_().view(torch.uint8).view(rows, 8)
    low = slice(0, 7) if sys.byteorder == "little" else slice(1, 8)  # without the top byte
    return draws[:, low]
