"""The fast engine against the textbook path: the same parameters, the same results."""

import copy
import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from helpers.models import untrained_model, with_weights
from translate.loading import load_checkpoint
from translate.config import TrainConfig, load_recipe
from translate.engine import FAST, PLAIN, TEXTBOOK, fast_engine, resolve_engine
from translate.fast import accelerate
from translate.fast.attention import (FastMultiHeadAttention, explicit_attention,
                                      explicit_is_faster, rotate_complex, sdpa)
from translate.fast.layers import ByteDropout, random_bytes
from translate.fast.linear import PackedLinear, PackedWeights, linear
from translate.fast.search import topk_rows
from translate.inference import decode_sentences
from translate.models import RNNConfig, TransformerConfig, build_model
from translate.models.attention import MultiHeadAttention, padding_mask, rotate
from translate.ready import Ready
from translate.search import beam_search, greedy_search
from translate.training.optim import make_optimizer
from translate.training.sizes import ladder, sized

V = 40
TRANSFORMER = TransformerConfig(d_model=32, heads=4, ffn_dim=64, encoder_layers=2,
                                decoder_layers=2, dropout=0.0)
# the Transformer's model options beside the classic ones: every engine runs each
OPTIONS = {"rmsnorm-swiglu": {"norm": "rmsnorm", "activation": "swiglu"},
           "relu2": {"activation": "relu2"}, "gelu": {"activation": "gelu"}}
CONFIGS = {"transformer": TRANSFORMER,
           **{f"transformer-{name}": replace(TRANSFORMER, **o) for name, o in OPTIONS.items()},
           "rnn": RNNConfig(embed_dim=32, encoder_hidden=24, decoder_hidden=40, attn_dim=16,
                            dropout=0.0),
           "transformer-rope+qk_norm": TransformerConfig(
               d_model=32, heads=4, ffn_dim=64, encoder_layers=2, decoder_layers=2, dropout=0.0,
               positions="rope", qk_norm=True)}


def pair(arch):
    """A random model and its accelerated copy."""
    torch.manual_seed(0)
    plain = build_model(CONFIGS[arch], V, V, shared_vocab=True).eval()
    return plain, accelerate(copy.deepcopy(plain))


def sources():
    src = torch.randint(4, V, (5, 8), generator=torch.Generator().manual_seed(7))
    src[1, 3:] = src[3, 6:] = 0
    return src


@pytest.mark.parametrize("arch", CONFIGS)
def test_accelerate_keeps_the_parameters_and_the_outputs(arch):
    plain, fast = pair(arch)
    assert type(fast).__name__.startswith("Fast") and type(plain).__name__ != type(fast).__name__
    assert plain.state_dict().keys() == fast.state_dict().keys()
    assert all(torch.equal(a, b) for a, b in zip(plain.state_dict().values(),
                                                  fast.state_dict().values()))
    tgt = torch.randint(4, V, (5, 6))
    with torch.no_grad():
        torch.testing.assert_close(fast(sources(), tgt), plain(sources(), tgt), atol=1e-5, rtol=0)


def test_fused_qkv_is_the_fast_engines_option_on_by_default_and_changes_no_output():
    """Q, K and V in one matmul or three: an engine option (the model's config has none)."""
    plain, _ = pair("transformer")
    fused = FAST.prepare(copy.deepcopy(plain))
    unfused = fast_engine(fuse_qkv=False).prepare(copy.deepcopy(plain))
    for model, fuses in ((fused, True), (unfused, False)):
        attention = [m for m in model.modules() if isinstance(m, FastMultiHeadAttention)]
        assert len(attention) == 6 and all(m.fuse_qkv == fuses for m in attention)
    src, tgt, limits = sources(), torch.randint(4, V, (5, 6)), torch.tensor([4, 11, 2, 9, 6])
    with torch.no_grad():
        torch.testing.assert_close(unfused(src, tgt), fused(src, tgt), atol=1e-5, rtol=0)
    assert greedy_search(unfused, src, limits) == greedy_search(fused, src, limits)


@pytest.mark.parametrize("arch", CONFIGS)
def test_fast_search_finds_what_plain_search_finds(arch):
    plain, fast = pair(arch)
    src, limits = sources(), torch.tensor([4, 11, 2, 9, 6])
    assert greedy_search(fast, src, limits) == greedy_search(plain, src, limits)
    ours = beam_search(fast, src, 4, limits, nbest=4, candidates=FAST.candidates)
    theirs = beam_search(plain, src, 4, limits, nbest=4)
    assert [[h.tokens for h in hs] for hs in ours] == [[h.tokens for h in hs] for hs in theirs]
    for hs, ts in zip(ours, theirs):
        assert [h.logprob for h in hs] == pytest.approx([t.logprob for t in ts], abs=1e-4)


@pytest.mark.parametrize("arch", ["transformer", "rnn"])
def test_a_state_keeps_the_memory_rows_of_the_sentences_whose_rows_it_keeps(arch):
    """`state.select(rows)` once some sentences are done: `rows` holds every hypothesis of each
    sentence kept. The fast states, one memory row per sentence, find those sentences from the
    rows, and their next step gives what the textbook's, a memory row per hypothesis, gives."""
    plain, fast = pair(arch)
    src, K = sources(), 3  # 5 sentences, 3 beams each after the first step
    keep = torch.tensor([0, 2, 3])  # sentences 1 and 4 are done
    rows = (keep[:, None] * K + torch.arange(K)).view(-1)  # (9,) their hypotheses
    tokens = torch.randint(4, V, (5 * K, 1), generator=torch.Generator().manual_seed(3))
    logits, memory_rows = [], []
    with torch.no_grad():
        for model in (plain, fast):
            state = model.init_state(model.encode(src))
            _, state = model.decode(tokens[::K], state)  # a row per sentence
            state = state.reorder_beams(torch.arange(5).repeat_interleave(K))  # K beams each
            _, state = model.decode(tokens, state)  # (15, 1, V)
            state = state.select(rows)
            memory_rows.append(len(state.memory.states))
            logits.append(model.decode(tokens[rows], state)[0])  # (9, 1, V)
    assert memory_rows == [len(rows), len(keep)]
    torch.testing.assert_close(logits[1], logits[0], atol=1e-5, rtol=0)


@pytest.mark.parametrize("run", ["trained_run", "trained_rnn_run"])
def test_fast_and_plain_translate_real_data_alike(run, request, small_data):
    loaded = load_checkpoint(request.getfixturevalue(run).run_dir)
    src = [json.loads(line)["en"] for line in (small_data / "test_2016_flickr.jsonl").open()]
    fast_model = accelerate(copy.deepcopy(loaded.model))
    for beam in (1, 5):
        cfg = replace(loaded.recipe.decode, beam=beam)
        plain = decode_sentences(Ready(loaded.model, loaded.tokenizer), src, cfg,
                                 with_scores=True)
        fast = decode_sentences(Ready(fast_model, loaded.tokenizer, engine=FAST), src, cfg,
                                with_scores=True)
        same = sum(p[0].text == f[0].text for p, f in zip(plain, fast))
        assert same >= 99, f"beam {beam}: {same}/100 identical"
        close = [abs(p[0].logprob - f[0].logprob) < 1e-3 for p, f in zip(plain, fast)
                 if p[0].text == f[0].text]
        assert all(close)


def training_step(engine, model, batch):
    """The loss, NLL and gradients of one training step of `engine` on a copy of `model`."""
    model = engine.prepare(copy.deepcopy(model)).train()
    loss, nll = engine.loss(model(batch.src, batch.tgt_in), batch.tgt_out, 0.1, 0)
    loss.backward()
    return loss, nll, {name: p.grad for name, p in model.named_parameters()}


def real_batch(tokenizer):
    """Two real sentence pairs as a training batch."""
    from translate.data.batch import collate
    from translate.data.encode import encode_pairs

    texts = ["A man rides a bike .", "Two dogs play in the snow ."]
    pairs = encode_pairs(tokenizer, texts, ["Ein Mann fährt Rad .", "Zwei Hunde ."])
    return collate(pairs.src, pairs.tgt)


def assert_same_training_step(model, batch):
    """The same loss and gradients, within float rounding, from the fast engine's modules and
    loss as from the plain ones."""
    loss, nll, grads = training_step(PLAIN, model, batch)
    fast_loss, fast_nll, fast_grads = training_step(FAST, model, batch)
    torch.testing.assert_close(fast_loss, loss, atol=1e-4, rtol=1e-5)
    torch.testing.assert_close(fast_nll, nll, atol=1e-4, rtol=1e-5)
    assert fast_grads.keys() == grads.keys()
    for name, g in grads.items():
        torch.testing.assert_close(fast_grads[name], g, atol=1e-5, rtol=1e-4, msg=name)


@pytest.mark.parametrize("run", ["trained_run", "trained_rnn_run"])
def test_fast_training_step_equals_the_plain_one(run, request):
    """One step of the trained model on real text."""
    loaded = load_checkpoint(request.getfixturevalue(run).run_dir)
    assert_same_training_step(loaded.model, real_batch(loaded.tokenizer))


@pytest.mark.parametrize("options", OPTIONS.values(), ids=OPTIONS.keys())
def test_fast_training_step_equals_the_plain_one_with_each_model_option(options, trained_run):
    """One step on real text of a model of the trained run's shape and vocabulary, with an
    option, drawn afresh."""
    loaded = load_checkpoint(trained_run.run_dir)
    torch.manual_seed(0)
    model = build_model(replace(loaded.recipe.model, **options), loaded.tokenizer.src_vocab_size,
                        loaded.tokenizer.tgt_vocab_size, loaded.tokenizer.joint)
    assert_same_training_step(model, real_batch(loaded.tokenizer))


DEFAULT_RECIPE = Path(__file__).resolve().parents[2] / "recipes/multi30k/transformer.yaml"
SIZES = ladder(load_recipe(DEFAULT_RECIPE))  # the default recipe's recorded sizes


@pytest.mark.parametrize("rung", SIZES, ids=[r.size for r in SIZES])
def test_each_size_of_the_default_recipe_trains_alike_in_every_engine(rung, trained_run):
    """One step on real text of the default recipe at each size of its ladder (`train.size`),
    with the trained run's vocabulary, drawn afresh, without dropout: the fast engine's loss and gradients are
    the plain engine's, and the textbook's."""
    loaded = load_checkpoint(trained_run.run_dir)
    recipe = sized(load_recipe(DEFAULT_RECIPE), rung)
    torch.manual_seed(0)  # dropout off: the engines draw their masks differently
    model = build_model(replace(recipe.model, dropout=0.0), loaded.tokenizer.src_vocab_size,
                        loaded.tokenizer.tgt_vocab_size, loaded.tokenizer.joint)
    batch = real_batch(loaded.tokenizer)
    assert_same_training_step(model, batch)
    textbook = training_step(TEXTBOOK, model, batch)
    plain = training_step(PLAIN, model, batch)
    torch.testing.assert_close(textbook[0], plain[0], atol=1e-4, rtol=1e-5)
    for name, g in plain[2].items():
        torch.testing.assert_close(textbook[2][name], g, atol=1e-5, rtol=1e-4, msg=name)


@pytest.mark.parametrize("options", [{"positions": "rope"}, {"qk_norm": True},
                                     {"positions": "rope", "qk_norm": True},
                                     {"positions": "rope", "qk_norm": True,
                                      "cross_query_norm": "width"}],
                         ids=["rope", "qk_norm", "rope+qk_norm", "rope+qk_norm+width"])
@pytest.mark.parametrize("fuse_qkv", [True, False], ids=["fused", "three-matmuls"])
def test_the_attention_options_run_in_the_fast_engine_as_in_the_textbook(options, fuse_qkv,
                                                                         small_data):
    """Real text through a model with the options: the fast engine's logits, searches (its
    packed cache rotating each new key at the cache's length, beams sharing memory rows), drawn
    weights, and a training step's loss and gradients are the textbook's."""
    from translate.data.batch import collate
    from translate.data.encode import encode_pairs

    _, tokenizer, plain = untrained_model(small_data, 2, ("model.dropout=0", *(
        f"model.{key}={str(value).lower()}" for key, value in options.items())))
    engine = fast_engine(fuse_qkv=fuse_qkv)
    fast = engine.prepare(copy.deepcopy(plain)).eval()
    plain.eval()
    texts = ["A man rides a bike down a hill .", "Two dogs play in the snow .", "A girl ."]
    pairs = encode_pairs(tokenizer, texts,
                         ["Ein Mann fährt Rad .", "Zwei Hunde .", "Ein Mädchen ."])
    batch = collate(pairs.src, pairs.tgt)
    with torch.no_grad():
        torch.testing.assert_close(fast(batch.src, batch.tgt_in), plain(batch.src, batch.tgt_in),
                                   atol=1e-5, rtol=0)
    limits = torch.tensor([9, 4, 12])
    assert greedy_search(fast, batch.src, limits) == greedy_search(plain, batch.src, limits)
    ours = beam_search(fast, batch.src, 4, limits, nbest=4, candidates=engine.candidates)
    theirs = beam_search(plain, batch.src, 4, limits, nbest=4)
    assert [[h.tokens for h in hs] for hs in ours] == [[h.tokens for h in hs] for hs in theirs]
    for hs, ts in zip(ours, theirs):
        assert [h.logprob for h in hs] == pytest.approx([t.logprob for t in ts], abs=1e-4)
    x = torch.randn(3, 5, 32)
    for name, attn in plain.named_modules():
        if isinstance(attn, MultiHeadAttention) and attn.role != "cross-attention":
            with torch.no_grad():
                _, theirs = with_weights(attn, x, causal=True)
                _, mine = with_weights(fast.get_submodule(name), x, causal=True)
            torch.testing.assert_close(mine, theirs, atol=1e-6, rtol=1e-5)
    loss, nll, grads = training_step(PLAIN, plain, batch)
    fast_loss, fast_nll, fast_grads = training_step(engine, plain, batch)
    torch.testing.assert_close(fast_loss, loss, atol=1e-4, rtol=1e-5)
    assert fast_grads.keys() == grads.keys() and any("q_norm" in n or "k_norm" in n
                                                     for n in grads) == ("qk_norm" in options)
    for name, g in grads.items():
        torch.testing.assert_close(fast_grads[name], g, atol=1e-5, rtol=1e-4, msg=name)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("past", [0, 7])
def test_the_complex_rotation_is_the_textbooks_and_so_is_its_gradient(dtype, past):
    """Queries laid out as split_heads leaves them (a transposed view) turned by one complex
    product equal the textbook's `rotate`, values and gradients, at any first position."""
    torch.manual_seed(0)
    x = torch.randn(2, 5, 3, 8).to(dtype)  # (B, L, H, Dh)
    mine = x.clone().transpose(1, 2).requires_grad_()  # (B, H, L, Dh), not contiguous
    theirs = x.clone().transpose(1, 2).requires_grad_()
    positions = torch.arange(past, past + 5)
    out, expected = rotate_complex(mine, past), rotate(theirs, positions)
    assert out.dtype == dtype and out.shape == expected.shape
    tolerance = dict(atol=1e-6, rtol=1e-6) if dtype == torch.float32 else dict(atol=2e-2, rtol=0)
    torch.testing.assert_close(out, expected, **tolerance)
    upstream = torch.randn(expected.shape).to(dtype)
    (out * upstream).sum().backward()
    (expected * upstream).sum().backward()
    torch.testing.assert_close(mine.grad, theirs.grad, **tolerance)
    assert not torch.equal(out, mine.detach())  # it turned something: position 0 alone is kept
    torch.testing.assert_close(rotate_complex(mine, 0)[:, :, 0], mine.detach()[:, :, 0])


def test_auto_engine_is_fast_on_the_cpu_and_names_are_checked():
    assert resolve_engine("auto", torch.device("cpu")) is FAST
    assert resolve_engine("plain", torch.device("cpu")) is PLAIN
    with pytest.raises(ValueError, match="engine 'turbo' is unknown; valid: auto, fast, plain"):
        resolve_engine("turbo", torch.device("cpu"))


@pytest.mark.parametrize("T", [1, 3])
def test_beams_sharing_a_memory_row_equal_a_copied_memory(T):
    """Cross-attention with a memory row per sentence, queries in runs of `beam` rows per
    sentence, gives what copying the memory once per beam gives: outputs and weights."""
    plain, fast = pair("transformer")
    attn = fast.decoder_layers[0].cross_attn
    beam, memory = 3, torch.randn(2, 5, 32)  # 2 sentences
    mask = padding_mask(torch.tensor([[5, 6, 7, 0, 0], [5, 6, 7, 8, 9]]))  # (2, 1, 1, 5)
    x = torch.randn(2 * beam, T, 32)
    copied = torch.arange(2).repeat_interleave(beam)  # (6,) each row's sentence
    with torch.no_grad():
        out, weights = with_weights(attn, x, context=memory, mask=mask)
        ref, ref_weights = with_weights(plain.decoder_layers[0].cross_attn, x,
                                        context=memory[copied], mask=mask[copied])
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(weights, ref_weights, atol=1e-6, rtol=1e-5)
    assert weights[:beam, :, :, 3:].abs().max() == 0  # the first sentence's padding


@pytest.mark.parametrize("queries", [1, 5])
def test_explicit_path_matches_the_fused_kernel_and_serves_decoding_steps(queries):
    B, H, S = 3, 4, 7
    q, k, v = torch.randn(B, H, queries, 8), torch.randn(B, H, S, 8), torch.randn(B, H, S, 8)
    mask = padding_mask(torch.tensor([[5] * S, [5] * 4 + [0] * 3, [5] * 2 + [0] * 5]))
    with torch.no_grad():
        assert explicit_is_faster(q, k) == (queries > 1)
        assert explicit_is_faster(q, torch.randn(B, H, 4096 // (B * H) + 1, 8))  # many keys
        assert not explicit_is_faster(torch.randn(B, H, 33, 8), k)
        out, weights = explicit_attention(q, k, v, mask)
        torch.testing.assert_close(out, sdpa(q, k, v, mask, 0.0, False), atol=1e-5, rtol=1e-5)
    assert not explicit_is_faster(q, k)  # autograd on: training keeps the fused kernel
    assert (weights[1, ..., 4:] == 0).all() and (weights[2, ..., 2:] == 0).all()


def test_packed_linear_follows_weight_changes_and_copies():
    """The packed weight is remade when the weight changes; copies and training use plain math."""
    layer, x = PackedLinear(16, 24), torch.randn(3, 5, 16)
    with torch.no_grad():
        torch.testing.assert_close(layer(x), x @ layer.weight.T + layer.bias)
        layer.weight.mul_(-2.0)  # in place, as optimizers, EMA and load_state_dict write
        layer.bias.add_(1.0)
        torch.testing.assert_close(layer(x), x @ layer.weight.T + layer.bias)
        twin = copy.deepcopy(layer)
        twin.weight.add_(1.0)
        torch.testing.assert_close(twin(x), x @ twin.weight.T + twin.bias)
        torch.testing.assert_close(layer(x), x @ layer.weight.T + layer.bias)
    out = layer(x)  # autograd on: F.linear, gradients flow
    out.sum().backward()
    assert layer.weight.grad is not None and out.requires_grad


def test_packed_linear_follows_the_fused_optimizers_steps():
    """The fused AdamW kernel leaves the weights' versions alone; the fast engine's
    `watch_optimizer` moves them, so inference after a step uses the new weights, not the packed
    copy of the old ones."""
    layer, x = PackedLinear(16, 24), torch.randn(3, 5, 16)
    optimizer = make_optimizer(layer, TrainConfig())
    assert optimizer.defaults["fused"]  # the CPU's default
    FAST.watch_optimizer(optimizer)
    optimizer.param_groups[0]["lr"] = 0.1  # no warm-up
    with torch.no_grad():
        layer(x)  # packed now
    for _ in range(2):
        before = layer.weight.detach().clone()
        layer(x).square().sum().backward()
        optimizer.step()
        optimizer.zero_grad()
        assert not torch.equal(layer.weight, before)
        with torch.no_grad():
            torch.testing.assert_close(layer(x), x @ layer.weight.T + layer.bias)


def test_random_bytes_are_uniform_and_dropout_keeps_the_expected_value():
    counts = torch.bincount(random_bytes(256 * 4000).reshape(-1).long(), minlength=256).double()
    chi2 = ((counts - 4000) ** 2 / 4000).sum().item()
    assert chi2 < 400, chi2  # 255 degrees of freedom: 400 is p < 1e-8; the top byte would fail
    assert random_bytes(14).shape == (2, 7) and random_bytes(7 * 3 + 1).shape == (4, 7)
    dropout = accelerate(torch.nn.Dropout(0.3)).train()
    assert isinstance(dropout, ByteDropout)
    x = torch.full((401, 999), 2.0, requires_grad=True)  # not a multiple of 7 elements
    y = dropout(x)
    kept = y != 0
    assert abs(kept.double().mean().item() - (1 - 77 / 256)) < 0.005  # p rounded to 77 / 256
    assert abs(y.double().mean().item() - 2.0) < 0.02  # inverted dropout: unbiased
    torch.testing.assert_close(y, kept * 2.0 * (256 / (256 - 77)))
    y.sum().backward()
    torch.testing.assert_close(x.grad, kept * (256 / (256 - 77)))
    half = torch.full((33, 7, 5), 2.0, dtype=torch.bfloat16)
    y = dropout(half)
    scaled = (half[0, 0, 0] * (256 / 179)).item()  # the scale rounded to bf16
    assert y.dtype == torch.bfloat16 and set(y.unique().tolist()) == {0.0, scaled}


def test_layers_side_by_side_equal_each_layer_alone_in_every_mode():
    """Q, K, V in one matmul: fp32 (oneDNN), bf16 autocast (weights joined once, in bf16) and
    training (joined every call, so gradients reach each layer) equal the layers one by one."""
    layers = [PackedLinear(16, 8), PackedLinear(16, 8), PackedLinear(16, 4)]
    packed, x = PackedWeights(), torch.randn(3, 5, 16)

    def alone():
        return torch.cat([F.linear(x, layer.weight, layer.bias) for layer in layers], dim=-1)

    with torch.no_grad():
        torch.testing.assert_close(linear(x, layers, packed), alone())
        for _ in range(2):
            with torch.autocast("cpu", dtype=torch.bfloat16):
                assert torch.equal(linear(x, layers, packed), alone())  # bit for bit
                assert packed.weight.dtype == torch.bfloat16
            layers[1].weight.mul_(-2.0)  # in place, as optimizers, EMA and loading write
    out = linear(x, layers, packed)
    torch.testing.assert_close(out, alone())
    out.sum().backward()
    assert all(layer.weight.grad is not None for layer in layers)


@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_activation_fused_into_the_matmul_equals_applying_it_after(activation):
    layer, x = PackedLinear(16, 24), torch.randn(3, 5, 16)
    plain = getattr(F, activation)(x @ layer.weight.T + layer.bias)
    with torch.no_grad():  # oneDNN applies it as it writes the output
        torch.testing.assert_close(layer(x, activation), plain, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(layer(x, activation), plain)  # autograd on: applied after


@pytest.mark.parametrize("shape,k", [((7, 8000), 10), ((3, 1000), 4), ((5, 997), 3), ((2, 6), 6)])
def test_topk_rows_equals_topk(shape, k):
    torch.manual_seed(0)
    x = torch.randn(shape)
    x[0, :50] = 9.0  # ties
    x[-1] = float("-inf")  # a row with one finite value, as at a length limit
    x[-1, 3] = 0.0
    values, indices = topk_rows(x, k)
    ref_values, _ = x.topk(k, dim=-1)
    torch.testing.assert_close(values, ref_values)
    torch.testing.assert_close(x.gather(1, indices), values)  # the indices point at the values
    assert all(len(set(row)) == k for row in indices.tolist())  # distinct columns
