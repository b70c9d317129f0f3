"""Multi-head scaled dot-product attention, one module for all three roles.

    encoder self-attention   attn(x, mask=src_mask)                      Q, K, V from the source
    decoder self-attention   attn(y, causal=True, cache=...)             Q, K, V from the target prefix
    cross-attention          attn(y, context=memory, mask=src_mask)      Q from the target, K, V from
                                                                         the encoder output

Shapes: B batch, T query length, S key length, D model width, H heads, Dh = D / H, A the
additive attention's width. Masks are boolean, True = may attend, broadcastable to (B, H, T, S).

`AdditiveAttention` is Bahdanau et al.'s (2014) scorer for the RNN model; `record_attention`
collects the weights of every attention module in a model, for plots.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator, Optional

import torch
import torch.nn.functional as F
from torch import nn

from translate.models.linear import Linear


def padding_mask(ids: torch.Tensor, pad: int = 0) -> torch.Tensor:
    """(B, S) ids -> (B, 1, 1, S) mask, True on real tokens."""
    return (ids != pad)[:, None, None, :]


def causal_mask(length: int, offset: int = 0, device: torch.device | None = None) -> torch.Tensor:
    """(T, offset + T) mask: query i (at absolute position offset + i) sees keys 0..offset + i."""
    rows = torch.arange(length, device=device)[:, None] + offset
    cols = torch.arange(offset + length, device=device)[None, :]
    return cols <= rows


def sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: Optional[torch.Tensor],
         dropout: float, causal: bool) -> torch.Tensor:
    """F.scaled_dot_product_attention; (B, H, T, Dh) x (B, H, S, Dh) x 2 -> (B, H, T, Dh).

    On the CPU the fused kernel is several times slower in bf16 than in fp32 (measured in
    benchmarks/train_speed.py), so there it runs in fp32 even under bf16 autocast.
    """
    if q.device.type == "cpu" and q.dtype != torch.float32:
        with torch.autocast("cpu", enabled=False):
            out = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), attn_mask=mask,
                                                 dropout_p=dropout, is_causal=causal)
        return out.to(q.dtype)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout,
                                          is_causal=causal)


def additive_mask(mask: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Boolean mask (True = may attend) -> the same shape of 0 where True, -inf where False."""
    bias = torch.zeros(mask.shape, dtype=dtype, device=mask.device)
    return bias.masked_fill_(~mask, float("-inf"))


def explicit_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                       mask: Optional[torch.Tensor], dropout: float = 0.0, training: bool = False
                       ) -> tuple[torch.Tensor, torch.Tensor]:
    """softmax(q k^T / sqrt(Dh) + bias) v written out: (B, H, T, Dh) output, (B, H, T, S) weights.

    `mask` is boolean (True = may attend) or already additive (0 or -inf), broadcastable to
    (B, H, T, S); one batched matmul adds it while it computes and scales the scores.
    """
    B, H, T, Dh = q.shape
    S = k.size(2)
    keys_t = k.reshape(B * H, S, Dh).transpose(1, 2)  # (B * H, Dh, S)
    if mask is None:
        scores = torch.bmm(q.reshape(B * H, T, Dh), keys_t).mul_(Dh ** -0.5)
    else:
        bias = additive_mask(mask) if mask.dtype == torch.bool else mask
        bias = bias.expand(B, H, bias.size(-2), S).reshape(B * H, -1, S)  # (B * H, 1 or T, S)
        scores = torch.baddbmm(bias, q.reshape(B * H, T, Dh), keys_t, alpha=Dh ** -0.5)
    weights = torch.softmax(scores.view(B, H, T, S).float(), dim=-1).to(q.dtype)
    return F.dropout(weights, dropout, training) @ v, weights


def explicit_is_faster(q: torch.Tensor, k: torch.Tensor) -> bool:
    """Whether explicit matmuls beat PyTorch's fused kernel here: a decoding step on the CPU (no
    autograd) with 2 to 32 queries per head, or one query against at least 4096 keys in all.

    The fused kernel's blocking is tuned for long sequences: it took 2-2.5x as long on
    cross-attention from a sentence's 5 beams (beam 5 on Multi30k, 2 threads), and 1.2-1.5x on
    self-attention steps of 160 rows against 8 or more cached positions; below that, with one
    query, it wins. Training keeps the fused kernel and its lean backward.
    """
    T = q.size(-2)
    return (q.device.type == "cpu" and not torch.is_grad_enabled() and T <= 32
            and (T > 1 or q.size(0) * q.size(1) * k.size(-2) >= 4096))


def extend_cache(cache: dict, kv: torch.Tensor) -> torch.Tensor:
    """Self-attention's cache after this step: the cached keys and values, (2, B', H, S_past,
    Dh), their rows picked by a pending beam reorder (`defer_reorder`), then this step's (2, B,
    H, T, Dh) ones. Picking and appending write one new tensor, so a step copies the past once,
    not twice; keys and values sit in one tensor, so each is one operation."""
    if "kv" not in cache:
        cache["kv"] = kv
        return kv
    rows, past = cache.pop("rows", None), cache["kv"]
    S = past.size(3)
    out = kv.new_empty(2, kv.size(1), kv.size(2), S + kv.size(3), kv.size(4))
    if rows is None:
        out[:, :, :, :S] = past
    else:
        torch.index_select(past, 1, rows, out=out[:, :, :, :S])
    out[:, :, :, S:] = kv
    cache["kv"] = out
    return out


def defer_reorder(cache: dict, rows: torch.Tensor) -> dict:
    """A self-attention cache whose row i will be row `rows[i]` of this one: the pick is made by
    the next `extend_cache` (composed with any pick still pending), not copied now."""
    if "kv" not in cache:
        return {}
    pending = cache.get("rows")
    return {"kv": cache["kv"], "rows": rows if pending is None else pending[rows]}


class MultiHeadAttention(nn.Module):
    """Multi-head attention with an SDPA fast path and an explicit path that returns the weights.

    Args:
        d_model: width D of queries, keys and values.
        heads: number of heads H; D must be divisible by H.
        dropout: dropout on the attention weights (training only).
        bias: whether the Q/K/V projections have a bias.
        fused_qkv: one (D -> 3D) projection instead of three (D -> D); in cross-attention the
            fused weight is split so that Q comes from the target and K, V from the memory.
    """

    def __init__(self, d_model: int, heads: int, dropout: float = 0.0, bias: bool = True,
                 fused_qkv: bool = True):
        super().__init__()
        if d_model % heads:
            raise ValueError(f"d_model ({d_model}) must be divisible by heads ({heads})")
        self.d_model, self.heads, self.head_dim = d_model, heads, d_model // heads
        self.dropout = dropout
        self.fused_qkv = fused_qkv
        if fused_qkv:
            self.qkv_proj = Linear(d_model, 3 * d_model, bias=bias)
        else:
            self.q_proj = Linear(d_model, d_model, bias=bias)
            self.k_proj = Linear(d_model, d_model, bias=bias)
            self.v_proj = Linear(d_model, d_model, bias=bias)
        self.out_proj = Linear(d_model, d_model)
        self.recorder: Optional[list] = None  # set by record_attention()

    def forward(self, x: torch.Tensor, context: Optional[torch.Tensor] = None,
                mask: Optional[torch.Tensor] = None, causal: bool = False,
                cache: Optional[dict] = None, need_weights: bool = False,
                ) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
        """Attend from `x` to `context` (or to `x` itself).

        Args:
            x: (B, T, D) queries' input.
            context: (Bc, S, D) keys' and values' input; None for self-attention. Bc may divide B:
                then each run of B / Bc consecutive query rows (a sentence's beams) attends to one
                context row, which is neither copied nor projected more than once.
            mask: boolean, True = may attend, broadcastable to (B, H, T, S).
            causal: position t sees positions <= t only (decoder self-attention).
            cache: a dict for incremental decoding. Self-attention appends this step's K, V to
                it (`extend_cache`); cross-attention projects the memory once and reuses it.
            need_weights: use the explicit path and return the (B, H, T, S) attention weights.
                Decoding steps on the CPU take that path where it is faster (`explicit_is_faster`).

        Returns:
            (B, T, D) output and the weights (or None).
        """
        B, T, D = x.shape
        need_weights = need_weights or self.recorder is not None
        q, k, v = self._project(x, context, cache)  # (B, T, D), (Bc, H, S, Dh) x 2
        groups = B // k.size(0)  # query rows per context row: a sentence's beams share its memory
        # a context row's G query rows are one query sequence: (Bc, H, G * T, Dh), a view
        q = self._split_heads(q.reshape(B // groups, groups * T, D))
        explicit = need_weights or explicit_is_faster(q, k)
        if causal and T == 1:
            causal = False  # one new query may see every key so far
        elif causal and (mask is not None or explicit or k.size(2) != T):
            offset = k.size(2) - T  # positions already in the cache
            full = causal_mask(T, offset, x.device)  # (T, S)
            mask, causal = (full if mask is None else mask & full), False
        weights = None
        if explicit and context is not None and cache is not None and mask is not None:
            if "bias" not in cache:  # the memory's mask, made additive once per sentence
                shape = (k.size(0), self.heads, 1, k.size(2))  # (Bc, H, 1, S)
                cache["bias"] = additive_mask(mask, q.dtype).expand(shape).contiguous()
            mask = cache["bias"]
        if explicit:
            out, weights = explicit_attention(q, k, v, mask, self.dropout, self.training)
            if need_weights and groups > 1:  # one row per query: (B, H, T, S)
                weights = weights.unflatten(2, (groups, T)).transpose(1, 2).flatten(0, 1)
        else:
            out = sdpa(q, k, v, mask, self.dropout if self.training else 0.0, causal)
        if self.recorder is not None:
            self.recorder.append(weights.detach())
        out = out.transpose(1, 2).reshape(B, T, D)  # (Bc, G * T, H, Dh) -> (B, T, D)
        return self.out_proj(out), weights if need_weights else None

    def _project(self, x, context, cache):
        """Q (B, T, D) from x; K, V (Bc, H, S, Dh) from the context (or x), using and filling
        the cache."""
        D, cross = self.d_model, context is not None
        if cross and cache is not None and "k" in cache:  # the memory's K, V never change
            return self._queries(x), cache["k"], cache["v"]
        if self.fused_qkv and not cross:
            qkv = self.qkv_proj(x)  # (B, T, 3D)
            q, kv = qkv[..., :D], qkv[..., D:]
        else:
            q, kv = self._queries(x), self._keys_values(x if context is None else context)
        kv = kv.view(*kv.shape[:2], 2, self.heads, self.head_dim).permute(2, 0, 3, 1, 4)
        if cache is not None:  # kv: (2, Bc, H, S, Dh)
            if cross:  # contiguous, so that no step copies them again
                cache["k"], cache["v"] = kv[0].contiguous(), kv[1].contiguous()
                return q, cache["k"], cache["v"]
            kv = extend_cache(cache, kv)  # (2, B, H, S_past + T, Dh)
        return q, kv[0], kv[1]

    def _queries(self, x: torch.Tensor) -> torch.Tensor:
        """(B, T, D) -> (B, T, D) queries."""
        return self.qkv_proj.rows(x, slice(0, self.d_model)) if self.fused_qkv else self.q_proj(x)

    def _keys_values(self, context: torch.Tensor) -> torch.Tensor:
        """(B, S, D) -> (B, S, 2D): keys, then values."""
        if self.fused_qkv:
            return self.qkv_proj.rows(context, slice(self.d_model, 3 * self.d_model))
        return torch.cat([self.k_proj(context), self.v_proj(context)], dim=-1)

    def unfuse(self) -> None:
        """Replace the fused (3D, D) Q/K/V projection by three (D, D) ones holding its weights,
        so that each is a plain Linear (as int8 dynamic quantization needs); outputs are equal."""
        if not self.fused_qkv:
            return
        D, fused = self.d_model, self.qkv_proj
        for i, name in enumerate(("q_proj", "k_proj", "v_proj")):
            part = Linear(D, D, bias=fused.bias is not None, device=fused.weight.device,
                             dtype=fused.weight.dtype)
            with torch.no_grad():
                part.weight.copy_(fused.weight[i * D: (i + 1) * D])
                if fused.bias is not None:
                    part.bias.copy_(fused.bias[i * D: (i + 1) * D])
            setattr(self, name, part)
        del self.qkv_proj
        self.fused_qkv = False

    def _split_heads(self, t: torch.Tensor) -> torch.Tensor:
        B, L, _ = t.shape
        return t.view(B, L, self.heads, self.head_dim).transpose(1, 2)  # (B, H, L, Dh)


class AdditiveAttention(nn.Module):
    """Bahdanau attention: e_j = v^T tanh(W q + U k_j), weights softmax(e) over real positions.

    U k_j does not depend on the query, so `project_keys` computes it once per sentence and every
    decoder step reuses it.

    Args:
        query_dim: width of the query (the decoder state s_{i-1}).
        key_dim: width of the keys (the encoder annotations h_j).
        attn_dim: width A of the hidden scoring layer.
    """

    def __init__(self, query_dim: int, key_dim: int, attn_dim: int):
        super().__init__()
        self.query_proj = Linear(query_dim, attn_dim, bias=False)  # W
        self.key_proj = Linear(key_dim, attn_dim)  # U (its bias is the scorer's bias)
        self.score = Linear(attn_dim, 1, bias=False)  # v
        self.recorder: Optional[list] = None  # set by record_attention()

    def project_keys(self, keys: torch.Tensor) -> torch.Tensor:
        """(B, S, key_dim) annotations -> (B, S, A) U h_j."""
        return self.key_proj(keys)

    def forward(self, query: torch.Tensor, projected_keys: torch.Tensor, values: torch.Tensor,
                mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """One decoder step.

        Args:
            query: (B, query_dim); B may be a multiple of Bc, as in MultiHeadAttention: each run
                of B / Bc rows (a sentence's beams) attends to one row of the keys.
            projected_keys: (Bc, S, A) from `project_keys`.
            values: (Bc, S, Dv) what the context averages (the annotations themselves).
            mask: (Bc, S) boolean, True on real source positions.

        Returns:
            (B, Dv) context vector and (B, S) weights (zero on padding, summing to one).
        """
        Bc, S, A = projected_keys.shape
        query = self.query_proj(query).view(Bc, -1, 1, A)  # (Bc, G, 1, A)
        hidden = torch.tanh(projected_keys[:, None] + query)  # (Bc, G, S, A)
        energies = self.score(hidden).squeeze(-1)  # (Bc, G, S)
        energies = energies.masked_fill(~mask[:, None], float("-inf"))
        weights = torch.softmax(energies.float(), dim=-1).to(values.dtype)  # (Bc, G, S)
        context = torch.bmm(weights, values).flatten(0, 1)  # (B, Dv)
        weights = weights.flatten(0, 1)  # (B, S)
        if self.recorder is not None:
            self.recorder.append(weights.detach()[:, None])  # (B, 1, S): one target step
        return context, weights


@contextmanager
def record_attention(model: nn.Module) -> Iterator[dict[str, list[torch.Tensor]]]:
    """Collect attention weights while the block runs: {module name: [weights per call]}.

    MultiHeadAttention calls add (B, H, T, S) tensors (they switch to the explicit path), and
    AdditiveAttention calls add (B, 1, S), one per decoder step.
    """
    modules = {name: m for name, m in model.named_modules()
               if isinstance(m, (MultiHeadAttention, AdditiveAttention))}
    maps: dict[str, list[torch.Tensor]] = {name: [] for name in modules}
    for name, m in modules.items():
        m.recorder = maps[name]
    try:
        yield maps
    finally:
        for m in modules.values():
            m.recorder = None
