"""Encoded sentences and their batches: flat token arrays, the length rules, batching by tokens
(for training and for decoding)."""

import numpy as np
import pytest
import torch

from translate.config import TokenizerConfig
from translate.data.batch import collate, length_batches, pad, token_batches
from translate.data.clean import CleanStats
from translate.data.encode import EncodedPairs, TokenArray, encode_pairs, filter_lengths
from translate.tokenizer import Tokenizer
from translate.tokens import BOS, EOS, PAD
from helpers.files import read_jsonl
from helpers.training import RECIPES, RNN_TINY_OVERRIDES, TINY_OVERRIDES


def greedy_batches(src: list[int], tgt: list[int], max_tokens: int) -> list[list[int]]:
    """The batching rule written plainly: sort by (target, source) length, then fill each batch
    while (sentences) x (longest side) stays within the budget."""
    batches, current, longest = [], [], 0
    for i in sorted(range(len(src)), key=lambda i: (tgt[i], src[i], i)):
        size = max(src[i], tgt[i])
        if current and max(longest, size) * (len(current) + 1) > max_tokens:
            batches.append(current)
            current, longest = [], 0
        current.append(i)
        longest = max(longest, size)
    return batches + ([current] if current else [])


def test_batches_follow_the_rule_and_cover_every_pair(small_data):
    rows = read_jsonl(small_data / "train.jsonl", 500)
    en, de = [r["en"] for r in rows], [r["de"] for r in rows]
    tok = Tokenizer.train(en, de, TokenizerConfig(vocab_size=500))
    pairs = encode_pairs(tok, en, de)
    src, tgt = pairs.src.lengths.tolist(), pairs.tgt.lengths.tolist()
    assert [list(b) for b in token_batches(src, tgt, 400, shuffle=False)] == \
        greedy_batches(src, tgt, 400)
    shuffled = token_batches(pairs.src.lengths, pairs.tgt.lengths, 400, True, 1)
    assert sorted(i for b in shuffled for i in b) == list(range(500))
    assert all(len(b) * max(max(src[i], tgt[i]) for i in b) <= 400 for b in shuffled if len(b) > 1)
    again = token_batches(pairs.src.lengths, pairs.tgt.lengths, 400, True, 1)
    other = token_batches(pairs.src.lengths, pairs.tgt.lengths, 400, True, 2)
    assert [b.tolist() for b in shuffled] == [b.tolist() for b in again]
    assert [b.tolist() for b in shuffled] != [b.tolist() for b in other]
    assert shuffled[2:4][1].tolist() == shuffled[3].tolist()  # slices: a step's batches
    b = collate([pairs.src[i] for i in shuffled[0]], [pairs.tgt[i] for i in shuffled[0]])
    assert (b.tgt_in[:, 0] == BOS).all()
    assert ((b.tgt_out == EOS).sum(1) == 1).all()
    assert b.num_tgt_tokens == int((b.tgt_out != PAD).sum())
    torch_in = b.tgt_in[:, 1:]
    assert ((torch_in == b.tgt_out[:, :-1]) | (b.tgt_out[:, :-1] == EOS)).all()


def test_a_sentence_over_the_budget_gets_a_batch_of_its_own():
    batches = token_batches([5, 50, 6], [5, 60, 6], 40, shuffle=False)
    assert [b.tolist() for b in batches] == [[0, 2], [1]]
    assert len(token_batches(np.zeros(0, np.int32), np.zeros(0, np.int32), 40, True)) == 0


def longest_first_batches(lengths: list[int], max_tokens: int, max_sentences: int
                          ) -> list[list[int]]:
    """Decoding's rule written plainly: sort by length, longest first (ties in input order), then
    fill each batch while (sentences) x (its first, longest) stays within the budget and, when
    `max_sentences` > 0, the batch under that many sentences."""
    batches, current = [], []
    for i in sorted(range(len(lengths)), key=lambda i: -lengths[i]):
        full = 0 < max_sentences <= len(current)
        if current and (full or lengths[current[0]] * (len(current) + 1) > max_tokens):
            batches.append(current)
            current = []
        current.append(i)
    return batches + ([current] if current else [])


@pytest.mark.parametrize("max_tokens, max_sentences", [(120, 0), (120, 3), (20, 0), (10 ** 9, 64),
                                                       (1, 0)])
def test_decoding_batches_follow_the_same_cutter_longest_first(max_tokens, max_sentences):
    lengths = np.random.default_rng(max_tokens + max_sentences).integers(1, 40, 300).tolist()
    batches = length_batches(lengths, max_tokens, max_sentences)
    assert batches == longest_first_batches(lengths, max_tokens, max_sentences)
    assert all(type(i) is int for batch in batches for i in batch)
    assert length_batches([], max_tokens, max_sentences) == []


def test_token_array_holds_sentences_flat():
    seqs = [[5, 6, 3], [3], [7, 8, 9, 10, 3], [11, 3]]
    array = TokenArray.from_lists(seqs)
    assert array.values.dtype == np.int32 and array.values.size == 11
    assert array.lengths.tolist() == [3, 1, 5, 2] and array.starts.tolist() == [0, 3, 4, 9]
    assert [s.tolist() for s in array] == seqs and len(array) == 4
    assert pad([array[2], array[1]]).tolist() == [[7, 8, 9, 10, 3], [3, PAD, PAD, PAD, PAD]]


def test_length_filter_counts_and_keeps_as_the_rules_say():
    src = [[1] * 3, [1] * 120, [1] * 4, [1] * 30, [1] * 2, [1] * 9]
    tgt = [[1] * 3, [1] * 4, [1] * 101, [1] * 9, [1] * 7, [1] * 30]
    stats = CleanStats(total=6)
    kept = filter_lengths(EncodedPairs(TokenArray.from_lists(src), TokenArray.from_lists(tgt)),
                          100, 3.0, stats)
    # too long: pairs 1 and 2; ratio over 3 with more than 8 pieces: pair 3 (30 vs 9) and pair 5
    # (9 vs 30); pair 4 (2 vs 7) is short enough to keep
    assert (stats.too_long, stats.bad_ratio, stats.kept) == (2, 2, 2) and len(kept) == 2
    assert kept.indices().tolist() == [0, 4]
    batches = token_batches(kept.src.lengths, kept.tgt.lengths, 1000, True, 1, kept.length_filter)
    assert sorted(i for b in batches for i in b) == [0, 4]  # batches draw from the kept pairs only


def test_rounded_lengths_batch_by_the_same_rule_in_fewer_shapes(small_data):
    """`multiple` 8: the plain rule over lengths rounded up to 8, and tensors padded to them."""
    rows = read_jsonl(small_data / "train.jsonl", 500)
    en, de = [r["en"] for r in rows], [r["de"] for r in rows]
    pairs = encode_pairs(Tokenizer.train(en, de, TokenizerConfig(vocab_size=500)), en, de)
    src, tgt = pairs.src.lengths, pairs.tgt.lengths
    batches = token_batches(src, tgt, 400, shuffle=False, multiple=8)
    assert [list(b) for b in batches] == greedy_batches(((src + 7) // 8 * 8).tolist(),
                                                        ((tgt + 7) // 8 * 8).tolist(), 400)
    shapes = set()
    for idx in token_batches(src, tgt, 400, shuffle=True, seed=1, multiple=8):
        b = collate([pairs.src[i] for i in idx], [pairs.tgt[i] for i in idx], multiple=8)
        assert b.src.shape[1] % 8 == 0 and b.tgt_out.shape[1] % 8 == 0
        assert b.src.shape[1] - 8 < max(src[idx]) <= b.src.shape[1]
        assert b.tgt_out.shape[1] * len(idx) <= 400 or len(idx) == 1
        assert b.num_tgt_tokens == int((b.tgt_out != PAD).sum()) == int(tgt[idx].sum())
        shapes.add((b.src.shape[1], b.tgt_out.shape[1]))
    exact = {(int(max(src[idx])), int(max(tgt[idx])))
             for idx in token_batches(src, tgt, 400, shuffle=True, seed=1)}
    assert len(shapes) < len(exact) / 2


@pytest.mark.parametrize("recipe, overrides", [("transformer_2017.yaml", TINY_OVERRIDES),
                                               ("transformer.yaml", TINY_OVERRIDES),
                                               ("rnn_bahdanau.yaml", RNN_TINY_OVERRIDES)])
def test_padding_to_a_multiple_changes_no_loss_and_no_gradient(recipe, overrides, small_data):
    """The extra padding is masked like any other: the same batch padded to its longest and to
    a multiple of 8 gives the same summed loss and the same gradients, in both models."""
    from translate.config import load_recipe
    from translate.loss import label_smoothed_cross_entropy
    from translate.models import build_model

    rows = read_jsonl(small_data / "train.jsonl", 300)
    en, de = [r["en"] for r in rows], [r["de"] for r in rows]
    tok = Tokenizer.train(en, de, TokenizerConfig(vocab_size=400))
    pairs = encode_pairs(tok, en, de)
    cfg = load_recipe(RECIPES / recipe, overrides).model
    torch.manual_seed(0)
    model = build_model(cfg, tok.src_vocab_size, tok.tgt_vocab_size, tok.joint).eval()
    idx = [i for i in range(40) if pairs.tgt.lengths[i] % 8 and pairs.src.lengths[i] % 8][:12]
    results = []
    for multiple in (1, 8):
        batch = collate([pairs.src[i] for i in idx], [pairs.tgt[i] for i in idx], multiple)
        model.zero_grad()
        loss, nll = label_smoothed_cross_entropy(model(batch.src, batch.tgt_in), batch.tgt_out,
                                                 0.1, PAD)
        loss.backward()
        results.append((batch.tgt_out.shape, loss.detach(), nll.detach(),
                        {n: p.grad.clone() for n, p in model.named_parameters()}))
    (shape, loss, nll, grads), (padded_shape, padded_loss, padded_nll, padded_grads) = results
    assert padded_shape[1] % 8 == 0 and padded_shape[1] > shape[1]
    torch.testing.assert_close(padded_loss, loss, rtol=1e-5, atol=0)
    torch.testing.assert_close(padded_nll, nll, rtol=1e-5, atol=0)
    for name, grad in grads.items():  # float32 sums over other shapes: rounding, no more
        torch.testing.assert_close(padded_grads[name], grad, rtol=1e-4, atol=5e-6,
                                   msg=lambda m: f"{name}: {m}")
