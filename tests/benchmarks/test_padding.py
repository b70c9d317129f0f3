"""The padding benchmark counts a batch's real and padded token slots as the trainer lays them out."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import numpy as np
import pytest

from helpers.files import read_jsonl
from translate.config import TokenizerConfig
from translate.data.encode import encode_pairs
from translate.tokenizer import Tokenizer

_spec = importlib.util.spec_from_file_location(
    "padding", Path(__file__).resolve().parents[2] / "benchmarks" / "padding.py")
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)


def test_one_batch_counts_real_and_padded_slots():
    src, tgt = np.array([1, 3, 2]), np.array([2, 2, 4])  # one batch: 3 rows of 3 and of 4 slots
    row = bench.padding(src, tgt, max_tokens=1000, width=1, seed=0)
    assert row["batches"] == 1
    assert math.isclose(row["src_real"], 6 / 9) and math.isclose(row["tgt_real"], 8 / 12)
    assert math.isclose(row["weighted_waste"], (1 / 3 + 2 * (1 / 3)) / 3)


def test_wider_target_buckets_sort_sources_inside_them():
    # targets 3 and 4 with sources 9 and 1 alternating: exact target order puts both sources
    # in each two-row batch; buckets of width 2 see one target length and pair like sources
    src, tgt = np.array([9, 1, 9, 1]), np.array([3, 4, 4, 3])
    exact = bench.padding(src, tgt, max_tokens=18, width=1, seed=0)
    wide = bench.padding(src, tgt, max_tokens=18, width=2, seed=0)
    assert exact["batches"] == wide["batches"] == 2
    assert math.isclose(exact["src_real"], 20 / 36) and math.isclose(wide["src_real"], 1.0)
    assert wide["tgt_real"] < exact["tgt_real"] == 1.0


def test_subword_sampling_grows_the_same_batches_pieces_and_padding(small_data):
    rows = read_jsonl(small_data / "train.jsonl", 600)
    en, de = [r["en"] for r in rows], [r["de"] for r in rows]
    tok = Tokenizer.train(en, de, TokenizerConfig(vocab_size=1000))
    pairs = encode_pairs(tok, en, de)
    sharp = bench.sampled_padding(pairs, tok, 10.0, 0, max_tokens=800, max_len=100, seed=0)
    flat = bench.sampled_padding(pairs, tok, 0.1, 0, max_tokens=800, max_len=100, seed=0)
    # alpha 10 draws the one best nearly always: its batches are the one best's
    assert sharp["pieces"] == pytest.approx(1.0, abs=0.005)
    assert sharp["slots"] == pytest.approx(1.0, abs=0.01)
    # alpha 0.1: more pieces, and the batches, formed from the one best lengths, pad more
    assert flat["pieces"] > 1.3
    assert flat["slots"] > flat["pieces"]
    assert flat["weighted_waste"] > sharp["weighted_waste"] + 0.05


def test_rounded_lengths_count_their_slots_and_shapes():
    # lengths 5 and 6, 9 and 12: rounded to 8, two rows of 8 (both sides), one of 16 and 16
    src, tgt = np.array([5, 6, 9]), np.array([6, 5, 12])
    exact = bench.rounded_padding(src, tgt, max_tokens=16, multiple=1, seed=0)
    rounded = bench.rounded_padding(src, tgt, max_tokens=16, multiple=8, seed=0)
    assert exact["batches"] == rounded["batches"] == 2
    assert (exact["shapes"], rounded["shapes"]) == (2, 2)
    assert math.isclose(rounded["src_real"], 20 / 32) and math.isclose(rounded["tgt_real"], 23 / 32)
    assert math.isclose(exact["src_real"], 20 / 21) and math.isclose(exact["tgt_real"], 23 / 24)
