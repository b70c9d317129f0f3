"""The gpu engine's searches (translate.gpu.search) against the textbook ones: the same
hypotheses, scores and order; looking at the device every few steps changes only which steps a
finished sentence's rows still run."""

import json
from dataclasses import replace

import pytest
import torch

from test_search import ToyModel, small_models, A, B
from translate import gpu, search
from translate.loading import load_checkpoint
from translate.data.batch import pad
from translate.engine import GPU, PLAIN, resolve_engine
from translate.inference import decode_sentences
from translate.ready import Ready
from translate.search import output_limits
from translate.tokens import EOS


def hypotheses(found):
    return [[(h.tokens, h.score, h.logprob) for h in hyps] for hyps in found]


def test_the_toy_models_best_sequence_and_forced_end():
    model, src = ToyModel(), torch.tensor([[7, 3]])
    best = gpu.beam_search(model, src, beam=2, max_len=5, lenpen=0.0, nbest=2)[0]
    assert [h.tokens for h in best] == [[B], [A]]
    assert gpu.greedy_search(model, src, 5) == [[A]]
    limited = gpu.beam_search(model, src, beam=2, max_len=1, lenpen=0.0, nbest=2)
    assert hypotheses(limited) == hypotheses(search.beam_search(model, src, 2, 1, 0.0, 2))


SOURCES = torch.randint(4, 40, (7, 9), generator=torch.Generator().manual_seed(11))
SOURCES[1, 3:] = SOURCES[3, 6:] = SOURCES[5, 2:] = 0
LIMITS = torch.tensor([4, 11, 2, 9, 6, 1, 12])  # sentences leave the batch at different steps


@pytest.mark.parametrize("early_exit", [True, False])
@pytest.mark.parametrize("nbest", [1, 4])
@pytest.mark.parametrize("index", [0, 1], ids=["transformer", "rnn"])
def test_looking_every_step_gives_exactly_the_textbook_search(index, nbest, early_exit):
    """Checked at every step, the batch shrinks when the textbook's does: every float equal."""
    model = small_models()[index]
    for lenpen in (0.6, -0.5):
        want = search.beam_search(model, SOURCES, 4, LIMITS, lenpen, nbest,
                                  early_exit=early_exit)
        got = gpu.beam_search(model, SOURCES, 4, LIMITS, lenpen, nbest, early_exit=early_exit,
                              check_every=1)
        assert hypotheses(got) == hypotheses(want)


@pytest.mark.parametrize("check_every", [3, 8, 100])
@pytest.mark.parametrize("index", [0, 1], ids=["transformer", "rnn"])
def test_looking_every_few_steps_finds_the_same_hypotheses(index, check_every):
    model = small_models()[index]
    want = search.beam_search(model, SOURCES, 4, LIMITS, 0.6, 3)
    got = gpu.beam_search(model, SOURCES, 4, LIMITS, 0.6, 3, check_every=check_every)
    assert [[h.tokens for h in hs] for hs in got] == [[h.tokens for h in hs] for hs in want]
    for g, w in zip(got, want):  # rows computed in batches of other sizes: rounding
        assert [h.score for h in g] == pytest.approx([h.score for h in w], abs=1e-5)
        assert [h.logprob for h in g] == pytest.approx([h.logprob for h in w], abs=1e-5)


@pytest.mark.parametrize("index", [0, 1], ids=["transformer", "rnn"])
def test_greedy_equals_the_textbook_greedy_token_for_token(index):
    model = small_models()[index]
    want = search.greedy_search(model, SOURCES, LIMITS)
    assert gpu.greedy_search(model, SOURCES, LIMITS, check_every=1) == want
    assert gpu.greedy_search(model, SOURCES, LIMITS) == want
    assert all(len(g) <= n for g, n in zip(want, LIMITS.tolist()))


def test_candidates_equal_the_textbook_step():
    logits = torch.randn(6, 30, generator=torch.Generator().manual_seed(2))
    for eos_only in (None, torch.tensor([True, False, False, True, False, False])):
        want = search.top_candidates(logits.clone(), 4, eos_only)
        got = gpu.search.top_candidates(logits.clone(), 4, eos_only)
        assert all(torch.equal(g, w) for g, w in zip(got, want))
    ids = gpu.search.top_candidates(logits.clone(), 4, torch.ones(6, dtype=torch.bool))[1]
    assert (ids[:, 0] == EOS).all()  # a row at its limit may only end


def test_a_trained_model_decodes_the_same_through_the_gpu_engine(trained_run, small_data):
    """40 real test sentences, beam 5 and greedy, text in and text out."""
    loaded = load_checkpoint(trained_run.run_dir)
    lines = [json.loads(line)["en"] for line in (small_data / "test_2016_flickr.jsonl").open()]
    lines = lines[:40]
    assert resolve_engine("gpu", torch.device("cpu")) is GPU
    for beam in (5, 1):
        cfg = replace(loaded.recipe.decode, beam=beam)
        want = decode_sentences(Ready(loaded.model, loaded.tokenizer, engine=PLAIN), lines, cfg,
                                with_scores=beam > 1)
        got = decode_sentences(Ready(loaded.model, loaded.tokenizer, engine=GPU), lines, cfg,
                               with_scores=beam > 1)
        same = [g[0].text == w[0].text for g, w in zip(got, want)]
        assert sum(same) >= 38, f"beam {beam}: {sum(same)} of 40 alike"
        for g, w, alike in zip(got, want, same):
            if alike:
                assert g[0].score == pytest.approx(w[0].score, abs=1e-4)


def test_a_trained_models_batch_shrinks_as_the_search_looks(trained_run, small_data):
    """Sentences done between looks run a few more rows, never more than `check_every` steps'."""
    from test_search import Counted

    loaded = load_checkpoint(trained_run.run_dir)
    lines = [json.loads(line)["en"] for line in (small_data / "validation.jsonl").open()][:32]
    src = pad([torch.tensor(ids) for ids in loaded.tokenizer.encode_src(lines)])
    limits = output_limits(src, 1.5, 10, 200)
    rows = {}
    for every in (1, 4, 1000):
        counted = Counted(loaded.model)
        gpu.beam_search(counted, src, 4, limits, 0.6, 1, check_every=every)
        rows[every] = counted.rows
    textbook = Counted(loaded.model)
    search.beam_search(textbook, src, 4, limits, 0.6, 1)
    assert rows[1] == textbook.rows < rows[4] < rows[1000]


def test_bad_arguments_are_refused():
    model, src = ToyModel(), torch.tensor([[7, 3]])
    with pytest.raises(ValueError, match=r"nbest must be between 1 and the beam size \(2\)"):
        gpu.beam_search(model, src, 2, 5, nbest=3)
    with pytest.raises(ValueError, match="check_every must be at least 1 step, got 0"):
        gpu.beam_search(model, src, 2, 5, check_every=0)
