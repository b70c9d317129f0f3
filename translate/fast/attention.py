"""The fast engine's attention: the textbook module's parameters, faster ways to use them.

What it changes, each measured on a 2-core CPU (docs/results.md):
  - self-attention's Q, K, V come from one matmul over the three weights side by side, through
    oneDNN with packed weights in fp32 inference (`translate.fast.linear`);
  - decoding steps on the CPU use explicit matmuls where PyTorch's fused kernel is slower (a
    sentence's beams as 2-32 queries, or one query against many keys), adding the memory's mask
    as a bias made once per sentence;
  - a sentence's beams share its memory row: cross-attention folds them into one query sequence
    instead of copying the memory per beam;
  - the self-attention cache keeps K and V in one tensor and defers beam search's reordering to
    the next step, which picks and appends in one copy;
  - on the CPU the fused kernel runs in fp32 under bf16 autocast (several times faster there);
  - rotary positions turn each channel pair as one complex product (`rotate_complex`), not
    the textbook's slices, products and re-interleaving.

Shapes: B query rows, Bc context rows (B = Bc * G, G beams per sentence), T queries, S keys,
D model width, H heads, Dh = D / H.

Tests: tests/fast/test_fast_engine.py.
"""

from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

from translate.fast.linear import NoPickledPacks, linear
from translate.models.attention import MultiHeadAttention, causal_mask, rotary_tables


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
    """softmax(q k^T / sqrt(Dh) + bias) v: (B, H, T, Dh) output, (B, H, T, S) weights.

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
    weights = torch.softmax(scores.view(B, H, T, S), dim=-1, dtype=torch.float32).to(q.dtype)
    dropped = F.dropout(weights, dropout, True) if training and dropout > 0 else weights
    return dropped @ v, weights


def explicit_is_faster(q: torch.Tensor, k: torch.Tensor) -> bool:
    """Whether explicit matmuls beat PyTorch's fused kernel here: a decoding step on the CPU (no
    autograd) with 2 to 32 queries per head, or one query against at least 4096 keys in all.

    The fused kernel's blocking is tuned for long sequences: it is slower on cross-attention
    from a sentence's beams and on self-attention steps of many rows against a short cache;
    below that, with one query, it wins (docs/results.md, the fast engine's parts). Training
    keeps the fused kernel and its lean backward.
    """
    T = q.size(-2)
    return (q.device.type == "cpu" and not torch.is_grad_enabled() and T <= 32
            and (T > 1 or q.size(0) * q.size(1) * k.size(-2) >= 4096))


class PackedKVCache:
    """Self-attention's keys and values so far in one (2, B, H, S, Dh) tensor, and a beam
    reordering still to apply: the next `extend` picks the rows and appends in one copy."""

    def __init__(self, kv: Optional[torch.Tensor] = None, rows: Optional[torch.Tensor] = None):
        self.kv, self.rows = kv, rows

    @property
    def length(self) -> int:
        """Positions cached so far: the next one's position (a reordering keeps the count)."""
        return 0 if self.kv is None else self.kv.size(3)

    def extend(self, kv: torch.Tensor) -> torch.Tensor:
        """The cached K, V, their rows picked, then this step's (2, B, H, T, Dh) ones."""
        if self.kv is None:
            self.kv = kv
            return kv
        past, S = self.kv, self.kv.size(3)
        out = kv.new_empty(2, kv.size(1), kv.size(2), S + kv.size(3), kv.size(4))
        if self.rows is None:
            out[:, :, :, :S] = past
        else:
            torch.index_select(past, 1, self.rows, out=out[:, :, :, :S])
        out[:, :, :, S:] = kv
        self.kv, self.rows = out, None
        return out

    def index_select(self, rows: torch.Tensor) -> "PackedKVCache":
        """The cache whose row i will be row `rows[i]` of this one, picked at the next step."""
        if self.kv is None:
            return PackedKVCache()
        return PackedKVCache(self.kv, rows if self.rows is None else self.rows[rows])


class MemoryKV:
    """Cross-attention's keys and values of the memory, a row per sentence, projected at the
    first step, and the memory's mask made additive once."""

    def __init__(self, k: Optional[torch.Tensor] = None, v: Optional[torch.Tensor] = None,
                 bias: Optional[torch.Tensor] = None):
        self.k, self.v, self.bias = k, v, bias  # (Bc, H, S, Dh) x 2, (Bc, H, 1, S)

    def read(self) -> tuple[torch.Tensor, torch.Tensor]:
        """K and V for a later decoding step, made contiguous the first time, so that no step
        copies them again (a teacher-forced pass reads them once and never pays for it)."""
        if not self.k.is_contiguous():
            self.k, self.v = self.k.contiguous(), self.v.contiguous()
        return self.k, self.v

    def index_select(self, sentences: torch.Tensor) -> "MemoryKV":
        return MemoryKV(*(None if t is None else t.index_select(0, sentences)
                          for t in (self.k, self.v, self.bias)))


def rotate_complex(t: torch.Tensor, past: int) -> torch.Tensor:
    """The textbook's `rotate` of (..., L, Dh) queries or keys to positions past .. past + L - 1,
    as one product: channel pair (2i, 2i+1) read as the complex number x + iy, times
    cos + i sin of its angle, is (x cos - y sin) + i (x sin + y cos), the pair turned."""
    positions = torch.arange(past, past + t.size(-2), device=t.device)
    turn = torch.complex(*rotary_tables(positions, t.size(-1)))  # (L, Dh/2): cos + i sin
    pairs = torch.view_as_complex(t.float().unflatten(-1, (-1, 2)))  # (..., L, Dh/2)
    return torch.view_as_real(pairs * turn).flatten(-2).to(t.dtype)  # (..., L, Dh)


class FastMultiHeadAttention(NoPickledPacks, MultiHeadAttention):
    """MultiHeadAttention with the fast engine's ways (module docstring); the same parameters.

    Caches are `PackedKVCache` (self-attention) and `MemoryKV` (cross-attention). The options
    qk_norm and rope normalise and rotate the queries and the keys before they are kept, as the
    textbook's `queries` and `norm_and_rotate` do, the rotation a complex product
    (`rotate_complex`); queries are rotated in self-attention only, where G = 1.
    """

    fuse_qkv = True  # set by translate.fast.accelerate (its `fuse_qkv` option)

    def forward(self, x: torch.Tensor, context: Optional[torch.Tensor] = None,
                mask: Optional[torch.Tensor] = None, causal: bool = False, cache=None
                ) -> torch.Tensor:
        B, T, D = x.shape
        past = cache.length if cache is not None and context is None else 0  # x's 1st position
        q, k, v = self._project(x, context, cache, past)  # (B, T, D), (Bc, H, S, Dh) x 2
        groups = B // k.size(0)  # query rows per context row: a sentence's beams
        q = self.queries(q.reshape(B // groups, groups * T, D), past)  # (Bc, H, G * T, Dh)
        recording = self.record_weights is not None  # the explicit path has weights to give
        explicit = recording or explicit_is_faster(q, k)
        if causal and T == 1:
            causal = False  # one new query may see every key so far
        elif causal and (mask is not None or explicit or k.size(2) != T):
            full = causal_mask(T, k.size(2) - T, x.device)  # (T, S)
            mask, causal = (full if mask is None else mask & full), False
        if explicit and context is not None and cache is not None and mask is not None:
            mask = self._memory_bias(cache, mask, q)
        if explicit:
            out, weights = explicit_attention(q, k, v, mask, self.dropout, self.training)
            if recording:  # one row per query: (Bc, H, G * T, S) -> (B, H, T, S)
                self.record_weights(weights.unflatten(2, (groups, T)).transpose(1, 2)
                                    .flatten(0, 1))
        else:
            out = sdpa(q, k, v, mask, self.dropout if self.training else 0.0, causal)
        out = out.transpose(1, 2).reshape(B, T, D)  # (Bc, G * T, H, Dh) -> (B, T, D)
        return self.out_proj(out)

    def norm_and_rotate(self, t: torch.Tensor, norm: Optional[nn.RMSNorm], past: int
                        ) -> torch.Tensor:
        """The textbook's, rotating by `rotate_complex`."""
        if norm is not None:  # in fp32, then in V's dtype again, as the textbook
            t = norm(t.float()).to(t.dtype)
        return rotate_complex(t, past) if self.rope else t

    def _memory_bias(self, cache: MemoryKV, mask: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
        """The memory's mask as an additive (Bc, H, 1, S) bias, made once per sentence."""
        if cache.bias is None:
            shape = (cache.k.size(0), self.heads, 1, cache.k.size(2))
            cache.bias = additive_mask(mask, q.dtype).expand(shape).contiguous()
        return cache.bias

    def _project(self, x: torch.Tensor, context: Optional[torch.Tensor], cache, past: int = 0):
        """Q (B, T, D) from x; K, V (Bc, H, S, Dh) from the context (or x), the new keys
        normalised and rotated to positions past, past + 1, ... (the options), using and
        filling the cache."""
        cross = context is not None
        if cross and cache is not None and cache.k is not None:  # the memory's K, V never change
            return (self.q_proj(x), *cache.read())
        if self.fuse_qkv and not cross:
            qkv = self._joined(x, "qkv_int8", [self.q_proj, self.k_proj, self.v_proj], "_qkv")
            heads = self._heads(qkv, 3)  # (B, T, 3, H, Dh)
            q, k, v = heads.unbind(2)  # (B, T, H, Dh) x 3
            q, heads = q.flatten(2), heads[:, :, 1:]  # (B, T, D), (B, T, 2, H, Dh)
        else:
            q = self.q_proj(x)
            heads = self._heads(self._keys_values(x if context is None else context), 2)
            k, v = heads.unbind(2)  # (Bc, S, H, Dh) x 2
        k, v = k.transpose(1, 2), v.transpose(1, 2)  # (Bc, H, S, Dh)
        changed = self.k_norm is not None or self.rope
        if changed:  # the keys as the scores use them, and as the cache keeps them
            k = self.norm_and_rotate(k, self.k_norm, past)
        if cache is not None and not cross:  # decoding's self-attention
            first = cache.kv is None  # then this step's own views serve, as in training
            step = torch.stack([k, v]) if changed else heads.permute(2, 0, 3, 1, 4)
            kv = cache.extend(step)  # (2, B, H, S_past + T, Dh)
            if not first:
                return q, kv[0], kv[1]
        if cross and cache is not None:  # kept as they are: `read` makes them contiguous
            cache.k, cache.v = k, v
        return q, k, v

    def _heads(self, joined: torch.Tensor, n: int) -> torch.Tensor:
        """(B, L, n * D) -> (B, L, n, H, Dh), a view; taken apart with `unbind`, whose backward
        stacks the n gradients into one new tensor. Slicing or indexing each out instead
        zero-fills a full-size gradient per piece and adds them up (a faster training step:
        docs/results.md, the fast engine's parts)."""
        return joined.view(*joined.shape[:2], n, self.heads, self.head_dim)

    def _keys_values(self, source: torch.Tensor) -> torch.Tensor:
        """(Bc, S, D) -> (Bc, S, 2D): keys, then values."""
        if self.fuse_qkv:
            return self._joined(source, "kv_int8", [self.k_proj, self.v_proj], "_kv")
        return torch.cat([self.k_proj(source), self.v_proj(source)], dim=-1)

    def _joined(self, x: torch.Tensor, int8_name: str, layers: list[nn.Linear], packs: str
                ) -> torch.Tensor:
        """(..., D) -> the layers' outputs side by side in one matmul: an int8 copy's joined
        layer (`translate.fast.quantize`) where there is one, else their weights packed."""
        joined = self._modules.get(int8_name)
        return joined(x) if joined is not None else linear(x, layers, self.packs(packs))


def fuses_projections(attn: nn.Module, fuse_qkv: bool) -> bool:
    """Whether Q, K, V can be computed side by side: asked for, and plain Linear weights or an
    int8 copy's joined layer (its quantized Q, K, V layers cannot be joined at each call)."""
    plain = all(isinstance(getattr(attn, name), nn.Linear)
                for name in ("q_proj", "k_proj", "v_proj"))
    joined = any(name in ("qkv_int8", "kv_int8") for name, _ in attn.named_children())
    return fuse_qkv and (plain or joined)
