import json
import math

import pytest
import torch

from helpers.models import with_weights
from translate.loading import load_checkpoint
from translate.alignment import record_attention
from translate.engine import PLAIN
from translate.inference import translate_sentences
from translate.models import RNNConfig, build_model
from translate.models.rnn import AdditiveAttention
from translate.ready import Ready
from translate.search import greedy_search
from translate.tokens import PAD

V = 50


def make_model(cell: str = "gru") -> torch.nn.Module:
    torch.manual_seed(0)
    cfg = RNNConfig(cell=cell, embed_dim=32, encoder_hidden=24, decoder_hidden=40, attn_dim=16,
                    dropout=0.0)
    return build_model(cfg, V, V, shared_vocab=True).eval()


def batch(B=3, S=7, T=6, seed=1):
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(4, V, (B, S), generator=g)
    src[0, 4:] = PAD  # a shorter sentence in the batch
    return src, torch.randint(4, V, (B, T), generator=g)


def test_additive_attention_weights_sum_to_one_and_skip_padding():
    torch.manual_seed(0)
    attn = AdditiveAttention(query_dim=8, key_dim=6, attn_dim=5)
    keys = torch.randn(2, 4, 6)
    mask = torch.tensor([[True, True, False, False], [True, True, True, True]])
    context, weights = with_weights(attn, torch.randn(2, 8), attn.project_keys(keys), keys, mask)
    weights = weights[:, 0]  # (B, S): recorded as (B, 1, S), one query per step
    torch.testing.assert_close(weights.sum(-1), torch.ones(2))
    assert torch.all(weights[0, 2:] == 0) and torch.all(weights[0, :2] > 0)
    torch.testing.assert_close(context, torch.einsum("bs,bsd->bd", weights, keys))


def test_the_score_is_v_tanh_of_w_s_plus_u_h_as_worked_by_hand():
    """score(s, h) = vᵀ tanh(W s + U h), worked by hand for one decoder state s and three
    annotations h (W the identity, U = [[1, 1], [0, -1]] with no bias, v = (1, 2)): the
    module's scores are these, its weights their softmax over the real positions (a fourth,
    padding, gets 0), its context those weights times the annotations."""
    attn = AdditiveAttention(query_dim=2, key_dim=2, attn_dim=2)
    with torch.no_grad():
        attn.query_proj.weight.copy_(torch.eye(2))  # W
        attn.key_proj.weight.copy_(torch.tensor([[1.0, 1.0], [0.0, -1.0]]))  # U
        attn.key_proj.bias.zero_()
        attn.score.weight.copy_(torch.tensor([[1.0, 2.0]]))  # v
    s = torch.tensor([[0.5, -0.5]])  # (B, query_dim)
    h = torch.tensor([[[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [2.0, 0.0]]])  # (B, S, key_dim)
    mask = torch.tensor([[True, True, True, False]])
    # W s + U h = (0.5 + h1 + h2, -0.5 - h2); its tanh, then 1 * first + 2 * second
    by_hand = torch.tensor([math.tanh(1.5) + 2 * math.tanh(-0.5),  # h = (1, 0): -0.0191
                            math.tanh(1.5) + 2 * math.tanh(-1.5),  # h = (0, 1): -0.9051
                            math.tanh(2.5) + 2 * math.tanh(-1.5)])  # h = (1, 1): -0.8237
    scores = []  # what v computes: (B, S, 1) before the mask
    attn.score.register_forward_hook(lambda module, args, out: scores.append(out))
    context, weights = with_weights(attn, s, attn.project_keys(h), h, mask)
    torch.testing.assert_close(scores[0][0, :3, 0], by_hand)
    expected = torch.cat([torch.softmax(by_hand, dim=0), torch.zeros(1)])  # (S,)
    torch.testing.assert_close(weights[0, 0], expected)  # recorded as (B, 1, S)
    torch.testing.assert_close(context[0], expected @ h[0])


@pytest.mark.parametrize("cell", ["gru", "lstm"])
def test_incremental_decoding_equals_full_recomputation(cell):
    model = make_model(cell)
    src, tgt = batch()
    full = model(src, tgt)
    state, steps = model.init_state(model.encode(src)), []
    for t in range(tgt.size(1)):
        logits, state = model.decode(tgt[:, t: t + 1], state)
        steps.append(logits)
    torch.testing.assert_close(torch.cat(steps, 1), full, atol=1e-5, rtol=1e-5)
    assert greedy_search(model, src, 12) == greedy_search(model, src, 12, use_cache=False)


@pytest.mark.parametrize("cell", ["gru", "lstm"])
def test_source_padding_changes_nothing(cell):
    model = make_model(cell)
    src, tgt = batch()
    padded = torch.cat([src, torch.full((3, 5), PAD)], dim=1)
    torch.testing.assert_close(model(padded, tgt), model(src, tgt), atol=1e-5, rtol=1e-5)


def test_recorded_alignment_covers_real_source_only():
    model = make_model()
    src, tgt = batch()
    with record_attention(model) as maps:
        model(src, tgt)
    alignment = torch.cat(maps["attention"], dim=1)  # (B, T, S)
    assert alignment.shape == (3, 6, 7)
    torch.testing.assert_close(alignment.sum(-1), torch.ones(3, 6))
    assert torch.all(alignment[0, :, 4:] == 0)
    assert model.attention.record_weights is None  # recording stops with the block


def test_tied_embeddings_are_one_matrix():
    model = make_model()
    assert model.src_embed is model.tgt_embed
    assert model.output.weight is model.tgt_embed.weight


def test_tiny_rnn_learns_real_data_and_round_trips(trained_rnn_run, small_data):
    records = [json.loads(line) for line in
               (trained_rnn_run.run_dir / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in records if r["kind"] == "train"]
    assert train[-1]["loss"] < 0.6 * train[0]["loss"]
    valid = [r for r in records if r["kind"] == "valid"]
    assert valid[-1]["dev_loss"] < valid[0]["dev_loss"]
    test = next(r for r in records if r["kind"] == "test")
    assert test["bleu"] > 1.0

    loaded = load_checkpoint(trained_rnn_run.run_dir)
    assert loaded.recipe.model.arch == "rnn"
    hyps = (trained_rnn_run.run_dir / "test_2016_flickr.hyp.de").read_text().splitlines()
    src = [json.loads(line)["en"] for line in (small_data / "test_2016_flickr.jsonl").open()]
    # the run decoded its test split in the precision `auto` picks for decoding here (bf16 on
    # a CPU with AMX or AVX512-BF16, fp32 elsewhere): decode again in it, so strings compare
    ready = Ready.prepare(loaded.model, loaded.tokenizer, torch.device("cpu"),
                          loaded.recipe.train.precision, PLAIN)
    again = translate_sentences(ready, src[:20], loaded.recipe.decode)
    assert again == hyps[:20]


# The tour's stop on additive attention: a check of its claim, run on the model and on a copy
# broken on purpose.

def assert_each_output_word_gets_its_own_alignment(model):
    """The decoder state s_{i-1} is the query, so each output word gets its own
    distribution over the source: changing target input t moves the alignments of steps after
    t and none before or at it."""
    src, tgt = batch()
    changed = tgt.clone()
    changed[:, 2] = torch.where(tgt[:, 2] == 4, 5, 4)
    with record_attention(model) as maps:
        model(src, tgt)
        model(src, changed)
    steps = tgt.size(1)
    before = torch.cat(maps["attention"][:steps], dim=1)  # (B, T, S)
    after = torch.cat(maps["attention"][steps:], dim=1)
    torch.testing.assert_close(after[:, :3], before[:, :3])
    moved = (after[:, 3:] - before[:, 3:]).abs().amax()
    assert moved > 1e-6, "the alignment does not follow the decoder state"  # untrained: small


def test_each_output_word_gets_its_own_alignment():
    assert_each_output_word_gets_its_own_alignment(make_model())


def test_the_check_fails_on_a_score_blind_to_the_decoder_state(monkeypatch):
    """Break the claim on purpose: a score that drops W s (the query) gives every output word
    the same alignment, and the check fails."""
    forward = AdditiveAttention.forward
    monkeypatch.setattr(AdditiveAttention, "forward", lambda self, query, *args:
                        forward(self, torch.zeros_like(query), *args))
    with pytest.raises(AssertionError, match="does not follow the decoder state"):
        assert_each_output_word_gets_its_own_alignment(make_model())
