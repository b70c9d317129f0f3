import json
import math
from dataclasses import dataclass, replace

import pytest
import torch

from translate.config import DecodeConfig
from translate.data.batch import pad
from translate.inference import decode_sentences, translate_sentences
from translate.models import RNNConfig, TransformerConfig, build_model
from translate.ready import Ready
from translate.search import beam_search, greedy_search, length_penalty, top_candidates
from translate.tokens import BOS, EOS, PAD

A, B = 4, 5  # the toy model's two words


@dataclass
class Prefixes:
    """The toy model's state: the tokens fed so far."""

    tokens: torch.Tensor  # (N, t)

    def index_select(self, index):
        return Prefixes(self.tokens.index_select(0, index))

    reorder_beams = select = index_select


class ToyModel(torch.nn.Module):
    """Next-token probabilities fixed by the last token: greedy takes A, the best sequence is B.

        after BOS: A 0.6, B 0.4     after A: EOS 0.34, A 0.33, B 0.33     after B: EOS 0.9, A 0.1
    So p(A EOS) = 0.204 and p(B EOS) = 0.36: greedy misses the most probable output.
    """

    table = {BOS: {A: 0.6, B: 0.4}, A: {EOS: 0.34, A: 0.33, B: 0.33}, B: {EOS: 0.9, A: 0.1}}

    def __init__(self, vocab: int = 6):
        super().__init__()
        self.vocab = vocab

    def encode(self, src):
        return Prefixes(src)  # anything with index_select

    def init_state(self, memory):
        return Prefixes(torch.zeros(memory.tokens.size(0), 0, dtype=torch.long))

    def decode(self, tgt_in, state):
        tokens = torch.cat([state.tokens, tgt_in], dim=1)
        logits = torch.full((*tgt_in.shape, self.vocab), -1e4)
        for n in range(tgt_in.size(0)):
            for t in range(tgt_in.size(1)):
                for token, p in self.table.get(int(tgt_in[n, t]), {EOS: 1.0}).items():
                    logits[n, t, token] = math.log(p)
        return logits, Prefixes(tokens)


def test_beam_finds_the_best_sequence_that_greedy_misses():
    model, src = ToyModel(), torch.tensor([[7, 3]])
    assert greedy_search(model, src, 5) == [[A]]
    best = beam_search(model, src, beam=2, max_len=5, lenpen=0.0, nbest=2)[0]
    assert [h.tokens for h in best] == [[B], [A]]
    assert best[0].logprob == pytest.approx(math.log(0.36))
    assert best[1].logprob == pytest.approx(math.log(0.204))


def test_length_penalty_changes_the_ranking_as_gnmt_defines():
    assert length_penalty(1, 0.0) == 1.0
    assert length_penalty(7, 1.0) == pytest.approx(2.0)
    hyps = beam_search(ToyModel(), torch.tensor([[7, 3]]), beam=3, max_len=5, lenpen=1.0, nbest=3)[0]
    for h in hyps:
        assert h.score == pytest.approx(h.logprob / length_penalty(len(h.tokens) + 1, 1.0))


def test_length_limit_forces_eos():
    hyps = beam_search(ToyModel(), torch.tensor([[7, 3]]), beam=2, max_len=1, lenpen=0.0, nbest=2)[0]
    assert all(len(h.tokens) <= 1 for h in hyps)
    # the forced EOS keeps its probability under the full distribution
    assert {tuple(h.tokens): round(h.logprob, 5) for h in hyps} == {
        (B,): round(math.log(0.4 * 0.9), 5), (A,): round(math.log(0.6 * 0.34), 5)}


MODELS = ["transformer", "rnn", "transformer-rope+qk_norm"]


def small_models():
    torch.manual_seed(0)
    transformer = build_model(TransformerConfig(d_model=32, heads=4, ffn_dim=64, encoder_layers=2,
                                                decoder_layers=2, dropout=0.0), 40, 40, True)
    rnn = build_model(RNNConfig(embed_dim=32, encoder_hidden=24, decoder_hidden=40, attn_dim=16,
                                dropout=0.0), 40, 40, True)
    # rotated self-attention: the cache's keys keep their positions through beam reordering
    rope = build_model(TransformerConfig(d_model=32, heads=4, ffn_dim=64, encoder_layers=2,
                                         decoder_layers=2, dropout=0.0, positions="rope",
                                         qk_norm=True), 40, 40, True)
    return [transformer.eval(), rnn.eval(), rope.eval()]


@pytest.mark.parametrize("index", range(len(MODELS)), ids=MODELS)
def test_beam_one_equals_greedy_token_for_token(index):
    model = small_models()[index]
    src = torch.randint(4, 40, (6, 9), generator=torch.Generator().manual_seed(3))
    src[2, 5:] = 0
    limits = torch.tensor([3, 12, 7, 12, 1, 9])
    greedy = greedy_search(model, src, limits)
    beam = [hyps[0].tokens for hyps in beam_search(model, src, 1, limits)]
    assert beam == greedy
    assert all(len(g) <= n for g, n in zip(greedy, limits.tolist()))


@dataclass
class Replay:
    """The uncached search state: each row's tokens so far and its memory row."""

    tokens: torch.Tensor  # (N, t)
    memory: object  # a row per hypothesis

    def reorder_beams(self, rows):
        return Replay(self.tokens.index_select(0, rows), self.memory.index_select(rows))

    def select(self, rows):
        return self.reorder_beams(rows)


class Uncached(torch.nn.Module):
    """A model's search interface without its cache: every step decodes the whole prefix from a
    fresh state, so no cache, reordering or shared memory row is used."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def encode(self, src):
        return self.model.encode(src)

    def init_state(self, memory):
        return Replay(torch.zeros(memory.states.size(0), 0, dtype=torch.long), memory)

    def decode(self, tgt_in, state):
        tokens = torch.cat([state.tokens, tgt_in], dim=1)  # (N, t) BOS first
        logits, _ = self.model.decode(tokens, self.model.init_state(state.memory))
        return logits[:, -1:], Replay(tokens, state.memory)


@pytest.mark.parametrize("index", range(len(MODELS)), ids=MODELS)
def test_cached_beam_search_equals_uncached_token_for_token(index):
    model = small_models()[index]
    src = torch.randint(4, 40, (5, 8), generator=torch.Generator().manual_seed(7))
    src[1, 3:] = src[3, 6:] = 0
    limits = torch.tensor([4, 11, 2, 9, 6])  # sentences leave the batch at different steps
    cached = beam_search(model, src, 4, limits, nbest=4)
    uncached = beam_search(Uncached(model), src, 4, limits, nbest=4)
    assert [[h.tokens for h in hs] for hs in cached] == [[h.tokens for h in hs] for hs in uncached]
    for hs, us in zip(cached, uncached):
        assert [h.logprob for h in hs] == pytest.approx([u.logprob for u in us], abs=1e-4)


@pytest.mark.parametrize("index", range(len(MODELS)), ids=MODELS)
def test_nbest_lists_are_sorted_and_distinct(index):
    model = small_models()[index]
    src = torch.randint(4, 40, (4, 6), generator=torch.Generator().manual_seed(5))
    for hyps in beam_search(model, src, beam=5, max_len=8, nbest=5):
        assert len(hyps) == 5
        scores = [h.score for h in hyps]
        assert scores == sorted(scores, reverse=True)
        assert len({tuple(h.tokens) for h in hyps}) == 5


def test_beam_keeps_input_order_and_scores_at_least_greedy(trained_run, small_data):
    from translate.loading import load_checkpoint

    loaded = load_checkpoint(trained_run.run_dir)
    ready = Ready(loaded.model, loaded.tokenizer)
    src = [json.loads(line)["en"] for line in (small_data / "test_2016_flickr.jsonl").open()][:40]
    src[7] = ""
    cfg = replace(loaded.recipe.decode, beam=4, lenpen=0.0)
    forward = translate_sentences(ready, src, cfg)
    backward = translate_sentences(ready, src[::-1], cfg)
    assert forward == backward[::-1]
    assert forward[7] == ""
    # with no length penalty the beam finds more probable outputs than greedy
    beam = decode_sentences(ready, src, cfg, with_scores=True)
    greedy = decode_sentences(ready, src, replace(cfg, beam=1), with_scores=True)
    assert sum(b[0].logprob for b in beam) > sum(g[0].logprob for g in greedy)
    assert sum(b[0].logprob > g[0].logprob + 1e-4 for b, g in zip(beam, greedy)) > 0


class Counted(torch.nn.Module):
    """A model's search interface that counts the decoder rows it runs."""

    def __init__(self, model):
        super().__init__()
        self.model, self.rows = model, 0

    def encode(self, src):
        return self.model.encode(src)

    def init_state(self, memory):
        return self.model.init_state(memory)

    def decode(self, tgt_in, state):
        self.rows += tgt_in.size(0)
        return self.model.decode(tgt_in, state)


def k_finished_only(beams, step, limits, nbest, lenpen, early_exit):
    """The plain stopping rule: K finished hypotheses or the length limit, nothing sooner."""
    return [len(beams.finished[s]) >= beams.width or limits[s] < step for s in beams.sentence]


@pytest.mark.parametrize("nbest", [1, 3])
def test_search_stops_sooner_and_without_early_exit_returns_what_k_finished_does(
        trained_run, small_data, monkeypatch, nbest):
    from translate import search
    from translate.loading import load_checkpoint
    from translate.search import output_limits

    loaded = load_checkpoint(trained_run.run_dir)
    lines = [json.loads(line)["en"] for line in (small_data / "validation.jsonl").open()][:48]
    src = pad([torch.tensor(ids) for ids in loaded.tokenizer.encode_src(lines)])
    limits = output_limits(src, 1.5, 10, 200)
    runs = {}
    for name, rule, early_exit in [("k finished", k_finished_only, False),
                                   ("exact", search._done, False), ("early", search._done, True)]:
        monkeypatch.setattr(search, "_done", rule)
        model = Counted(loaded.model)
        runs[name] = (beam_search(model, src, 4, limits, 0.6, nbest, early_exit=early_exit),
                      model.rows)
    (full, full_rows), (exact, exact_rows), (early, early_rows) = runs.values()
    # the exact bound stops sentences sooner (with one hypothesis asked for; the tiny model
    # rarely settles three) and returns the same hypotheses
    assert exact_rows < full_rows if nbest == 1 else exact_rows <= full_rows
    assert [[h.tokens for h in hs] for hs in exact] == [[h.tokens for h in hs] for hs in full]
    for e, f in zip(exact, full):  # scores to rounding: the batch shrinks at other steps
        assert [h.score for h in e] == pytest.approx([h.score for h in f], abs=1e-4)
    # early exit stops sooner still: its hypotheses were found by the longer search too, so
    # none scores above it, and most sentences get the same ones
    assert early_rows < exact_rows if nbest == 1 else early_rows <= exact_rows
    assert all(len(hs) == nbest for hs in early)
    for e, f in zip(early, full):
        assert e[0].score <= f[0].score + 1e-4  # rounding, as above
    same = sum([h.tokens for h in e] == [h.tokens for h in f] for e, f in zip(early, full))
    assert same >= 0.8 * len(full)


def test_overlong_line_is_truncated_with_a_warning(trained_run, caplog):
    from translate.loading import load_checkpoint

    loaded = load_checkpoint(trained_run.run_dir)
    cfg = DecodeConfig(beam=3)
    out = translate_sentences(Ready(loaded.model, loaded.tokenizer), ["a dog " * 2000, "a dog ."],
                              cfg)
    assert len(out) == 2 and out[0]
    assert "over the model's limit" in caplog.text


def test_top_candidates_rule_out_pad_and_bos_and_end_rows_at_their_limit():
    logits = torch.randn(3, 10)
    logits[:, PAD] = logits[:, BOS] = 50.0  # the most likely, yet never output
    log_probs, tokens = top_candidates(logits.clone(), 4, torch.tensor([False, True, False]))
    assert not ({PAD, BOS} & set(tokens.flatten().tolist()))
    full = torch.log_softmax(logits, -1)  # normalized over the whole vocabulary
    torch.testing.assert_close(log_probs[0], full[0].index_select(0, tokens[0]))
    assert tokens[1, 0] == EOS and log_probs[1, 0] == full[1, EOS]
    assert (log_probs[1, 1:] == float("-inf")).all()
