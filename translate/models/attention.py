"""Multi-head scaled dot-product attention: one module in the three roles of an encoder-decoder.

    encoder self-attention    attn(x, mask=src_mask)                   Q, K, V from the source
    decoder self-attention    attn(y, causal=True, cache=...)          Q, K, V from the target
                                                                       prefix, future masked
    cross-attention           attn(y, context=memory, mask=src_mask)   Q from the target; K, V
                                                                       from the encoder output

A query says what a position is looking for (Q), a key what a position holds (K), a value what it
hands on (V). Each query's output is the average of the values weighted by
softmax(q . k / sqrt(Dh)) over the keys it may see. Without the 1 / sqrt(Dh) the dot products'
variance grows with Dh and the softmax saturates towards one key. H heads each attend in their own
Dh-wide slice of Q, K and V; their outputs are concatenated and mixed by one more projection.

Two options change what q . k sees (TransformerConfig's `positions` and `qk_norm`):

    rope      rotary position embeddings (Su et al., 2021). Self-attention turns each query and
              key by its absolute position p: channel pair i rotates by the angle p * theta_i,
              theta_i = 10000^(-2i/Dh). Rotations compose, (R_p q) . (R_p' k) = q . (R_(p'-p) k),
              so a score depends on the distance p' - p alone, and no position is added to the
              embeddings. Cross-attention is not rotated: the source and the target are
              different sequences, so a distance between their positions means nothing; the
              decoder learns where it stands from its self-attention.
    qk_norm   each head's query and key RMS-normalised over its Dh channels (torch.nn.RMSNorm:
              a learned scale per channel, shared by the heads) before the scores; with rope,
              normalised first, then rotated (a rotation keeps the length). A normalised q or k
              has length sqrt(Dh), so q . k / sqrt(Dh) stays within +-sqrt(Dh) times the
              scales however large the projections' weights grow, and the softmax cannot
              saturate by them. The 1 / sqrt(Dh) stays; the learned scales set how sharp
              attention may get. With `query_norm="width"` (TransformerConfig's
              `cross_query_norm`, cross-attention only) the queries are normalised over all D
              channels at once, before the heads are split, with a D-wide scale: heads whose
              queries are small stay small. CTranslate2 computes cross-attention this way.

Shapes: B batch, T query length, S key length, L either, D model width, H heads, Dh = D / H.
Masks are boolean, True = may attend, broadcastable to (B, H, T, S).

Which code runs: `scaled_dot_product_attention` below is attention written out. With
`--engine textbook` (`train.engine: textbook`) every attention runs it, so an edit here (drop the
scale, break the mask) shows in training and translation. The other engines call PyTorch's fused
`F.scaled_dot_product_attention` instead (plain, gpu), or swap in translate/fast/ (fast, the CPU
default); tests/models/ and tests/fast/ check that all of them compute what this file does.

An attention module returns its output alone. The weights are for looking at: while
translate.analysis.attention records (the maps, the serve page, the tour's figures), it sets each
module's `record_weights`, and the module runs the written-out path and hands it the weights.
"""

from __future__ import annotations

import math
from typing import Callable, Optional

import torch
import torch.nn.functional as F
from torch import nn

from translate.config.names import QUERY_NORMS  # what qk_norm normalises a query over
from translate.tokens import PAD

ENCODER_SELF = "encoder self-attention"
DECODER_SELF = "decoder self-attention"
CROSS = "cross-attention"


def padding_mask(ids: torch.Tensor, pad: int = PAD) -> torch.Tensor:
    """(B, S) ids -> (B, 1, 1, S) mask, True on real tokens: no query attends to padding."""
    return (ids != pad)[:, None, None, :]


def causal_mask(length: int, offset: int = 0, device: torch.device | None = None) -> torch.Tensor:
    """(T, offset + T) mask: query i, at position offset + i, sees keys 0 .. offset + i."""
    rows = torch.arange(length, device=device)[:, None] + offset
    cols = torch.arange(offset + length, device=device)[None, :]
    return cols <= rows


def scaled_dot_product_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                                 mask: Optional[torch.Tensor] = None, dropout: float = 0.0
                                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """softmax(q k^T / sqrt(Dh)) v written out; what `F.scaled_dot_product_attention` computes.

    Args:
        q: (B, H, T, Dh) queries; k, v: (B, H, S, Dh) keys and values.
        mask: boolean, True = may attend, broadcastable to (B, H, T, S).
        dropout: drop probability for the weights (pass 0 outside training).

    Returns:
        (B, H, T, Dh) output and the (B, H, T, S) attention weights.
    """
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))  # (B, H, T, S)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores.float(), dim=-1).to(q.dtype)  # each row sums to 1
    return F.dropout(weights, dropout) @ v, weights  # (B, H, T, Dh)


def rotary_tables(positions: torch.Tensor, dim: int, base: float = 10000.0
                  ) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of the angles position * theta_i, theta_i = base^(-2i/dim): (L, dim/2) each
    for (L,) positions; the same wavelengths as the sinusoidal table's."""
    theta = base ** (-torch.arange(0, dim, 2, device=positions.device).float() / dim)  # (Dh/2,)
    angles = positions.float()[:, None] * theta  # (L, Dh/2)
    return angles.cos(), angles.sin()


def rotate(t: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """Queries or keys (..., L, Dh) at `positions` (L,), each channel pair (2i, 2i+1) turned by
    the angle position * theta_i: (x, y) -> (x cos - y sin, x sin + y cos)."""
    cos, sin = (table.to(t.dtype) for table in rotary_tables(positions, t.size(-1)))
    x, y = t[..., 0::2], t[..., 1::2]  # (..., L, Dh/2) each
    return torch.stack([x * cos - y * sin, x * sin + y * cos], dim=-1).flatten(-2)  # (..., L, Dh)


class KVCache:
    """The keys and values an attention module keeps between decoding steps.

    Decoder self-attention appends each step's K, V to the past ones (the keys as the scores
    use them: normalised, rotated to their positions); cross-attention stores the memory's K, V
    at the first step and reuses them, since the memory never changes.
    """

    def __init__(self, k: Optional[torch.Tensor] = None, v: Optional[torch.Tensor] = None):
        self.k, self.v = k, v  # (B, H, S, Dh) each, or None before the first step

    @property
    def empty(self) -> bool:
        return self.k is None

    @property
    def length(self) -> int:
        """Positions cached so far: the next one's position."""
        return 0 if self.empty else self.k.size(2)

    def append(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Add this step's (B, H, T, Dh) keys and values; return all so far, (B, H, S, Dh)."""
        if not self.empty:
            k, v = torch.cat([self.k, k], dim=2), torch.cat([self.v, v], dim=2)
        self.k, self.v = k, v
        return k, v

    def index_select(self, rows: torch.Tensor) -> "KVCache":
        """A cache whose row i is row `rows[i]` of this one (beam search reorders with it)."""
        if self.empty:
            return KVCache()
        return KVCache(self.k.index_select(0, rows), self.v.index_select(0, rows))


class MultiHeadAttention(nn.Module):
    """Multi-head scaled dot-product attention for self- and cross-attention.

    Args:
        d_model: width D of queries, keys and values.
        heads: number of heads H; D must be divisible by H.
        dropout: dropout on the attention weights (training only).
        bias: whether the Q, K and V projections have a bias.
        role: ENCODER_SELF, DECODER_SELF or CROSS; figures label the weights with it.
        layer: the index of the layer this module belongs to, for figures.
        rope: rotate queries and keys by their positions (self-attention only: the module
            docstring says why); the head width Dh must be even.
        qk_norm: RMS-normalise each head's queries and keys, with a learned scale.
        query_norm: with qk_norm, "head" (each head's Dh channels) or "width" (all D channels
            before the heads split; cross-attention only, as its queries are never rotated).
    """

    written_out = False  # True: always the written-out attention (the textbook engine)
    # Set while translate.analysis.attention records: each call's (B, H, T, S) weights go to it,
    # through the written-out path. None: nothing is recorded, and nothing costs anything.
    record_weights: Optional[Callable[[torch.Tensor], None]] = None

    def __init__(self, d_model: int, heads: int, dropout: float = 0.0, bias: bool = True,
                 role: str = ENCODER_SELF, layer: int = 0, rope: bool = False,
                 qk_norm: bool = False, query_norm: str = "head"):
        super().__init__()
        if d_model % heads:
            raise ValueError(f"d_model ({d_model}) must be divisible by heads ({heads})")
        if rope and role == CROSS:
            raise ValueError("rope rotates self-attention only: source and target positions "
                             "count along different sequences")
        if rope and (d_model // heads) % 2:
            raise ValueError(f"rope turns channel pairs: the head width d_model / heads "
                             f"({d_model} / {heads} = {d_model // heads}) must be even")
        self.heads, self.head_dim = heads, d_model // heads
        self.dropout = dropout
        self.role, self.layer = role, layer
        self.rope = rope
        self.q_proj = nn.Linear(d_model, d_model, bias=bias)
        self.k_proj = nn.Linear(d_model, d_model, bias=bias)
        self.v_proj = nn.Linear(d_model, d_model, bias=bias)
        self.out_proj = nn.Linear(d_model, d_model)
        if query_norm not in QUERY_NORMS:
            raise ValueError(f"query_norm is one of {QUERY_NORMS}, not {query_norm!r}")
        if query_norm == "width" and (role != CROSS or not qk_norm):
            raise ValueError("query_norm='width' normalises cross-attention's queries, with "
                             "qk_norm: its self-attention queries are rotated per head")
        self.width_query_norm = qk_norm and query_norm == "width"
        q_width = d_model if self.width_query_norm else self.head_dim
        self.q_norm = nn.RMSNorm(q_width, eps=1e-6) if qk_norm else None
        self.k_norm = nn.RMSNorm(self.head_dim, eps=1e-6) if qk_norm else None

    def forward(self, x: torch.Tensor, context: Optional[torch.Tensor] = None,
                mask: Optional[torch.Tensor] = None, causal: bool = False,
                cache: Optional[KVCache] = None) -> torch.Tensor:
        """Attend from `x` to `context`, or to `x` itself when there is no context.

        Args:
            x: (B, T, D) the queries' input.
            context: (B, S, D) the keys' and values' input (the encoder output); None for
                self-attention.
            mask: boolean, True = may attend, broadcastable to (B, H, T, S).
            causal: position t may see positions <= t only (decoder self-attention).
            cache: keys and values kept between decoding steps (see `KVCache`), updated in
                place.

        Returns:
            (B, T, D) output.
        """
        past = cache.length if cache is not None and context is None else 0  # x's 1st position
        q = self.queries(self.q_proj(x), past)  # (B, H, T, Dh)
        k, v = self.keys_values(x if context is None else context, cross=context is not None,
                                cache=cache, past=past)  # (B, H, S, Dh) each
        T, S = q.size(2), k.size(2)
        # Causal: a query at position t sees the keys up to t, the past and itself. For a whole
        # target at once (training: T == S, no other mask) SDPA applies that rule itself, with
        # no (T, S) mask built and its fastest kernel free to run; otherwise a mask says it.
        written_out = self.written_out or self.record_weights is not None
        is_causal = causal and T == S and mask is None and not written_out
        if causal and not is_causal:
            allowed = causal_mask(T, offset=S - T, device=x.device)  # (T, S)
            mask = allowed if mask is None else mask & allowed
        dropout = self.dropout if self.training else 0.0
        if written_out:
            out, weights = scaled_dot_product_attention(q, k, v, mask, dropout)
            if self.record_weights is not None:
                self.record_weights(weights)  # (B, H, T, S)
        else:
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout,
                                                 is_causal=is_causal)  # (B, H, T, Dh)
        return self.out_proj(self.merge_heads(out))  # (B, T, D)

    def keys_values(self, source: torch.Tensor, cross: bool, cache: Optional[KVCache],
                    past: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        """K and V of `source`, (B, H, S, Dh) each, through the cache when there is one; the
        new keys at positions past, past + 1, ..."""
        if cross and cache is not None and not cache.empty:
            return cache.k, cache.v  # the memory's K, V were projected at the first step
        k = self.norm_and_rotate(self.split_heads(self.k_proj(source)), self.k_norm, past)
        v = self.split_heads(self.v_proj(source))  # (B, H, S, Dh)
        return cache.append(k, v) if cache is not None else (k, v)

    def queries(self, q: torch.Tensor, past: int) -> torch.Tensor:
        """Projected queries (B, T, D) -> (B, H, T, Dh) as the scores use them: normalised over
        the width first where `width_query_norm`, else per head by `norm_and_rotate`."""
        if self.width_query_norm:  # in fp32, as norm_and_rotate; cross-attention: no rotation
            return self.split_heads(self.q_norm(q.float()).to(q.dtype))  # (B, H, T, Dh)
        return self.norm_and_rotate(self.split_heads(q), self.q_norm, past)  # (B, H, T, Dh)

    def norm_and_rotate(self, t: torch.Tensor, norm: Optional[nn.RMSNorm], past: int
                        ) -> torch.Tensor:
        """Queries or keys (B, H, L, Dh) as the scores use them: RMS-normalised (qk_norm), then
        rotated to positions past .. past + L - 1 (rope); as they are without the options."""
        if norm is not None:  # in fp32 (as CUDA's autocast runs it), then in V's dtype again
            t = norm(t.float()).to(t.dtype)
        if self.rope:
            t = rotate(t, torch.arange(past, past + t.size(2), device=t.device))
        return t

    def split_heads(self, t: torch.Tensor) -> torch.Tensor:
        """(B, L, D) -> (B, H, L, Dh): each head gets its own Dh-wide slice."""
        B, L, _ = t.shape
        return t.view(B, L, self.heads, self.head_dim).transpose(1, 2)  # (B, H, L, Dh)

    def merge_heads(self, t: torch.Tensor) -> torch.Tensor:
        """(B, H, L, Dh) -> (B, L, D): the heads' outputs side by side."""
        B, H, L, Dh = t.shape
        return t.transpose(1, 2).reshape(B, L, H * Dh)  # (B, L, D)
