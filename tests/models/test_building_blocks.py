"""The Transformer's building blocks do what the tour says they do: heads split and merge
without loss, dropout touches attention only in training, the feed-forward network treats
every position alike, a pre-norm block's residual path is clean (the identity for the stream
and for its gradient), and without positions the encoder cannot tell word order; the options
beside the classic layers (RMSNorm, ReLU², SwiGLU) have their defining properties."""

from dataclasses import replace

import pytest
import torch

from translate.models import TransformerConfig, build_model
from translate.models.attention import MultiHeadAttention
from translate.models.transformer import (EncoderLayer, FeedForward, make_norm, relu_squared,
                                          sinusoidal_positions)

D, H = 32, 4
CFG = TransformerConfig(d_model=D, heads=H, ffn_dim=64, encoder_layers=2, decoder_layers=2,
                        dropout=0.0)


def test_split_and_merge_are_inverse_and_each_head_gets_its_own_slice():
    attn = MultiHeadAttention(D, H)
    x = torch.randn(2, 5, D)
    heads = attn.split_heads(x)  # (B, H, L, Dh)
    assert heads.shape == (2, H, 5, D // H)
    torch.testing.assert_close(heads[:, 1], x[..., D // H: 2 * D // H])  # head 2: channels 8-15
    assert torch.equal(attn.merge_heads(heads), x)


def test_dropout_drops_attention_weights_in_training_only():
    torch.manual_seed(0)
    attn = MultiHeadAttention(D, H, dropout=0.5)
    x = torch.randn(2, 6, D)
    attn.eval()
    assert torch.equal(attn(x), attn(x))  # no randomness when translating
    attn.train()
    torch.manual_seed(1)
    first = attn(x)
    torch.manual_seed(2)
    assert not torch.allclose(first, attn(x))  # each training step drops other weights


def test_the_feed_forward_network_treats_every_position_alike():
    """Computation after communication: the same network at each position, no mixing."""
    torch.manual_seed(0)
    ffn, x = FeedForward(CFG).eval(), torch.randn(2, 7, D)
    order = torch.randperm(7)
    torch.testing.assert_close(ffn(x[:, order]), ffn(x)[:, order])
    torch.testing.assert_close(ffn(x[:, 3:4]), ffn(x)[:, 3:4])  # a position alone: the same


def test_a_pre_norm_block_whose_sublayers_add_nothing_passes_its_input_unchanged():
    """x + sublayer(norm(x)): with the sublayers' output projections at zero, the residual path
    carries x through untouched (no norm on it, unlike post-norm's norm(x + sublayer(x)))."""
    torch.manual_seed(0)
    layer = EncoderLayer(CFG, 0).eval()
    for linear in (layer.self_attn.out_proj, layer.ffn.fc2):
        torch.nn.init.zeros_(linear.weight)
        torch.nn.init.zeros_(linear.bias)
    x = torch.randn(2, 5, D) * 7 + 3
    mask = torch.ones(2, 1, 1, 5, dtype=torch.bool)
    assert torch.equal(layer(x, mask), x)


def assert_the_residual_path_is_the_identity_for_the_gradient(layers):
    """Through `layers` whose sublayers add nothing (their output projections zeroed), the
    Jacobian d(output)/d(input) is exactly the identity: the gradient reaches the first layer
    as it left the last. (With sublayers that add something, each block's is the identity plus
    their terms, I + d sublayer(norm(x))/dx.)"""
    for layer in layers:
        for linear in (layer.self_attn.out_proj, layer.ffn.fc2):
            torch.nn.init.zeros_(linear.weight)
            torch.nn.init.zeros_(linear.bias)
    x = torch.randn(1, 3, D) * 7 + 3  # (B, S, D): a stream far from unit scale
    mask = torch.ones(1, 1, 1, 3, dtype=torch.bool)

    def stack(x):
        for layer in layers:
            x = layer(x, mask)
        return x

    jacobian = torch.autograd.functional.jacobian(stack, x).reshape(3 * D, 3 * D)
    assert torch.equal(jacobian, torch.eye(3 * D)), "the residual path changes the gradient"


def test_the_residual_path_passes_the_gradient_unchanged():
    torch.manual_seed(0)
    layers = build_model(CFG, 50, 50, shared_vocab=True).encoder_layers.eval()
    assert_the_residual_path_is_the_identity_for_the_gradient(layers)


def test_the_check_fails_on_post_norm_blocks(monkeypatch):
    """Break the claim on purpose: post-norm blocks, x = norm(x + sublayer(x)) as in 2017,
    normalise the stream itself, so even with sublayers that add nothing the gradient goes
    through every norm's Jacobian, and the check fails."""
    def post_norm_forward(self, x, src_mask):
        x = self.norm1(x + self.dropout(self.self_attn(x, mask=src_mask)))
        return self.norm2(x + self.dropout(self.ffn(x)))

    monkeypatch.setattr(EncoderLayer, "forward", post_norm_forward)
    torch.manual_seed(0)
    layers = build_model(CFG, 50, 50, shared_vocab=True).encoder_layers.eval()
    with pytest.raises(AssertionError, match="changes the gradient"):
        assert_the_residual_path_is_the_identity_for_the_gradient(layers)


def test_without_positions_the_encoder_cannot_tell_word_order():
    torch.manual_seed(0)
    model = build_model(CFG, 50, 50, shared_vocab=True).eval()
    src = torch.randint(4, 50, (1, 6), generator=torch.Generator().manual_seed(3))
    order = torch.tensor([3, 0, 5, 1, 4, 2])
    with torch.no_grad():
        shuffled = model.encode(src[:, order]).states
        assert not torch.allclose(shuffled, model.encode(src).states[:, order], atol=1e-4)
        model.src_embed.table.zero_()  # no positions: attention sees a bag of words
        torch.testing.assert_close(model.encode(src[:, order]).states,
                                   model.encode(src).states[:, order], atol=1e-5, rtol=1e-5)


def test_sinusoidal_positions_are_sines_and_cosines_of_falling_frequency():
    table = sinusoidal_positions(50, D)  # (L, D)
    torch.testing.assert_close(table[:, 0], torch.sin(torch.arange(50.0)))
    torch.testing.assert_close(table[:, 1], torch.cos(torch.arange(50.0)))
    slowest = torch.sin(torch.arange(50.0) * 10000 ** (-(D - 2) / D))
    torch.testing.assert_close(table[:, D - 2], slowest)


def test_rmsnorm_divides_by_the_root_mean_square_and_keeps_the_mean():
    """RMSNorm's output is the same for x and c * x (c > 0), as LayerNorm's is; unlike
    LayerNorm it subtracts no mean, so adding a constant to every channel changes it."""
    rms, layer = (make_norm(replace(CFG, norm=norm)) for norm in ("rmsnorm", "layernorm"))
    assert isinstance(rms, torch.nn.RMSNorm) and isinstance(layer, torch.nn.LayerNorm)
    assert [name for name, _ in rms.named_parameters()] == ["weight"]  # a scale, no shift
    torch.manual_seed(0)
    torch.nn.init.normal_(rms.weight)
    x = torch.randn(2, 5, D)
    # the same to its epsilon (1e-5 beside a mean square near 1)
    torch.testing.assert_close(rms(x * 37.5), rms(x), atol=1e-4, rtol=1e-4)
    root_mean_square = (x.square().mean(-1, keepdim=True) + rms.eps).sqrt()  # (2, 5, 1)
    torch.testing.assert_close(rms(x), x / root_mean_square * rms.weight)
    shifted = x + 3.0
    torch.testing.assert_close(layer(shifted), layer(x), atol=1e-5, rtol=1e-5)  # mean removed
    assert not torch.allclose(rms(shifted), rms(x), atol=0.1)  # kept


def test_relu2_is_relu_squared():
    torch.manual_seed(0)
    x = torch.randn(3, 7, D) * 3
    assert torch.equal(relu_squared(x), torch.relu(x) ** 2)
    ffn = FeedForward(replace(CFG, activation="relu2")).eval()
    assert ffn.fc3 is None
    torch.testing.assert_close(ffn(x), ffn.fc2(torch.relu(ffn.fc1(x)) ** 2))


def test_swiglu_gates_a_second_projection_and_a_closed_gate_passes_nothing():
    """W2(SiLU(W1 x) * W3 x): with W1 x zero (the gate closed, SiLU(0) = 0) the network adds
    only fc2's bias, whatever x and W3."""
    torch.manual_seed(0)
    ffn = FeedForward(replace(CFG, activation="swiglu")).eval()
    x = torch.randn(3, 7, D) * 3
    expected = ffn.fc2(torch.nn.functional.silu(ffn.fc1(x)) * ffn.fc3(x))
    torch.testing.assert_close(ffn(x), expected)
    torch.nn.init.zeros_(ffn.fc1.weight)
    torch.nn.init.zeros_(ffn.fc1.bias)
    torch.testing.assert_close(ffn(x), ffn.fc2.bias.expand_as(x), atol=0, rtol=0)


@pytest.mark.parametrize("d_model, ffn_dim", [(256, 1024), (512, 2048), (1024, 4096)])
def test_the_gated_network_has_the_plain_ones_parameters_within_one_percent(d_model, ffn_dim):
    """At the recipes' sizes (Multi30k, WMT14 base and big) an ffn_dim buys SwiGLU's three
    matrices of about 2/3 the width as many parameters as the plain two."""
    cfg = replace(CFG, d_model=d_model, ffn_dim=ffn_dim)
    with torch.device("meta"):  # shapes only
        plain, gated = FeedForward(cfg), FeedForward(replace(cfg, activation="swiglu"))
    count = [sum(p.numel() for p in ffn.parameters()) for ffn in (plain, gated)]
    assert gated.fc1.out_features % 8 == 0 and gated.fc3.out_features == gated.fc1.out_features
    assert abs(count[1] - count[0]) <= 0.01 * count[0], count
