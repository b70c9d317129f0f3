"""The pre-norm Transformer encoder-decoder (Vaswani et al., 2017, with pre-LayerNorm blocks).

Shapes: B batch, S source length, T target length, D d_model, V vocabulary.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

from translate.config import TransformerConfig
from translate.models.attention import MultiHeadAttention, defer_reorder, padding_mask
from translate.models.linear import ACTIVATIONS, Linear
from translate.tokenizer import PAD


@dataclass
class Memory:
    """What the encoder hands the decoder."""

    states: torch.Tensor  # (B, S, D) encoder output: cross-attention's keys and values
    src_mask: torch.Tensor  # (B, 1, 1, S) True on real source tokens

    def index_select(self, index: torch.Tensor) -> "Memory":
        return Memory(self.states.index_select(0, index), self.src_mask.index_select(0, index))


@dataclass
class DecoderState:
    """Incremental-decoding cache: per layer, self-attention K/V so far and the memory's K/V.

    Self-attention caches have a row per decoded sequence (B * beam); the memory's K/V a row per
    sentence (B), shared by its beams.
    """

    self_attn: list[dict] = field(default_factory=list)
    cross_attn: list[dict] = field(default_factory=list)
    offset: int = 0  # target positions already decoded

    def reorder_beams(self, rows: torch.Tensor) -> "DecoderState":
        """Each row continues the sequence of row `rows[i]`, a beam of the same sentence.
        The self-attention caches are picked when the next step extends them."""
        return DecoderState([defer_reorder(c, rows) for c in self.self_attn], self.cross_attn,
                            self.offset)

    def select(self, rows: torch.Tensor, sentences: torch.Tensor) -> "DecoderState":
        """Keep the sequences `rows` of the sentences `sentences` (the others are done)."""
        memory = [{k: v.index_select(0, sentences) for k, v in c.items()} for c in self.cross_attn]
        return DecoderState([defer_reorder(c, rows) for c in self.self_attn], memory, self.offset)


def sinusoidal_positions(length: int, dim: int) -> torch.Tensor:
    """(length, dim) table: sin on even, cos on odd channels, wavelengths 2pi .. 10000*2pi."""
    position = torch.arange(length, dtype=torch.float32)[:, None]
    inv_freq = torch.exp(torch.arange(0, dim, 2, dtype=torch.float32) * (-math.log(10000.0) / dim))
    table = torch.zeros(length, dim)
    table[:, 0::2] = torch.sin(position * inv_freq)
    table[:, 1::2] = torch.cos(position * inv_freq[: dim // 2])
    return table


class Dropout(nn.Module):
    """Inverted dropout; on the CPU it draws one random byte per element.

    `torch.bernoulli_` is about 2.5x slower on the CPU than drawing uint8 values and comparing
    them to a threshold (benchmarks/train_speed.py), so there the drop probability is rounded to
    a multiple of 1/256 and the kept values scaled to stay unbiased. Elsewhere: `F.dropout`.
    """

    def __init__(self, p: float):
        super().__init__()
        self.p = p
        self.threshold = round(p * 256)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.p == 0:
            return x
        if x.device.type != "cpu":
            return F.dropout(x, self.p, True)
        keep = torch.empty(x.shape, dtype=torch.uint8).random_() >= self.threshold
        return x * keep * (256.0 / (256 - self.threshold))


class Embedding(nn.Module):
    """Token embedding scaled by sqrt(D), plus positions, then dropout."""

    def __init__(self, vocab: int, cfg: TransformerConfig, tokens: Optional[nn.Embedding] = None):
        super().__init__()
        self.tokens = tokens or nn.Embedding(vocab, cfg.d_model, padding_idx=PAD)
        self.scale = math.sqrt(cfg.d_model)
        if cfg.positions == "learned":
            self.positions = nn.Embedding(cfg.max_positions, cfg.d_model)
        else:
            self.register_buffer("table", sinusoidal_positions(cfg.max_positions, cfg.d_model),
                                 persistent=False)
            self.positions = None
        self.dropout = Dropout(cfg.dropout)
        self.max_positions = cfg.max_positions

    def forward(self, ids: torch.Tensor, offset: int = 0) -> torch.Tensor:
        L = ids.size(1)
        if offset + L > self.max_positions:
            raise ValueError(f"sequence of {offset + L} positions exceeds max_positions "
                             f"({self.max_positions})")
        x = self.tokens(ids) * self.scale  # (B, L, D)
        if self.positions is not None:
            x = x + self.positions.weight[offset: offset + L]
        else:
            x = x + self.table[offset: offset + L].to(x.dtype)
        return self.dropout(x)


class FeedForward(nn.Module):
    def __init__(self, cfg: TransformerConfig):
        super().__init__()
        self.fc1 = Linear(cfg.d_model, cfg.ffn_dim)
        self.fc2 = Linear(cfg.ffn_dim, cfg.d_model)
        if cfg.activation not in ACTIVATIONS:
            raise ValueError(f"model.activation must be one of {sorted(ACTIVATIONS)}, "
                             f"got {cfg.activation!r}")
        self.activation = cfg.activation  # applied by fc1 (fused into its matmul on the CPU)
        self.dropout = Dropout(cfg.activation_dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if isinstance(self.fc1, Linear):
            hidden = self.fc1(x, self.activation)
        else:  # an int8 copy's quantized layer (translate.quantize)
            hidden = ACTIVATIONS[self.activation](self.fc1(x))
        return self.fc2(self.dropout(hidden))  # (B, L, D)


class EncoderLayer(nn.Module):
    def __init__(self, cfg: TransformerConfig):
        super().__init__()
        self.norm1 = nn.LayerNorm(cfg.d_model)
        self.self_attn = MultiHeadAttention(cfg.d_model, cfg.heads, cfg.attn_dropout,
                                            cfg.qkv_bias, cfg.fused_qkv)
        self.norm2 = nn.LayerNorm(cfg.d_model)
        self.ffn = FeedForward(cfg)
        self.dropout = Dropout(cfg.dropout)

    def forward(self, x: torch.Tensor, src_mask: torch.Tensor) -> torch.Tensor:
        x = x + self.dropout(self.self_attn(self.norm1(x), mask=src_mask)[0])
        x = x + self.dropout(self.ffn(self.norm2(x)))
        return x  # (B, S, D)


class DecoderLayer(nn.Module):
    def __init__(self, cfg: TransformerConfig):
        super().__init__()
        attn = lambda: MultiHeadAttention(cfg.d_model, cfg.heads, cfg.attn_dropout, cfg.qkv_bias,
                                          cfg.fused_qkv)
        self.norm1, self.self_attn = nn.LayerNorm(cfg.d_model), attn()
        self.norm2, self.cross_attn = nn.LayerNorm(cfg.d_model), attn()
        self.norm3, self.ffn = nn.LayerNorm(cfg.d_model), FeedForward(cfg)
        self.dropout = Dropout(cfg.dropout)

    def forward(self, y: torch.Tensor, memory: Memory, self_cache: Optional[dict] = None,
                cross_cache: Optional[dict] = None) -> torch.Tensor:
        y = y + self.dropout(self.self_attn(self.norm1(y), causal=True, cache=self_cache)[0])
        y = y + self.dropout(self.cross_attn(self.norm2(y), context=memory.states,
                                             mask=memory.src_mask, cache=cross_cache)[0])
        y = y + self.dropout(self.ffn(self.norm3(y)))
        return y  # (B, T, D)


class Transformer(nn.Module):
    """Encoder-decoder Transformer with the seq2seq interface shared by every model here.

    Args:
        cfg: architecture hyperparameters.
        src_vocab, tgt_vocab: vocabulary sizes.
        shared_vocab: source and target use one vocabulary, so all three embeddings can be tied.
    """

    def __init__(self, cfg: TransformerConfig, src_vocab: int, tgt_vocab: int,
                 shared_vocab: bool = False):
        super().__init__()
        self.cfg = cfg
        tgt_tokens = nn.Embedding(tgt_vocab, cfg.d_model, padding_idx=PAD)
        share_src = cfg.tie_embeddings and shared_vocab
        self.src_embed = Embedding(src_vocab, cfg, tgt_tokens if share_src else None)
        self.tgt_embed = Embedding(tgt_vocab, cfg, tgt_tokens)
        self.encoder_layers = nn.ModuleList(EncoderLayer(cfg) for _ in range(cfg.encoder_layers))
        self.encoder_norm = nn.LayerNorm(cfg.d_model)
        self.decoder_layers = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.decoder_layers))
        self.decoder_norm = nn.LayerNorm(cfg.d_model)
        self.output = Linear(cfg.d_model, tgt_vocab, bias=False)
        self._init_weights()
        if cfg.tie_embeddings:
            self.output.weight = tgt_tokens.weight

    def _init_weights(self) -> None:
        for module in self.modules():
            if isinstance(module, nn.Linear):
                nn.init.xavier_uniform_(module.weight)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
            elif isinstance(module, nn.Embedding):
                nn.init.normal_(module.weight, std=self.cfg.d_model ** -0.5)
                if module.padding_idx is not None:
                    nn.init.zeros_(module.weight[module.padding_idx])

    def encode(self, src: torch.Tensor) -> Memory:
        """(B, S) source ids -> Memory with (B, S, D) states."""
        src_mask = padding_mask(src, PAD)  # (B, 1, 1, S)
        x = self.src_embed(src)
        for layer in self.encoder_layers:
            x = layer(x, src_mask)
        return Memory(self.encoder_norm(x), src_mask)

    def decode(self, tgt_in: torch.Tensor, memory: Memory,
               state: Optional[DecoderState] = None) -> tuple[torch.Tensor, Optional[DecoderState]]:
        """(B, T) target prefix -> (B, T, V) logits; with a state, only the new positions.

        The memory may hold fewer rows than the prefix (B = Bm * beam): each run of `beam` rows
        decodes against one memory row.

        For incremental decoding pass `init_state(memory)` on the first step and the returned
        state on every later step, feeding only the newest token(s).
        """
        offset = state.offset if state is not None else 0
        y = self.tgt_embed(tgt_in, offset)  # (B, T, D)
        for i, layer in enumerate(self.decoder_layers):
            caches = (state.self_attn[i], state.cross_attn[i]) if state is not None else (None, None)
            y = layer(y, memory, *caches)
        if state is not None:
            state.offset = offset + tgt_in.size(1)
        return self.output(self.decoder_norm(y)), state  # (B, T, V)

    def init_state(self, memory: Memory) -> DecoderState:
        """An empty cache: one self-attention and one cross-attention dict per decoder layer,
        filled by the first `decode`."""
        n = len(self.decoder_layers)
        return DecoderState([{} for _ in range(n)], [{} for _ in range(n)], 0)

    def forward(self, src: torch.Tensor, tgt_in: torch.Tensor) -> torch.Tensor:
        """Teacher-forced logits: (B, S), (B, T) -> (B, T, V)."""
        return self.decode(tgt_in, self.encode(src))[0]
