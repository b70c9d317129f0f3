"""benchmarks/data_scale.py on a tiny corpus: its synthetic corpus and its measurements."""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

from translate.config import TokenizerConfig
from translate.tokenizer import train_sentencepiece

_spec = importlib.util.spec_from_file_location(
    "data_scale", Path(__file__).resolve().parents[2] / "benchmarks" / "data_scale.py")
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
    cold = bench.measure(first, model, tmp_path / "cache", num_proc=2)
    warm = bench.measure(first, model, tmp_path / "cache", num_proc=2)
    assert cold["pairs"] == warm["pairs"] == 300 and cold["kept"] == warm["kept"] > 250
    assert len(list((tmp_path / "cache" / "corpora").iterdir())) == 1  # warm reused it
    for result in (cold, warm):
        assert result["peak_rss_gib"] > 0 and result["encode_pairs_per_s"] > 0
    assert warm["seconds"]["encode"] < cold["seconds"]["encode"]
    if shutil.which("spm_encode"):
        text = bench.plain_text(first)
        assert (text / "train.en").read_text(encoding="utf-8").splitlines() == \
            [r["en"] for r in rows]
        assert bench.spm_encode(text, model)["pairs"] == 300
    step = bench.first_step(first, model, tmp_path / "cache", tmp_path / "run")
    assert 0 < step["seconds"]["total"] < 120 and step["peak_rss_gib"] > 0
    assert len(list((tmp_path / "cache" / "corpora").iterdir())) == 1  # training mapped it too
