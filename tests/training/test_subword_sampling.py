"""Subword regularization: training pairs segmented afresh by sampling each time they are batched."""

import json
import re

import numpy as np
import pytest

from helpers.files import read_jsonl
from helpers.training import TINY_OVERRIDES
from translate.config import ConfigError, TokenizerConfig, load_recipe
from translate.tokenizer import SubwordSampler, Tokenizer
from translate.tokens import EOS
from translate.training import train


@pytest.fixture(scope="module")
def texts(small_data):
    rows = read_jsonl(small_data / "train.jsonl", 2000)
    return [r["en"] for r in rows], [r["de"] for r in rows]


def one_best(tok: Tokenizer, en: list[str], de: list[str]):
    return ([np.array(ids) for ids in tok.encode_src(en)],
            [np.array(ids) for ids in tok.encode_tgt(de)])


@pytest.mark.parametrize("model_type, alpha", [("unigram", 0.1), ("bpe", 0.1)])
def test_sampler_draws_other_segmentations_of_the_same_text(texts, model_type, alpha):
    en, de = texts
    tok = Tokenizer.train(en, de, TokenizerConfig(vocab_size=1000, model_type=model_type))
    src, tgt = one_best(tok, en[:200], de[:200])
    sampler = SubwordSampler(tok, alpha)
    drawn_src, drawn_tgt = sampler(src, tgt)
    for best, drawn in ((src, drawn_src), (tgt, drawn_tgt)):
        assert all(ids[-1] == EOS and EOS not in ids[:-1] for ids in drawn)
        # the same text: decoding a drawn segmentation gives the one best's text back
        assert tok.decode_tgt(drawn) == tok.decode_tgt([b.tolist() for b in best])
        changed = sum(d != b.tolist() for d, b in zip(drawn, best))
        assert changed >= 100, changed  # most sentences of a 1000-piece vocabulary
        longer = sum(map(len, drawn)) / sum(map(len, best))
        assert 1.02 < longer < 3.0, longer  # smaller pieces on average
    assert sampler(src, tgt)[1] != drawn_tgt  # drawn afresh at every call


def test_length_ratio_measures_how_much_smaller_the_drawn_pieces_are(texts):
    en, de = texts
    tok = Tokenizer.train(en, de, TokenizerConfig(vocab_size=1000))
    src, tgt = one_best(tok, en[:500], de[:500])
    ratios = [SubwordSampler(tok, alpha).length_ratio(src, tgt) for alpha in (0.1, 0.3, 1.0, 10.0)]
    # a smaller alpha flattens the distribution: more, smaller pieces; a large one keeps the best
    assert 1.4 < ratios[0] and ratios[0] > ratios[1] + 0.2 > ratios[2] + 0.2, ratios
    assert ratios[3] == pytest.approx(1.0, abs=0.002), ratios
    drawn_src, drawn_tgt = SubwordSampler(tok, 0.1)(src, tgt)
    by_hand = (sum(map(len, drawn_src)) + sum(map(len, drawn_tgt))) / (
        sum(map(len, src)) + sum(map(len, tgt)))
    assert by_hand == pytest.approx(ratios[0], abs=0.05)  # draws differ; their sizes hardly


def test_sampler_keeps_the_one_best_when_it_cannot_sample(texts):
    en, de = texts
    tok = Tokenizer.train(en, de, TokenizerConfig(vocab_size=1000))
    unknown = "Ein Hund läuft ☃ über 東京 die Wiese."
    src, tgt = one_best(tok, [unknown] + en[:100], [unknown] + de[:100])
    assert 1 in src[0]  # the text holds characters the vocabulary lacks (<unk>)
    drawn_src, drawn_tgt = SubwordSampler(tok, 0.1)(src, tgt)
    assert drawn_src[0] == src[0].tolist() and drawn_tgt[0] == tgt[0].tolist()
    # alpha 0.1 over all segmentations draws about twice the one best's pieces: under a limit
    # of the median one best's length, most sentences keep their one best
    limit = int(np.median([len(t) for t in tgt]))
    best, free = tgt[1:], drawn_tgt[1:]
    limited = SubwordSampler(tok, 0.1, max_len=limit)(src, tgt)[1][1:]
    assert all(d == b.tolist() or len(d) <= limit for b, d in zip(best, limited))
    kept = sum(d == b.tolist() for b, d in zip(best, limited))
    assert kept > 20 + sum(d == b.tolist() for b, d in zip(best, free)), kept


@pytest.mark.parametrize("change, message", [
    (["tokenizer.model_type=char", "tokenizer.sampling_alpha=0.1"], "one segmentation only"),
    (["tokenizer.model_type=bpe", "tokenizer.sampling_alpha=1.0"], "probability of dropping"),
    (["tokenizer.model_type=bpe", "tokenizer.sampling_alpha=0.1", "tokenizer.sampling_nbest=8"],
     "only unigram models"),
    (["tokenizer.model_type=unigram", "tokenizer.sampling_alpha=0.1",
      "tokenizer.sampling_nbest=1"], "one best segmentation"),
    (["tokenizer.sampling_alpha=-0.1"], "must not be negative"),
    (["tokenizer.sampling_alpha=0.1", "tokenizer.sampling_nbest=-1"], "must not be negative"),
    (["tokenizer.sampling_alpha=lots"], "expected a number"),
])
def test_bad_sampling_settings_are_refused_with_the_reason(recipe_path, change, message):
    with pytest.raises(ConfigError, match=message):
        load_recipe(recipe_path, change)


SAMPLED = [*TINY_OVERRIDES, "tokenizer.sampling_alpha=0.1", "train.max_tokens=4000",
           "train.eval_every=0", "train.log_every=4", "data.test_splits=[]"]
STEPS = 24


def train_records(run_dir) -> list[dict]:
    lines = (run_dir / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
    return [r for r in map(json.loads, lines) if r["kind"] == "train"]


def run(recipe_path, data, run_dir, overrides=SAMPLED):
    cfg = load_recipe(recipe_path, [*overrides, f"data.dataset={data}", f"train.max_steps={STEPS}"])
    return train(cfg, run_dir, device="cpu", progress=False).run_dir


def test_a_sampled_run_learns_on_more_and_smaller_pieces(recipe_path, small_data, tmp_path):
    sampled = train_records(run(recipe_path, small_data, tmp_path / "sampled"))
    plain = train_records(run(recipe_path, small_data, tmp_path / "one_best",
                              [o for o in SAMPLED if "sampling" not in o]))
    assert sampled[-1]["loss"] < sampled[0]["loss"] - 1.0  # it learns
    log = (tmp_path / "sampled" / "train.log").read_text(encoding="utf-8")
    ratio = float(re.search(r"subword sampling: ([0-9.]+) pieces drawn per piece", log)[1])
    assert 1.1 < ratio < 3.0, ratio  # alpha 0.1: much smaller pieces
    # the same batches of pairs, segmented into more, smaller pieces: more target tokens
    for ours, theirs in zip(sampled, plain):
        assert ours["step_tokens"] > theirs["step_tokens"] * 1.1
