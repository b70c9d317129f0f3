import json

import pytest
import torch

from conftest import take_steps, tiny_trainer
from translate.models import TransformerConfig, build_model, count_parameters
from translate.search import greedy_search
from translate.tokens import PAD

V = 50


# the model options beside the classic ones, each model test run with each
OPTIONS = {"classic": {}, "rmsnorm-swiglu": {"norm": "rmsnorm", "activation": "swiglu"},
           "relu2": {"activation": "relu2"}}


@pytest.fixture(params=OPTIONS.values(), ids=OPTIONS.keys())
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


def test_tied_embeddings_share_one_matrix(model):
    assert model.src_embed.tokens.weight is model.tgt_embed.tokens.weight
    assert model.output.weight is model.tgt_embed.tokens.weight
    untied = build_model(TransformerConfig(d_model=32, heads=4, tie_embeddings=False), V, V, True)
    assert count_parameters(untied) - count_parameters(model) > 0


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
    kind = {"layernorm": torch.nn.LayerNorm, "rmsnorm": torch.nn.RMSNorm}[model.cfg.norm]
    norms = [name for name, m in model.named_modules() if isinstance(m, kind)]
    assert len(norms) == 2 * 2 + 2 * 3 + 2  # two per encoder layer, three per decoder layer, final
    assert not any(isinstance(m, (torch.nn.LayerNorm, torch.nn.RMSNorm)) and not isinstance(m, kind)
                   for m in model.modules())


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
    from translate.checkpoint import upgrade_state_dict

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
