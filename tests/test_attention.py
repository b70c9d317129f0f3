import pytest
import torch
import torch.nn.functional as F
from torch import nn

from translate.models.attention import (AdditiveAttention, MultiHeadAttention, causal_mask,
                                       padding_mask)

torch.manual_seed(0)
B, T, S, D, H = 3, 5, 7, 32, 4


def make(fused=True, bias=True) -> MultiHeadAttention:
    return MultiHeadAttention(D, H, dropout=0.0, bias=bias, fused_qkv=fused).eval()


@pytest.mark.parametrize("fused", [True, False])
def test_sdpa_path_equals_explicit_path(fused):
    attn = make(fused)
    x, memory = torch.randn(B, T, D), torch.randn(B, S, D)
    mask = padding_mask(torch.tensor([[5] * S, [5] * 4 + [0] * 3, [5] * 2 + [0] * 5]))
    for kwargs in [dict(), dict(causal=True), dict(context=memory, mask=mask)]:
        fast, none = attn(x, **kwargs)
        slow, weights = attn(x, need_weights=True, **kwargs)
        assert none is None
        torch.testing.assert_close(fast, slow, atol=1e-5, rtol=1e-5)
        assert torch.allclose(weights.sum(-1), torch.ones(()))


def test_matches_torch_multihead_attention_with_copied_weights():
    ours = make(fused=True)
    ref = nn.MultiheadAttention(D, H, batch_first=True).eval()
    with torch.no_grad():
        ref.in_proj_weight.copy_(ours.qkv_proj.weight)
        ref.in_proj_bias.copy_(ours.qkv_proj.bias)
        ref.out_proj.weight.copy_(ours.out_proj.weight)
        ref.out_proj.bias.copy_(ours.out_proj.bias)
    x, memory = torch.randn(B, T, D), torch.randn(B, S, D)
    src = torch.tensor([[5] * S, [5] * 4 + [0] * 3, [5] * 2 + [0] * 5])
    out, _ = ours(x, context=memory, mask=padding_mask(src))
    expected, _ = ref(x, memory, memory, key_padding_mask=src == 0)
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)
    out, _ = ours(x, causal=True)
    expected, _ = ref(x, x, x, attn_mask=~causal_mask(T), need_weights=False)
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)


def test_fused_and_separate_projections_agree():
    fused, separate = make(True), make(False)
    with torch.no_grad():
        q, k, v = fused.qkv_proj.weight.split(D)
        qb, kb, vb = fused.qkv_proj.bias.split(D)
        for lin, w, b in [(separate.q_proj, q, qb), (separate.k_proj, k, kb), (separate.v_proj, v, vb)]:
            lin.weight.copy_(w)
            lin.bias.copy_(b)
        separate.out_proj.load_state_dict(fused.out_proj.state_dict())
    x, memory = torch.randn(B, T, D), torch.randn(B, S, D)
    torch.testing.assert_close(fused(x, context=memory)[0], separate(x, context=memory)[0])


def test_padding_gets_zero_weight_and_no_nan():
    attn = make()
    src = torch.tensor([[5, 5, 5, 0, 0, 0, 0]] * B)
    out, weights = attn(torch.randn(B, T, D), context=torch.randn(B, S, D),
                        mask=padding_mask(src), need_weights=True)
    assert not torch.isnan(out).any()
    assert torch.all(weights[..., 3:] == 0)


def test_causal_weights_are_lower_triangular():
    _, weights = make()(torch.randn(B, T, D), causal=True, need_weights=True)
    assert torch.all(weights.triu(diagonal=1) == 0)


def test_incremental_self_attention_equals_full():
    attn = make()
    x = torch.randn(B, T, D)
    full, _ = attn(x, causal=True)
    cache: dict = {}
    steps = [attn(x[:, t: t + 1], causal=True, cache=cache)[0] for t in range(T)]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=1e-5)
    # several new positions at once (prefix in the cache) use an offset causal mask
    cache = {}
    first, _ = attn(x[:, :2], causal=True, cache=cache)
    rest, _ = attn(x[:, 2:], causal=True, cache=cache)
    torch.testing.assert_close(torch.cat([first, rest], dim=1), full, atol=1e-5, rtol=1e-5)


def test_heads_must_divide_width():
    with pytest.raises(ValueError, match=r"d_model \(30\) must be divisible by heads \(4\)"):
        MultiHeadAttention(30, 4)


@pytest.mark.parametrize("T", [1, 3])
def test_beams_sharing_a_memory_row_equal_a_copied_memory(T):
    """Cross-attention with a memory row per sentence, queries in runs of `beam` rows per sentence,
    gives what copying the memory once per beam gives: outputs and weights."""
    torch.manual_seed(0)
    attn = MultiHeadAttention(16, 4).eval()
    beam, memory = 3, torch.randn(2, 5, 16)  # 2 sentences
    mask = padding_mask(torch.tensor([[5, 6, 7, 0, 0], [5, 6, 7, 8, 9]]))  # (2, 1, 1, 5)
    x = torch.randn(2 * beam, T, 16)
    copied = torch.arange(2).repeat_interleave(beam)  # (6,) each row's sentence
    out, weights = attn(x, context=memory, mask=mask, need_weights=True)
    ref, ref_weights = attn(x, context=memory[copied], mask=mask[copied], need_weights=True)
    torch.testing.assert_close(out, ref)
    torch.testing.assert_close(weights, ref_weights)
    assert weights[:beam, :, :, 3:].abs().max() == 0  # the first sentence's padding
    cached = attn(x, context=memory, mask=mask, cache={})[0]  # the fast path, no weights
    torch.testing.assert_close(cached, ref)


def test_additive_attention_beams_share_a_memory_row():
    torch.manual_seed(0)
    attn = AdditiveAttention(8, 6, 10)
    beam, values = 4, torch.randn(2, 5, 6)
    mask = torch.tensor([[True] * 3 + [False] * 2, [True] * 5])
    query = torch.randn(2 * beam, 8)
    copied = torch.arange(2).repeat_interleave(beam)
    context, weights = attn(query, attn.project_keys(values), values, mask)
    ref, ref_weights = attn(query, attn.project_keys(values[copied]), values[copied], mask[copied])
    torch.testing.assert_close(context, ref)
    torch.testing.assert_close(weights, ref_weights)
    torch.testing.assert_close(weights.sum(-1), torch.ones(2 * beam))


@pytest.mark.parametrize("queries", [1, 5])
def test_explicit_path_matches_the_fused_kernel_and_serves_decoding_steps(queries):
    """Under no_grad on the CPU a sentence's beams (2-32 queries), or one query against many
    keys, use explicit matmuls."""
    from translate.models.attention import explicit_attention, explicit_is_faster, sdpa

    q, k, v = torch.randn(B, H, queries, 8), torch.randn(B, H, S, 8), torch.randn(B, H, S, 8)
    mask = padding_mask(torch.tensor([[5] * S, [5] * 4 + [0] * 3, [5] * 2 + [0] * 5]))
    with torch.no_grad():
        assert explicit_is_faster(q, k) == (queries > 1)
        assert explicit_is_faster(q, torch.randn(B, H, 4096 // (B * H) + 1, 8))  # many keys
        assert not explicit_is_faster(torch.randn(B, H, 33, 8), k)
        out, weights = explicit_attention(q, k, v, mask)
        torch.testing.assert_close(out, sdpa(q, k, v, mask, 0.0, False), atol=1e-5, rtol=1e-5)
        unmasked, _ = explicit_attention(q, k, v, None)
        torch.testing.assert_close(unmasked, sdpa(q, k, v, None, 0.0, False), atol=1e-5, rtol=1e-5)
    assert not explicit_is_faster(q, k)  # autograd on: training keeps the fused kernel
    assert (weights[1, ..., 4:] == 0).all() and (weights[2, ..., 2:] == 0).all()
    torch.testing.assert_close(weights.sum(-1), torch.ones(B, H, queries))


def test_onednn_linear_follows_weight_changes_and_copies():
    """The packed weight is remade when the weight changes; copies and training use plain math."""
    import copy

    from translate.models.linear import Linear

    layer, x = Linear(16, 24), torch.randn(3, 5, 16)
    with torch.no_grad():
        torch.testing.assert_close(layer(x), x @ layer.weight.T + layer.bias)
        layer.weight.mul_(-2.0)  # in place, as optimizers, EMA and load_state_dict write
        torch.testing.assert_close(layer(x), x @ layer.weight.T + layer.bias)
        twin = copy.deepcopy(layer)
        twin.weight.add_(1.0)
        torch.testing.assert_close(twin(x), x @ twin.weight.T + twin.bias)
        torch.testing.assert_close(layer(x), x @ layer.weight.T + layer.bias)
        q, kv = layer.rows(x, slice(0, 8)), layer.rows(x, slice(8, 24))  # packed separately
        torch.testing.assert_close(torch.cat([q, kv], -1), layer(x))
        layer.weight[:8].zero_()
        torch.testing.assert_close(layer.rows(x, slice(0, 8)), layer.bias[:8].expand(3, 5, 8))
    out = layer(x)  # autograd on: F.linear, gradients flow
    out.sum().backward()
    assert layer.weight.grad is not None and out.requires_grad


@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_activation_fused_into_the_matmul_equals_applying_it_after(activation):
    from translate.models.linear import Linear

    layer, x = Linear(16, 24), torch.randn(3, 5, 16)
    plain = getattr(F, activation)(x @ layer.weight.T + layer.bias)
    with torch.no_grad():  # oneDNN applies it as it writes the output
        torch.testing.assert_close(layer(x, activation), plain, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(layer(x, activation), plain)  # autograd on: applied after
