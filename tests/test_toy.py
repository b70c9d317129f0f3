"""The toy tasks: their batches say what the model must do, the grading finds the right source
position, and the one-layer Transformer learns to attend there."""

import pytest
import torch

from translate.tokens import BOS, EOS, PAD
from translate.toy import (FIRST_SYMBOL, alignment_accuracy, answer, exact_match, right_positions,
                           toy_batch, toy_model, train_toy)


@pytest.mark.parametrize("task", ["copy", "reverse"])
def test_a_batch_holds_each_source_and_its_answer(task):
    batch = toy_batch(task, 8, torch.Generator().manual_seed(0), symbols=5, lengths=(2, 6))
    for src, tgt_in, tgt_out in zip(batch.src, batch.tgt_in, batch.tgt_out):
        symbols = src[src != PAD].tolist()
        assert symbols[-1] == EOS and 2 <= len(symbols) - 1 <= 6
        assert all(FIRST_SYMBOL <= s < FIRST_SYMBOL + 5 for s in symbols[:-1])
        expected = symbols[:-1] if task == "copy" else symbols[-2::-1]
        assert tgt_out[tgt_out != PAD].tolist() == expected + [EOS]
        assert tgt_in[tgt_in != PAD].tolist() == [BOS] + expected
    assert batch.num_tgt_tokens == int((batch.tgt_out != PAD).sum())


def test_the_right_positions_are_where_each_answer_symbol_stands():
    symbols = [7, 8, 9, 10]
    for task in ("copy", "reverse"):
        out = answer(task, symbols)
        assert [symbols[j] for j in right_positions(task, 4)] == out
    assert right_positions("reverse", 3) == [2, 1, 0]


def test_attention_on_the_right_positions_scores_one_and_elsewhere_less(monkeypatch):
    """The grading, on weights set by hand: all on the right position gives 1.0, all on the
    first position gives the share of answer positions whose right position is the first."""
    import translate.toy as toy

    batch = toy_batch("reverse", 4, torch.Generator().manual_seed(1), lengths=(3, 5))
    B, T, S = batch.tgt_in.size(0), batch.tgt_in.size(1), batch.src.size(1)
    perfect = torch.zeros(B, T, S)
    for b, src in enumerate(batch.src):
        length = int((src != PAD).sum()) - 1
        for t, j in enumerate(right_positions("reverse", length)):
            perfect[b, t, j] = 1.0
    monkeypatch.setattr(toy, "cross_attention", lambda model, batch: perfect)
    assert alignment_accuracy(None, "reverse", batch) == 1.0
    first = torch.zeros(B, T, S)
    first[..., 0] = 1.0
    monkeypatch.setattr(toy, "cross_attention", lambda model, batch: first)
    lengths = (batch.src != PAD).sum(1) - 1
    assert alignment_accuracy(None, "reverse", batch) == pytest.approx(
        len(lengths) / float(lengths.sum()))  # one answer position per string: the last


def test_a_one_layer_transformer_learns_to_attend_where_copying_reads():
    """Before training the peaks fall near chance; trained on copy (seconds on 2 cores) they
    fall on the right source position for nearly every answer position, training stops at the
    first check that finds 90%, and greedy search, reading its own output, copies."""
    torch.manual_seed(0)
    held_out = toy_batch("copy", 256, torch.Generator().manual_seed(5))
    untrained = alignment_accuracy(toy_model(), "copy", held_out)
    run = train_toy("copy", steps=1000, check_every=50, until=0.9, seed=0)
    assert untrained < 0.4
    assert run.accuracy >= 0.9 and alignment_accuracy(run.model, "copy", held_out) >= 0.85
    assert all(check[3] < 0.9 for check in run.checks[:-1]) and run.checks[-1][0] < 1000
    assert run.checks[-1][2] < run.checks[0][2] / 2  # NLL per token
    assert exact_match(run.model, held_out) >= 0.8


def test_training_stops_at_the_seconds_given():
    run = train_toy("reverse", steps=10_000, seconds=0.5, check_every=10_000)
    assert len(run.checks) == 1 and run.checks[0][0] < 10_000 and run.checks[0][1] >= 0.5


def test_exact_match_grades_what_greedy_search_writes(monkeypatch):
    """Right answers score 1, one wrong symbol or a missing EOS (cut at the length limit) 0."""
    import translate.toy as toy

    batch = toy_batch("copy", 3, torch.Generator().manual_seed(2), lengths=(2, 4))
    answers = [row[row != PAD].tolist()[:-1] for row in batch.tgt_out]
    monkeypatch.setattr(toy, "greedy_search", lambda model, src, limit: answers)
    assert toy.exact_match(torch.nn.Identity(), batch) == 1.0
    wrong = [answers[0][:-1] + [answers[0][-1] + 1], *answers[1:]]
    monkeypatch.setattr(toy, "greedy_search", lambda model, src, limit: wrong)
    assert toy.exact_match(torch.nn.Identity(), batch) == pytest.approx(2 / 3)
