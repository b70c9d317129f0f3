"""The Transformer's building blocks do what the tour says they do: heads split and merge
without loss, dropout touches attention only in training, the feed-forward network treats
every position alike, a pre-norm block's residual path is clean, and without positions the
encoder cannot tell word order."""

import torch

from translate.models import TransformerConfig, build_model
from translate.models.attention import MultiHeadAttention
from translate.models.transformer import EncoderLayer, FeedForward, sinusoidal_positions

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
    assert torch.equal(attn(x)[0], attn(x)[0])  # no randomness when translating
    attn.train()
    torch.manual_seed(1)
    first = attn(x)[0]
    torch.manual_seed(2)
    assert not torch.allclose(first, attn(x)[0])  # each training step drops other weights


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
