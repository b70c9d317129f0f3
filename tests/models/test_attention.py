"""The textbook attention: SDPA equals the written-out path, torch's MHA agrees, masks hold; with
rope, scores depend on relative positions alone; with qk_norm, not on the scale of Q or K."""

import pytest
import torch
from torch import nn

from helpers.models import with_weights
from translate.models.attention import (CROSS, DECODER_SELF, ENCODER_SELF, KVCache,
                                        MultiHeadAttention, causal_mask, padding_mask, rotate,
                                        scaled_dot_product_attention)

torch.manual_seed(0)
B, T, S, D, H = 3, 5, 7, 32, 4
SRC = torch.tensor([[5] * S, [5] * 4 + [0] * 3, [5] * 2 + [0] * 5])


def make(bias=True) -> MultiHeadAttention:
    return MultiHeadAttention(D, H, dropout=0.0, bias=bias).eval()


def test_sdpa_equals_the_written_out_path_in_all_three_roles():
    attn = make()
    x, memory = torch.randn(B, T, D), torch.randn(B, S, D)
    for kwargs in [dict(mask=padding_mask(torch.full((B, T), 5))), dict(causal=True),
                   dict(context=memory, mask=padding_mask(SRC))]:
        fast = attn(x, **kwargs)
        slow, weights = with_weights(attn, x, **kwargs)  # recording runs the written-out path
        torch.testing.assert_close(fast, slow, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(weights.sum(-1), torch.ones(B, H, T))


def test_a_whole_target_lets_sdpa_mask_the_future_itself(monkeypatch):
    """Training's decoder self-attention (T == S, no other mask) builds no (T, S) mask: SDPA's
    is_causal does it, with the outputs and gradients of the mask spelled out."""
    attn, seen = make(), []
    real = torch.nn.functional.scaled_dot_product_attention
    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention",
                        lambda *args, **kwargs: seen.append(kwargs) or real(*args, **kwargs))
    x = torch.randn(B, T, D, requires_grad=True)
    out = attn(x, causal=True)
    assert seen[-1]["is_causal"] and seen[-1]["attn_mask"] is None
    (grad,) = torch.autograd.grad(out.square().sum(), x)
    masked = attn(x, mask=causal_mask(T))
    assert not seen[-1]["is_causal"]
    (masked_grad,) = torch.autograd.grad(masked.square().sum(), x)
    torch.testing.assert_close(out, masked, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(grad, masked_grad, atol=1e-5, rtol=1e-5)
    attn(x[:, :2], causal=True, cache=KVCache())  # a prefix: T == S, as in training
    later = attn(x[:, 2:3], causal=True, cache=KVCache(*attn.keys_values(x[:, :2], False,
                                                                        None)))
    assert not seen[-1]["is_causal"]  # a step after the prefix (T < S): the offset mask
    torch.testing.assert_close(later, out[:, 2:3], atol=1e-6, rtol=1e-5)


def test_the_written_out_path_scales_by_the_root_of_the_head_width():
    q, k, v = torch.randn(2, H, T, 8), torch.randn(2, H, S, 8), torch.randn(2, H, S, 8)
    out, weights = scaled_dot_product_attention(q, k, v)
    expected = torch.softmax(q @ k.transpose(-2, -1) / 8 ** 0.5, dim=-1)
    torch.testing.assert_close(weights, expected)
    torch.testing.assert_close(out, expected @ v)


def test_matches_torch_multihead_attention_with_copied_weights():
    ours = make()
    ref = nn.MultiheadAttention(D, H, batch_first=True).eval()
    with torch.no_grad():
        ref.in_proj_weight.copy_(torch.cat([ours.q_proj.weight, ours.k_proj.weight,
                                            ours.v_proj.weight]))
        ref.in_proj_bias.copy_(torch.cat([ours.q_proj.bias, ours.k_proj.bias, ours.v_proj.bias]))
        ref.out_proj.weight.copy_(ours.out_proj.weight)
        ref.out_proj.bias.copy_(ours.out_proj.bias)
    x, memory = torch.randn(B, T, D), torch.randn(B, S, D)
    out = ours(x, context=memory, mask=padding_mask(SRC))
    expected, _ = ref(x, memory, memory, key_padding_mask=SRC == 0)
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)
    out = ours(x, causal=True)
    expected, _ = ref(x, x, x, attn_mask=~causal_mask(T), need_weights=False)
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)


def test_padding_gets_zero_weight_and_no_nan():
    src = torch.tensor([[5, 5, 5, 0, 0, 0, 0]] * B)
    out, weights = with_weights(make(), torch.randn(B, T, D), context=torch.randn(B, S, D),
                                mask=padding_mask(src))
    assert not torch.isnan(out).any()
    assert torch.all(weights[..., 3:] == 0)


def test_causal_weights_are_lower_triangular():
    _, weights = with_weights(make(), torch.randn(B, T, D), causal=True)
    assert torch.all(weights.triu(diagonal=1) == 0)


def test_incremental_self_attention_equals_full():
    attn = make()
    x = torch.randn(B, T, D)
    full = attn(x, causal=True)
    cache = KVCache()
    steps = [attn(x[:, t: t + 1], causal=True, cache=cache) for t in range(T)]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=1e-5)
    assert cache.k.shape == (B, H, T, D // H)
    # several new positions at once (the prefix in the cache) use an offset causal mask
    cache = KVCache()
    first = attn(x[:, :2], causal=True, cache=cache)
    rest = attn(x[:, 2:], causal=True, cache=cache)
    torch.testing.assert_close(torch.cat([first, rest], dim=1), full, atol=1e-5, rtol=1e-5)


def test_cross_attention_projects_the_memory_once():
    attn, memory = make(), torch.randn(B, S, D)
    cache = KVCache()
    attn(torch.randn(B, 1, D), context=memory, cache=cache)
    k = cache.k
    attn(torch.randn(B, 1, D), context=torch.zeros(B, S, D), cache=cache)  # not read again
    assert cache.k is k


def test_heads_must_divide_width():
    with pytest.raises(ValueError, match=r"d_model \(30\) must be divisible by heads \(4\)"):
        MultiHeadAttention(30, 4)


# The options: rotary positions in self-attention, RMS-normalised queries and keys.
OPTIONS = {"rope": dict(rope=True), "qk_norm": dict(qk_norm=True),
           "rope+qk_norm": dict(rope=True, qk_norm=True)}


def with_options(role=ENCODER_SELF, **options) -> MultiHeadAttention:
    """A module with `options`, its norm scales drawn away from 1 (as training leaves them), so
    that normalising before rotating differs from after."""
    attn = MultiHeadAttention(D, H, dropout=0.0, role=role, **options).eval()
    with torch.no_grad():
        for norm in (attn.q_norm, attn.k_norm):
            if norm is not None:
                norm.weight.uniform_(0.5, 2.0)
    return attn


def test_rotated_scores_depend_only_on_the_distance_between_positions():
    q, k = torch.randn(2, H, T, 8), torch.randn(2, H, T, 8)
    positions = torch.arange(T)
    scores = rotate(q, positions) @ rotate(k, positions).transpose(-2, -1)  # (2, H, T, T)
    for shift in (1, 37, 500):  # every position moved by `shift`
        moved = rotate(q, positions + shift) @ rotate(k, positions + shift).transpose(-2, -1)
        torch.testing.assert_close(moved, scores, atol=1e-3, rtol=1e-4)
    assert not torch.allclose(scores, q @ k.transpose(-2, -1), atol=1e-2)  # positions count
    torch.testing.assert_close(rotate(q, torch.zeros(T)), q)  # position 0: no turn
    torch.testing.assert_close(rotate(q, positions).norm(dim=-1), q.norm(dim=-1))  # a rotation


@pytest.mark.parametrize("qk_norm", [False, True], ids=["rope", "rope+qk_norm"])
def test_rope_self_attention_is_unchanged_when_every_position_moves_by_k(qk_norm):
    """Queries and keys at positions 6 .. 6 + T - 1 (the cache holding 6 hidden ones first)
    attend as at 0 .. T - 1: weights and outputs. With qk_norm too, whose per-channel scales
    would break this if they came after the rotation."""
    attn, x, k = with_options(rope=True, qk_norm=qk_norm), torch.randn(B, T, D), 6
    alone, weights = with_weights(attn, x, causal=True)
    cache = KVCache()
    attn(torch.randn(B, k, D), causal=True, cache=cache)
    hidden = torch.arange(k + T) >= k  # (S,) the first k keys may not be attended to
    moved, moved_weights = with_weights(attn, x, causal=True, mask=hidden, cache=cache)
    torch.testing.assert_close(moved_weights[..., k:], weights, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(moved, alone, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("options", OPTIONS.values(), ids=OPTIONS)
def test_the_options_keep_sdpa_equal_to_the_written_out_path(options):
    x, memory = torch.randn(B, T, D), torch.randn(B, S, D)
    cross = with_options(CROSS, qk_norm=options.get("qk_norm", False))  # never rotated
    for attn, kwargs in [(with_options(**options), dict(mask=padding_mask(torch.full((B, T), 5)))),
                         (with_options(DECODER_SELF, **options), dict(causal=True)),
                         (cross, dict(context=memory, mask=padding_mask(SRC)))]:
        fused = attn(x, **kwargs)
        written_out, weights = with_weights(attn, x, **kwargs)
        torch.testing.assert_close(fused, written_out, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(weights.sum(-1), torch.ones(B, H, T))


@pytest.mark.parametrize("options", OPTIONS.values(), ids=OPTIONS)
def test_incremental_self_attention_with_the_options_equals_full(options):
    """Each new key is normalised and rotated at its own position, the cache's length."""
    attn, x = with_options(DECODER_SELF, **options), torch.randn(B, T, D)
    full = attn(x, causal=True)
    cache = KVCache()
    steps = [attn(x[:, t: t + 1], causal=True, cache=cache) for t in range(T)]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=1e-5)
    assert cache.length == T
    cache = KVCache()
    first = attn(x[:, :2], causal=True, cache=cache)
    rest = attn(x[:, 2:], causal=True, cache=cache)
    torch.testing.assert_close(torch.cat([first, rest], dim=1), full, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("role", [DECODER_SELF, CROSS])
@pytest.mark.parametrize("rope", [False, True], ids=["qk_norm", "qk_norm+rope"])
def test_with_qk_norm_scaling_the_query_or_key_projection_leaves_the_weights(role, rope):
    torch.manual_seed(0)
    attn = with_options(role, rope=rope and role != CROSS, qk_norm=True)
    plain = MultiHeadAttention(D, H, role=role).eval()
    x, memory = torch.randn(B, T, D), torch.randn(B, S, D)
    kwargs = dict(causal=True) if role == DECODER_SELF else dict(context=memory)
    weights, plain_weights = (with_weights(m, x, **kwargs)[1] for m in (attn, plain))
    for proj, c in (("q_proj", 8.0), ("k_proj", 0.3)):
        for module in (attn, plain):
            with torch.no_grad():
                getattr(module, proj).weight.mul_(c)
                getattr(module, proj).bias.mul_(c)
        # equal up to the norm's epsilon and float rounding; without the norm, far apart
        torch.testing.assert_close(with_weights(attn, x, **kwargs)[1], weights,
                                   atol=2e-4, rtol=1e-3)
    assert not torch.allclose(with_weights(plain, x, **kwargs)[1], plain_weights, atol=1e-2)


def test_a_width_query_norm_normalises_all_heads_at_once_and_keeps_sdpa_exact():
    """cross_query_norm width: with the scales at 1, each position's query has RMS 1 over all
    D channels, while one head's slice does not; a small head stays small. Keys stay per head.
    The fused and written-out paths agree, and a cache changes nothing."""
    torch.manual_seed(0)
    attn = MultiHeadAttention(D, H, role=CROSS, qk_norm=True, query_norm="width").eval()
    assert attn.q_norm.weight.shape == (D,) and attn.k_norm.weight.shape == (D // H,)
    x, memory = torch.randn(B, T, D), torch.randn(B, S, D)
    with torch.no_grad():
        attn.q_proj.weight[: D // H] *= 0.01  # head 0's queries made small
        attn.q_proj.bias[: D // H] *= 0.01
        q = attn.queries(attn.q_proj(x), 0)  # (B, H, T, Dh)
    whole = q.transpose(1, 2).reshape(B, T, D)
    torch.testing.assert_close(whole.pow(2).mean(-1), torch.ones(B, T), atol=1e-4, rtol=0)
    per_head = q.pow(2).mean(-1)  # (B, H, T)
    assert per_head[:, 0].max() < 0.01 < per_head[:, 1:].min()
    per_head_attn = MultiHeadAttention(D, H, role=CROSS, qk_norm=True).eval()
    per_head_attn.load_state_dict({**attn.state_dict(),
                                   "q_norm.weight": torch.ones(D // H)})
    with torch.no_grad():
        head_q = per_head_attn.queries(per_head_attn.q_proj(x), 0)
    # each head to 1 (head 0's small queries too, but for the epsilon's share)
    torch.testing.assert_close(head_q.pow(2).mean(-1), torch.ones(B, H, T), atol=0.1, rtol=0)
    mask = padding_mask(SRC)
    fused = attn(x, context=memory, mask=mask)
    written_out, weights = with_weights(attn, x, context=memory, mask=mask)
    torch.testing.assert_close(fused, written_out, atol=1e-5, rtol=1e-5)
    cache = KVCache()
    steps = [attn(x[:, t: t + 1], context=memory, mask=mask, cache=cache) for t in range(T)]
    torch.testing.assert_close(torch.cat(steps, dim=1), fused, atol=1e-5, rtol=1e-5)


def test_a_width_query_norm_is_for_cross_attention_with_qk_norm():
    with pytest.raises(ValueError, match="normalises cross-attention's queries"):
        MultiHeadAttention(D, H, role=DECODER_SELF, qk_norm=True, query_norm="width")
    with pytest.raises(ValueError, match="normalises cross-attention's queries"):
        MultiHeadAttention(D, H, role=CROSS, query_norm="width")
    with pytest.raises(ValueError, match="query_norm is one of"):
        MultiHeadAttention(D, H, role=CROSS, qk_norm=True, query_norm="model")


def test_rope_is_refused_in_cross_attention_and_for_an_odd_head_width():
    with pytest.raises(ValueError, match="rope rotates self-attention only"):
        MultiHeadAttention(D, H, role=CROSS, rope=True)
    with pytest.raises(ValueError, match=r"d_model / heads \(36 / 4 = 9\) must be even"):
        MultiHeadAttention(36, 4, rope=True)


# The tour's stop on heads, a check of its claim, run on the module and on a copy broken on purpose.

def assert_h_heads_are_h_single_heads_side_by_side(attn: MultiHeadAttention):
    """H heads are H one-head attentions, head h with rows h*Dh .. (h+1)*Dh of the Q, K
    and V projections, their outputs side by side through one more projection."""
    x, memory = torch.randn(B, T, D), torch.randn(B, S, D)
    Dh = D // H
    outputs = []
    for h in range(H):
        rows = slice(h * Dh, (h + 1) * Dh)
        head = MultiHeadAttention(Dh, 1, bias=attn.q_proj.bias is not None).eval()
        for proj in ("q_proj", "k_proj", "v_proj"):
            mine, whole = getattr(head, proj), getattr(attn, proj)
            mine.in_features = D
            mine.weight = nn.Parameter(whole.weight[rows])  # (Dh, D): head h's slice
            mine.bias = None if whole.bias is None else nn.Parameter(whole.bias[rows])
        head.out_proj = nn.Identity()
        outputs.append(head(x, context=memory, mask=padding_mask(SRC)))  # (B, T, Dh)
    expected = attn.out_proj(torch.cat(outputs, dim=-1))  # (B, T, D)
    torch.testing.assert_close(attn(x, context=memory, mask=padding_mask(SRC)), expected,
                               atol=1e-5, rtol=1e-5, msg="H heads differ from H single heads")


def test_h_heads_are_h_single_heads_side_by_side():
    assert_h_heads_are_h_single_heads_side_by_side(make())


def test_the_check_fails_on_heads_that_take_interleaved_channels(monkeypatch):
    """Break the claim on purpose: a split that deals channels out in turn (channel c to head
    c mod H) is no longer H single heads on contiguous slices."""
    def interleaved(self, t):
        B_, L, _ = t.shape
        return t.view(B_, L, self.head_dim, self.heads).permute(0, 3, 1, 2)  # (B, H, L, Dh)

    monkeypatch.setattr(MultiHeadAttention, "split_heads", interleaved)
    with pytest.raises(AssertionError, match="single heads"):
        assert_h_heads_are_h_single_heads_side_by_side(make())
