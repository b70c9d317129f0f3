"""benchmarks/data_scale.py on a tiny corpus: its synthetic corpus and its measurements."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

from translate.config import TokenizerConfig
from translate.tokenizer import train_sentencepiece

_spec = importlib.util.spec_from_file_location(
    "data_scale", Path(__file__).resolve().parents[1] / "benchmarks" / "data_scale.py")
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)


def test_synthetic_corpus_is_deterministic_and_measured_end_to_end(tmp_path):
    first = bench.make_corpus(tmp_path / "a", 300)
    second = bench.make_corpus(tmp_path / "b", 300)
    text = (first / "train.jsonl").read_text(encoding="utf-8")
    assert text == (second / "train.jsonl").read_text(encoding="utf-8")
    rows = [json.loads(line) for line in text.splitlines()]
    assert len(rows) == 300 and all(r["en"].endswith(".") and r["de"] for r in rows)
    model = tmp_path / "spm.model"
    model.write_bytes(train_sentencepiece([r["en"] for r in rows] + [r["de"] for r in rows],
                                          TokenizerConfig(vocab_size=300)))
    cold = bench.measure("cold", first, model, tmp_path / "cache")
    warm = bench.measure("warm", first, model, tmp_path / "cache")
    spm = bench.measure("spm", first, model, tmp_path / "cache")
    assert cold["pairs"] == warm["pairs"] == spm["pairs"] == 300
    assert len(list((tmp_path / "cache" / "encoded").iterdir())) == 1  # warm reused it
    for result in (cold, warm, spm):
        assert result["peak_rss_gib"] > 0 and result["encode_pairs_per_s"] > 0
