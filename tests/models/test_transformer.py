import json
import warnings
from dataclasses import replace

import pytest
import torch

from helpers.models import with_weights
from helpers.training import take_steps, tiny_trainer
from translate.alignment import record_attention
from translate.engine import write_out_attention
from translate.models import TransformerConfig, build_model, count_parameters
from translate.models.transformer import Memory
from translate.search import greedy_search
from translate.tokens import PAD

V = 50


# the model options beside the classic ones, each model test run with each
OPTIONS = {"classic": {}, "rmsnorm-swiglu": {"norm": "rmsnorm", "activation": "swiglu"},
           "relu2": {"activation": "relu2"}, "rope": {"positions": "rope"},
           "qk_norm": {"qk_norm": True},
           "modern": {"norm": "rmsnorm", "activation": "swiglu", "positions": "rope",
                      "qk_norm": True},
           "width-query-norm": {"positions": "rope", "qk_norm": True,
                                "cross_query_norm": "width"}}


@pytest.fixture(params=OPTIONS.values(), ids=OPTIONS)
def model(request):
    torch.manual_seed(0)
    cfg = TransformerConfig(d_model=32, heads=4, ffn_dim=64, encoder_layers=2, decoder_layers=2,
                            dropout=0.0, **request.param)
    return build_model(cfg, V, V, shared_vocab=True).eval()


def batch(B=2, S=6, T=5, seed=1):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(4, V, (B, S), generator=g), torch.randint(4, V, (B, T), generator=g)


def test_changing_future_target_tokens_leaves_earlier_outputs_unchanged(model):
    src, tgt = batch()
    out = model(src, tgt)
    for t in range(tgt.size(1) - 1):
        changed = tgt.clone()
        changed[:, t + 1:] = torch.randint(4, V, changed[:, t + 1:].shape)
        torch.testing.assert_close(model(src, changed)[:, : t + 1], out[:, : t + 1])
        assert not torch.allclose(model(src, changed)[:, t + 1:], out[:, t + 1:])


def test_padding_leaves_real_positions_unchanged(model):
    src, tgt = batch()
    out = model(src, tgt)
    padded_src = torch.cat([src, torch.full((2, 4), PAD)], dim=1)
    padded_tgt = torch.cat([tgt, torch.full((2, 3), PAD)], dim=1)
    torch.testing.assert_close(model(padded_src, padded_tgt)[:, : tgt.size(1)], out,
                               atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("knob", ["dropout", "attn_dropout"])
def test_each_dropout_is_off_when_translating_and_on_in_training(knob):
    """The whole model's forward, through PyTorch's fused attention and the written-out path:
    with `dropout` (the embeddings' and the sublayers' outputs) or `attn_dropout` (the
    attention weights) at 0.3, eval computes exactly what the same weights without dropout
    compute, and training draws other units to drop at every call."""
    torch.manual_seed(0)
    cfg = TransformerConfig(d_model=32, heads=4, ffn_dim=64, encoder_layers=2, decoder_layers=2,
                            dropout=0.0)
    plain = build_model(cfg, V, V, shared_vocab=True).eval()
    dropping = build_model(replace(cfg, **{knob: 0.3}), V, V, shared_vocab=True)
    dropping.load_state_dict(plain.state_dict())
    src, tgt = batch()
    for path in ("fused", "written out"):
        if path == "written out":  # the textbook engine's attention, in place
            write_out_attention(plain)
            write_out_attention(dropping)
        expected = plain(src, tgt)
        assert torch.equal(dropping.eval()(src, tgt), expected), f"{path}: eval drops units"
        dropping.train()
        torch.manual_seed(1)
        first = dropping(src, tgt)
        torch.manual_seed(2)
        second = dropping(src, tgt)
        assert not torch.allclose(first, expected), f"{path}: training drops nothing"
        assert not torch.allclose(first, second), f"{path}: every call drops the same units"


def test_incremental_decoding_equals_full_recomputation(model):
    src, tgt = batch()
    full = model(src, tgt)
    state = model.init_state(model.encode(src))
    steps = []
    for t in range(tgt.size(1)):
        logits, state = model.decode(tgt[:, t: t + 1], state)
        steps.append(logits)
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=1e-5)
    assert state.offset == tgt.size(1)


def test_greedy_with_cache_equals_greedy_without(model):
    src, _ = batch(B=4, S=8)
    src[1, 5:] = PAD
    assert greedy_search(model, src, 12, use_cache=True) == greedy_search(model, src, 12, use_cache=False)


def test_training_and_decoding_run_under_bf16_autocast(model):
    """Mixed precision (a GPU's, here the CPU's autocast): Q, K and V reach attention in one
    dtype with every option, SDPA's and the written-out path alike, with no warning."""
    src, tgt = batch()
    with warnings.catch_warnings(), torch.autocast("cpu", dtype=torch.bfloat16):
        warnings.simplefilter("error")
        model.train()
        model(src, tgt).float().sum().backward()
        model.eval()
        with torch.no_grad():
            assert len(greedy_search(model, src, 6)) == 2
            layer = model.decoder_layers[0]
            y = torch.randn(2, 5, 32)
            _, weights = with_weights(layer.self_attn, y, causal=True)
    assert weights.dtype == torch.bfloat16 and all(p.grad is not None
                                                   for p in model.parameters())


def test_tied_embeddings_share_one_matrix(model):
    assert model.src_embed.tokens.weight is model.tgt_embed.tokens.weight
    assert model.output.weight is model.tgt_embed.tokens.weight
    untied = build_model(TransformerConfig(d_model=32, heads=4, tie_embeddings=False), V, V, True)
    assert count_parameters(untied) - count_parameters(model) > 0


def test_a_state_becomes_a_word_through_the_final_norm_and_the_embedding_matrix(model):
    """The tour's stop on states to words: logits are the decoder's final-normed states times
    the target embedding matrix (tied), no bias; their softmax over the vocabulary is the
    distribution the loss and the search read; and the embedding scales what it reads by
    sqrt(D)."""
    src, tgt = batch()
    states, _ = model.decoder_states(tgt, model.init_state(model.encode(src)))  # (B, T, D)
    layers = model.init_state(model.encode(src))
    y = model.tgt_embed(tgt)
    for layer, self_cache, cross_cache in zip(model.decoder_layers, layers.self_attn,
                                              layers.cross_attn):
        y = layer(y, layers.memory, self_cache, cross_cache)
    torch.testing.assert_close(states, model.decoder_norm(y))  # the final norm, last
    logits = states @ model.tgt_embed.tokens.weight.T  # (B, T, V): a score per piece
    torch.testing.assert_close(model(src, tgt), logits)
    assert model.output.bias is None
    torch.testing.assert_close(logits.softmax(-1).sum(-1), torch.ones(tgt.shape))
    ids = torch.tensor([[7]])
    read = model.tgt_embed.tokens.weight[7] * 32 ** 0.5
    table = model.tgt_embed.position_table()
    expected = read if table is None else read + table[0]
    torch.testing.assert_close(model.tgt_embed(ids)[0, 0], expected)


def test_learned_positions_and_gelu_build_and_run():
    cfg = TransformerConfig(d_model=32, heads=2, ffn_dim=64, encoder_layers=1, decoder_layers=1,
                            positions="learned", activation="gelu", qkv_bias=False)
    m = build_model(cfg, V, V + 10, shared_vocab=False)
    src, tgt = batch()
    assert m(src, tgt).shape == (2, 5, V + 10)


def test_unknown_activation_or_norm_is_a_clear_error():
    with pytest.raises(ValueError, match="model.activation must be one of"):
        build_model(TransformerConfig(d_model=32, heads=2, activation="swish"), V, V, True)
    with pytest.raises(ValueError, match="model.norm must be one of"):
        build_model(TransformerConfig(d_model=32, heads=2, norm="batchnorm"), V, V, True)


def test_every_norm_is_the_configured_one(model):
    """Every block's and the final norms; attention's own norms of queries and keys (qk_norm)
    are RMSNorms whatever the blocks use."""
    kind = {"layernorm": torch.nn.LayerNorm, "rmsnorm": torch.nn.RMSNorm}[model.cfg.norm]
    blocks = {name: m for name, m in model.named_modules()
              if isinstance(m, (torch.nn.LayerNorm, torch.nn.RMSNorm))
              and not name.endswith(("q_norm", "k_norm"))}
    assert len(blocks) == 2 * 2 + 2 * 3 + 2  # two per encoder layer, three per decoder layer, final
    assert all(isinstance(m, kind) for m in blocks.values())


@pytest.mark.parametrize("options", ["model.norm=rmsnorm", "model.activation=swiglu",
                                     "model.activation=relu2"])
def test_a_model_with_an_option_learns_real_data(options, recipe_path, small_data, tmp_path):
    """30 steps of the tiny recipe on the Multi30k sample: the loss falls as the classic
    model's does."""
    trainer = take_steps(tiny_trainer(recipe_path, small_data, tmp_path / "run", options,
                                      "train.eval_every=0", "train.save_every=0",
                                      "train.log_every=1"), 30)
    trainer.metrics.close()
    lines = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    losses = [r["loss"] for r in map(json.loads, lines) if r["kind"] == "train"]
    assert len(losses) == 30 and losses[0] > 6.5
    assert sum(losses[-5:]) / 5 < sum(losses[:5]) / 5 - 0.7, losses


def test_too_long_input_is_a_clear_error(model):
    src = torch.randint(4, V, (1, model.cfg.max_positions + 1))
    with pytest.raises(ValueError, match="exceeds max_positions"):
        model.encode(src)


def test_attention_modules_declare_their_role_and_layer(model):
    roles = {name: (m.role, m.layer) for name, m in model.named_modules() if hasattr(m, "role")}
    assert roles["encoder_layers.1.self_attn"] == ("encoder self-attention", 1)
    assert roles["decoder_layers.0.self_attn"] == ("decoder self-attention", 0)
    assert roles["decoder_layers.1.cross_attn"] == ("cross-attention", 1)


def test_old_fused_qkv_weights_load_as_three_projections(model):
    from translate.weights import upgrade_state_dict

    old = {}
    for key, value in model.state_dict().items():  # the layout older versions saved
        if ".q_proj." in key:
            parts = [model.state_dict()[key.replace(".q_proj.", f".{p}.")] for p in
                     ("q_proj", "k_proj", "v_proj")]
            old[key.replace(".q_proj.", ".qkv_proj.")] = torch.cat(parts)
        elif ".k_proj." not in key and ".v_proj." not in key:
            old[key] = value
    twin = build_model(model.cfg, V, V, shared_vocab=True).eval()
    twin.load_state_dict(upgrade_state_dict(old))
    src, tgt = batch()
    torch.testing.assert_close(twin(src, tgt), model(src, tgt))


def test_a_model_that_cannot_be_allocated_is_a_clear_error():
    from translate.models import ModelTooLarge, build_model

    with pytest.raises(ModelTooLarge, match="make it smaller"):  # refused by the estimate
        build_model(TransformerConfig(d_model=64, heads=4, ffn_dim=128), 10 ** 9, 10 ** 9, True)


@pytest.mark.parametrize("arch, overrides", [
    ("transformer", {}), ("transformer", {"tie_embeddings": False}),
    ("transformer", {"positions": "learned", "encoder_layers": 1, "ffn_dim": 48}),
    ("transformer", {"qkv_bias": False, "decoder_layers": 2, "activation": "gelu"}),
    ("transformer", {"norm": "rmsnorm", "activation": "relu2"}),
    ("transformer", {"activation": "swiglu", "ffn_dim": 100, "qkv_bias": False}),
    ("transformer", {"norm": "rmsnorm", "activation": "swiglu", "positions": "learned"}),
    ("transformer", {"positions": "rope", "qk_norm": True, "heads": 2}),
    ("transformer", {"qk_norm": True, "qkv_bias": False, "encoder_layers": 1}),
    ("rnn", {}), ("rnn", {"cell": "lstm", "encoder_layers": 2}),
    ("rnn", {"tie_embeddings": False, "attn_dim": 24, "encoder_layers": 3}),
])
@pytest.mark.parametrize("shared", [True, False])
def test_the_config_counts_the_built_models_parameters(arch, overrides, shared):
    from translate.models import MODELS

    small = ({"d_model": 32, "heads": 4, "ffn_dim": 64} if arch == "transformer" else
             {"embed_dim": 32, "encoder_hidden": 24, "decoder_hidden": 40, "attn_dim": 16})
    cfg = MODELS[arch].config(**{**small, **overrides})
    src_vocab, tgt_vocab = 70, 70 if shared else 50
    model = build_model(cfg, src_vocab, tgt_vocab, shared)
    assert cfg.parameter_count(src_vocab, tgt_vocab, shared) == \
        sum(p.numel() for p in model.parameters())


def test_a_model_too_large_for_memory_is_refused_before_allocating():
    from translate.models import ModelTooLarge

    cfg = TransformerConfig(d_model=60_000, heads=1, ffn_dim=128, encoder_layers=2,
                            decoder_layers=2)
    with pytest.raises(ModelTooLarge, match="has about .*G parameters, .* GiB of weights; this "
                                            "machine has .* GiB of memory"):
        build_model(cfg, 1000, 1000, True)


def test_with_rope_only_self_attention_places_the_tokens():
    """No position is added to the embeddings; cross-attention is not rotated, so it reads the
    memory as a set (its rows in any order give the same output); the decoder's self-attention
    is, so the target's order counts: its positions come from there."""
    torch.manual_seed(0)
    model = build_model(TransformerConfig(d_model=32, heads=4, ffn_dim=64, encoder_layers=2,
                                          decoder_layers=2, dropout=0.0, positions="rope"),
                        V, V, shared_vocab=True).eval()
    src, tgt = batch()
    assert model.src_embed.position_table() is None and model.tgt_embed.position_table() is None
    torch.testing.assert_close(model.tgt_embed(tgt), model.tgt_embed.tokens(tgt) * 32 ** 0.5)
    assert all(layer.self_attn.rope and not layer.cross_attn.rope
               for layer in model.decoder_layers)
    memory = model.encode(src)
    order = torch.randperm(src.size(1), generator=torch.Generator().manual_seed(2))
    shuffled = Memory(memory.states[:, order], memory.src_mask[..., order])
    logits, _ = model.decode(tgt, model.init_state(memory))
    torch.testing.assert_close(model.decode(tgt, model.init_state(shuffled))[0], logits,
                               atol=1e-5, rtol=1e-5)
    swapped = tgt[:, [1, 0, *range(2, tgt.size(1))]]  # the first two target tokens swapped
    last = model.decode(swapped, model.init_state(memory))[0][:, -1]
    assert not torch.allclose(last, logits[:, -1], atol=1e-4)  # the same tokens, elsewhere


@pytest.mark.parametrize("key, value", [("positions", "rope"), ("qk_norm", True)],
                         ids=["rope", "qk_norm"])
def test_a_model_with_the_option_learns_real_data(key, value, recipe_path, small_data, tmp_path):
    """25 steps of the tiny Transformer on real pairs (still warming up): the loss falls by
    over a nat from about ln(1000) at the start."""
    trainer = take_steps(tiny_trainer(recipe_path, small_data, tmp_path / "run",
                                      f"model.{key}={str(value).lower()}", "train.eval_every=0",
                                      "train.save_every=0", "train.log_every=1"), 25)
    trainer.metrics.close()
    lines = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    losses = [r["loss"] for r in map(json.loads, lines) if r["kind"] == "train"]
    assert getattr(trainer.updater.model.cfg, key) == value and len(losses) == 25
    assert losses[0] > 6.5 and sum(losses[-5:]) / 5 < losses[0] - 1.0, losses


# The tour's stops on the encoder and on cross-attention: each a check of its claim, run on
# the model and on a copy of the code broken on purpose (the claim must then fail: a check
# that cannot fail proves nothing).

def assert_every_source_position_sees_every_other(model):
    """The encoder's self-attention has no causal mask, only the padding mask: at every layer
    every query gives every real source key a weight above 0 and every padding key exactly 0;
    and changing the last real source token changes the encoder's output at every real
    position, the first included."""
    src, _ = batch(S=6)
    src[0, 4:] = PAD  # the first sentence 4 tokens long, padded to 6
    real = src != PAD  # (B, S)
    with record_attention(model) as maps:
        model.encode(src)
    for i in range(len(model.encoder_layers)):
        [weights] = maps[f"encoder_layers.{i}.self_attn"]  # (B, H, S, S): a row per query
        keys = real[:, None, None, :].expand_as(weights)  # (B, H, S, S): True on real keys
        assert torch.all(weights[keys] > 0), f"layer {i + 1}: real keys a query cannot reach"
        assert torch.all(weights[~keys] == 0), f"layer {i + 1}: padding keys with weight"
    rows, last = torch.arange(src.size(0)), real.sum(1) - 1  # (B,): the last real position
    changed = src.clone()
    changed[rows, last] = torch.where(src[rows, last] == 4, 5, 4)
    before, after = model.encode(src).states, model.encode(changed).states  # (B, S, D)
    moved = (after - before).abs().amax(dim=2)[real]  # how far each real position moved
    assert torch.all(moved > 1e-4), f"positions the last source token cannot reach: {moved}"


def assert_the_queries_come_from_the_target(model):
    """Cross-attention weighs S source positions for each of T target positions, and
    changing target token t moves the weights of positions t.. and no earlier ones."""
    src, tgt = batch(S=6, T=4)  # S != T: a row per target position, a column per source one
    with record_attention(model) as maps:
        model(src, tgt)
        changed = tgt.clone()
        changed[:, 2] = torch.where(tgt[:, 2] == 4, 5, 4)
        model(src, changed)
    before, after = maps["decoder_layers.0.cross_attn"]  # (B, H, T, S) each
    assert before.shape == (2, 4, 4, 6), f"cross-attention weights {tuple(before.shape)}"
    torch.testing.assert_close(after[:, :, :2], before[:, :, :2])
    assert not torch.allclose(after[:, :, 2:], before[:, :, 2:])


def test_every_source_position_sees_every_other(model):
    assert_every_source_position_sees_every_other(model)


def test_the_check_fails_on_an_encoder_made_causal(model, monkeypatch):
    """Break the claim on purpose: an encoder whose self-attention is causal fails the check."""
    from translate.models.transformer import EncoderLayer

    def causal_forward(self, x, src_mask):
        x = x + self.dropout(self.self_attn(self.norm1(x), mask=src_mask, causal=True))
        return x + self.dropout(self.ffn(self.norm2(x)))

    monkeypatch.setattr(EncoderLayer, "forward", causal_forward)
    with pytest.raises(AssertionError, match="cannot reach"):
        assert_every_source_position_sees_every_other(model)


def test_the_check_fails_on_an_encoder_that_attends_to_padding(model, monkeypatch):
    """Break the claim on purpose: an encoder whose self-attention drops the padding mask
    gives padding keys weight, and the check fails."""
    from translate.models.transformer import EncoderLayer

    def unmasked_forward(self, x, src_mask):
        x = x + self.dropout(self.self_attn(self.norm1(x)))
        return x + self.dropout(self.ffn(self.norm2(x)))

    monkeypatch.setattr(EncoderLayer, "forward", unmasked_forward)
    with pytest.raises(AssertionError, match="padding keys with weight"):
        assert_every_source_position_sees_every_other(model)


def test_the_queries_come_from_the_target(model):
    assert_the_queries_come_from_the_target(model)


def test_the_check_fails_on_queries_taken_from_the_source(model, monkeypatch):
    """Break the claim on purpose: cross-attention whose queries are the source (the keys and
    values then the target) fails the check."""
    from translate.models.attention import MultiHeadAttention

    forward = MultiHeadAttention.forward

    def swapped(self, x, context=None, **kwargs):
        if context is None:
            return forward(self, x, **kwargs)
        kwargs.pop("mask"), kwargs.pop("cache")
        out = forward(self, context, context=x)  # (B, S, D): a row per source position
        return out.mean(dim=1, keepdim=True).expand_as(x)  # pooled to fit the residual

    monkeypatch.setattr(MultiHeadAttention, "forward", swapped)
    with pytest.raises(AssertionError, match="cross-attention weights"):
        assert_the_queries_come_from_the_target(model)
