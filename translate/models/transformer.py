"""The pre-norm Transformer encoder-decoder (Vaswani et al., 2017, with pre-LayerNorm blocks).

    encoder   token embedding * sqrt(D) + sinusoidal positions, then N blocks of
              x = x + Dropout(SelfAttention(LayerNorm(x)))            every source position sees all
              x = x + Dropout(FeedForward(LayerNorm(x)))
    decoder   the same embedding for the target prefix, then N blocks of
              y = y + Dropout(CausalSelfAttention(LayerNorm(y)))      a position sees its past only
              y = y + Dropout(CrossAttention(LayerNorm(y), memory))   Q from y; K, V from the encoder
              y = y + Dropout(FeedForward(LayerNorm(y)))
    output    LayerNorm, then a projection to the vocabulary (tied to the embedding)

Attention is how positions talk to each other; the feed-forward network is where each position
computes on what it gathered. Pre-norm blocks (LayerNorm before each sublayer, the residual
path left clean) train stably without a long warm-up.

Options beside the classic choices (the config's `norm` and `activation`):
    norm: rmsnorm       every LayerNorm above an RMSNorm (Zhang & Sennrich, 2019): divide by
                        the root mean square and scale; no mean subtracted, no shift
    activation: relu2   ReLU(x)^2 in the feed-forward network (So et al., 2021, Primer)
    activation: swiglu  a gated feed-forward network, W2(SiLU(W1 x) * W3 x) (Shazeer, 2020),
                        its hidden width about 2/3 of ffn_dim: about the plain one's parameters

Positions (`positions`): a sinusoidal table or a learned one added to the embeddings, or rope,
where nothing is added and self-attention rotates its queries and keys by their positions
instead (translate.models.attention says how, and why cross-attention is left unrotated).
`qk_norm` RMS-normalises attention's queries and keys per head; `cross_query_norm: width`
normalises cross-attention's queries over the whole width instead (as CTranslate2 does).

Shapes: B batch, S source length, T target length, D d_model, V vocabulary.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from translate.config.models import TransformerConfig
from translate.config.names import GATED
from translate.models.attention import (CROSS, DECODER_SELF, ENCODER_SELF, KVCache,
                                        MultiHeadAttention, padding_mask)
from translate.tokens import PAD


def relu_squared(x: torch.Tensor) -> torch.Tensor:
    """ReLU(x)^2: zero below 0, a parabola above it."""
    return F.relu(x).square()


# The feed-forward network's activations, by the names a recipe gives (translate.config.names).
# A gated one (GATED) multiplies the activation of one projection of the input by a second
# projection: swiglu is SiLU, x * sigmoid(x), gated. The model's config, TransformerConfig, is
# the recipe's model section (translate.config.models).
ACTIVATIONS = {"relu": F.relu, "gelu": F.gelu, "relu2": relu_squared, "swiglu": F.silu}
# The block and final norms: both divide each position's vector by its spread and scale it;
# LayerNorm first subtracts its mean and adds a learned shift, RMSNorm does neither.
NORMS = {"layernorm": nn.LayerNorm, "rmsnorm": nn.RMSNorm}
NORM_EPS = 1e-5  # both norms': LayerNorm's default (RMSNorm's follows the dtype)


@dataclass
class Memory:
    """What the encoder hands the decoder."""

    states: torch.Tensor  # (B, S, D) encoder output: cross-attention's keys and values
    src_mask: torch.Tensor  # (B, 1, 1, S) True on real source tokens

    def index_select(self, rows: torch.Tensor) -> "Memory":
        return Memory(self.states.index_select(0, rows), self.src_mask.index_select(0, rows))


@dataclass
class DecoderState:
    """What decoding one token at a time keeps: the memory, and per decoder layer the
    self-attention's keys and values so far and the memory's keys and values."""

    memory: Memory
    self_attn: list[KVCache]
    cross_attn: list[KVCache]
    offset: int = 0  # target positions decoded so far

    def reorder_beams(self, rows: torch.Tensor) -> "DecoderState":
        """Row i continues the hypothesis in row `rows[i]` (beam search's reordering)."""
        return DecoderState(self.memory.index_select(rows),
                            [c.index_select(rows) for c in self.self_attn],
                            [c.index_select(rows) for c in self.cross_attn], self.offset)

    def select(self, rows: torch.Tensor) -> "DecoderState":
        """Keep the hypotheses in `rows` alone: search drops the sentences that are done (every
        part of this state is a row per hypothesis)."""
        return self.reorder_beams(rows)


def sinusoidal_positions(length: int, dim: int) -> torch.Tensor:
    """(length, dim) table: sin on even, cos on odd channels, wavelengths 2pi .. 10000*2pi."""
    position = torch.arange(length, dtype=torch.float32)[:, None]
    inv_freq = torch.exp(torch.arange(0, dim, 2, dtype=torch.float32) * (-math.log(10000.0) / dim))
    table = torch.zeros(length, dim)
    table[:, 0::2] = torch.sin(position * inv_freq)
    table[:, 1::2] = torch.cos(position * inv_freq[: dim // 2])
    return table


class Embedding(nn.Module):
    """Token embedding scaled by sqrt(D), plus positions, then dropout. Attention itself does not
    know where a token stands: the positions tell it (with rope, attention's rotations do)."""

    def __init__(self, vocab: int, cfg: TransformerConfig, tokens: nn.Embedding | None = None):
        super().__init__()
        self.tokens = tokens or nn.Embedding(vocab, cfg.d_model, padding_idx=PAD)
        self.scale = math.sqrt(cfg.d_model)
        learned, sinusoidal = cfg.positions == "learned", cfg.positions == "sinusoidal"
        self.positions = nn.Embedding(cfg.max_positions, cfg.d_model) if learned else None
        self.register_buffer("table", sinusoidal_positions(cfg.max_positions, cfg.d_model)
                             if sinusoidal else None, persistent=False)
        # rope: neither; self-attention rotates queries and keys by their positions instead
        self.dropout = nn.Dropout(cfg.dropout)
        self.max_positions = cfg.max_positions

    def position_table(self) -> torch.Tensor | None:
        """(max_positions, D) what is added at each position; None with rope (nothing)."""
        return self.positions.weight if self.positions is not None else self.table

    def forward(self, ids: torch.Tensor, offset: int = 0) -> torch.Tensor:
        """(B, L) ids at positions offset .. offset + L - 1 -> (B, L, D)."""
        L = ids.size(1)
        if offset + L > self.max_positions:
            raise ValueError(f"sequence of {offset + L} positions exceeds max_positions "
                             f"({self.max_positions})")
        x = self.tokens(ids) * self.scale  # (B, L, D)
        table = self.position_table()
        if table is not None:
            x = x + table[offset: offset + L].to(x.dtype)  # (L, D) broadcast over the batch
        return self.dropout(x)


def make_norm(cfg: TransformerConfig) -> nn.Module:
    """The norm the config names (`NORMS`), over the D channels of each position."""
    if cfg.norm not in NORMS:
        raise ValueError(f"model.norm must be one of {sorted(NORMS)}, got {cfg.norm!r}")
    return NORMS[cfg.norm](cfg.d_model, eps=NORM_EPS)


class FeedForward(nn.Module):
    """Position-wise: D -> hidden -> activation -> D, the same for every position.

    Gated (`GATED`): the activation of fc1's projection scales fc3's projection of the same
    input, element by element, before fc2: W2(act(W1 x) * W3 x). Its hidden width is
    `cfg.ffn_hidden()`, about 2/3 of ffn_dim, so that it has about the plain network's
    parameters.
    """

    def __init__(self, cfg: TransformerConfig):
        super().__init__()
        if cfg.activation not in ACTIVATIONS:
            raise ValueError(f"model.activation must be one of {sorted(ACTIVATIONS)}, "
                             f"got {cfg.activation!r}")
        hidden = cfg.ffn_hidden()
        self.fc1 = nn.Linear(cfg.d_model, hidden)
        self.activation = cfg.activation
        self.dropout = nn.Dropout(cfg.activation_dropout)
        self.fc2 = nn.Linear(hidden, cfg.d_model)
        self.fc3 = nn.Linear(cfg.d_model, hidden) if cfg.activation in GATED else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden = ACTIVATIONS[self.activation](self.fc1(x))  # (B, L, hidden)
        if self.fc3 is not None:
            hidden = hidden * self.fc3(x)  # gated by the activation: (B, L, hidden)
        return self.fc2(self.dropout(hidden))  # (B, L, D)


class EncoderLayer(nn.Module):
    def __init__(self, cfg: TransformerConfig, layer: int):
        super().__init__()
        self.norm1 = make_norm(cfg)
        self.self_attn = MultiHeadAttention(cfg.d_model, cfg.heads, cfg.attn_dropout,
                                            cfg.qkv_bias, ENCODER_SELF, layer,
                                            rope=cfg.positions == "rope", qk_norm=cfg.qk_norm)
        self.norm2 = make_norm(cfg)
        self.ffn = FeedForward(cfg)
        self.dropout = nn.Dropout(cfg.dropout)

    def forward(self, x: torch.Tensor, src_mask: torch.Tensor) -> torch.Tensor:
        x = x + self.dropout(self.self_attn(self.norm1(x), mask=src_mask))
        x = x + self.dropout(self.ffn(self.norm2(x)))
        return x  # (B, S, D)


class DecoderLayer(nn.Module):
    def __init__(self, cfg: TransformerConfig, layer: int):
        super().__init__()
        D, H, p, bias = cfg.d_model, cfg.heads, cfg.attn_dropout, cfg.qkv_bias
        self.norm1 = make_norm(cfg)
        self.self_attn = MultiHeadAttention(D, H, p, bias, DECODER_SELF, layer,
                                            rope=cfg.positions == "rope", qk_norm=cfg.qk_norm)
        self.norm2 = make_norm(cfg)
        # never rotated: source and target positions count along different sequences
        self.cross_attn = MultiHeadAttention(D, H, p, bias, CROSS, layer, qk_norm=cfg.qk_norm,
                                             query_norm=cfg.cross_query_norm)
        self.norm3 = make_norm(cfg)
        self.ffn = FeedForward(cfg)
        self.dropout = nn.Dropout(cfg.dropout)

    def forward(self, y: torch.Tensor, memory: Memory, self_cache: KVCache,
                cross_cache: KVCache) -> torch.Tensor:
        y = y + self.dropout(self.self_attn(self.norm1(y), causal=True, cache=self_cache))
        y = y + self.dropout(self.cross_attn(self.norm2(y), context=memory.states,
                                             mask=memory.src_mask, cache=cross_cache))
        y = y + self.dropout(self.ffn(self.norm3(y)))
        return y  # (B, T, D)


class Transformer(nn.Module):
    """Encoder-decoder Transformer with the interface every model here offers (`Seq2Seq`).

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
        self.encoder_layers = nn.ModuleList(EncoderLayer(cfg, i) for i in range(cfg.encoder_layers))
        self.encoder_norm = make_norm(cfg)
        self.decoder_layers = nn.ModuleList(DecoderLayer(cfg, i) for i in range(cfg.decoder_layers))
        self.decoder_norm = make_norm(cfg)
        self.output = nn.Linear(cfg.d_model, tgt_vocab, bias=False)
        self._init_weights()
        if cfg.tie_embeddings:
            self.output.weight = tgt_tokens.weight

    def _init_weights(self) -> None:
        """Xavier-uniform linears; Q, K, V with gain 1/sqrt(2), the scale one fused (3D, D)
        matrix would get (as fairseq does); embeddings N(0, 1/D), PAD's row zero."""
        for name, module in self.named_modules():
            if isinstance(module, nn.Linear):
                qkv = name.endswith(("q_proj", "k_proj", "v_proj"))
                nn.init.xavier_uniform_(module.weight, gain=2 ** -0.5 if qkv else 1.0)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
            elif isinstance(module, nn.Embedding):
                nn.init.normal_(module.weight, std=self.cfg.d_model ** -0.5)
                if module.padding_idx is not None:
                    nn.init.zeros_(module.weight[module.padding_idx])

    def encode(self, src: torch.Tensor) -> Memory:
        """(B, S) source ids -> Memory with (B, S, D) states."""
        src_mask = padding_mask(src)  # (B, 1, 1, S)
        x = self.src_embed(src)
        for layer in self.encoder_layers:
            x = layer(x, src_mask)
        return Memory(self.encoder_norm(x), src_mask)

    def init_state(self, memory: Memory) -> DecoderState:
        """Empty caches, filled as `decode` runs: the start of every target."""
        n = len(self.decoder_layers)
        return DecoderState(memory, [KVCache() for _ in range(n)], [KVCache() for _ in range(n)])

    def decode(self, tgt_in: torch.Tensor, state: DecoderState
               ) -> tuple[torch.Tensor, DecoderState]:
        """(B, T) the next target tokens -> (B, T, V) logits and the state after them.

        Feeding the whole prefix at once or one token per call gives the same logits.
        """
        states, state = self.decoder_states(tgt_in, state)
        return self.output(states), state  # (B, T, V)

    def decoder_states(self, tgt_in: torch.Tensor, state: DecoderState
                       ) -> tuple[torch.Tensor, DecoderState]:
        """`decode` up to the output layer: (B, T, D) the states it projects to logits."""
        y = self.tgt_embed(tgt_in, state.offset)  # (B, T, D)
        for layer, self_cache, cross_cache in zip(self.decoder_layers, state.self_attn,
                                                  state.cross_attn):
            y = layer(y, state.memory, self_cache, cross_cache)
        state.offset += tgt_in.size(1)
        return self.decoder_norm(y), state

    def forward(self, src: torch.Tensor, tgt_in: torch.Tensor) -> torch.Tensor:
        """Teacher forcing: (B, S) source, (B, T) target prefix -> (B, T, V) logits."""
        return self.output(self.features(src, tgt_in))

    def features(self, src: torch.Tensor, tgt_in: torch.Tensor) -> torch.Tensor:
        """Teacher forcing up to the output layer: (B, T, D) states; `self.output` of them
        gives the logits (a loss may project them a chunk at a time, translate.gpu.loss)."""
        return self.decoder_states(tgt_in, self.init_state(self.encode(src)))[0]
