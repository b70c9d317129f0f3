"""The CTranslate2 agreement benchmark's log-probability check: zero against a model that is
converted exactly, large against one whose conversion is broken on purpose."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

from helpers.files import read_jsonl
from helpers.models import untrained_model
from translate.checkpoint import save_checkpoint
from translate.loading import load_checkpoint
from translate.export import export

ctranslate2 = pytest.importorskip("ctranslate2", reason="the export extra is not installed")

_spec = importlib.util.spec_from_file_location(
    "export_equal", Path(__file__).resolve().parents[2] / "benchmarks" / "export_equal.py")
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)


def test_the_recipes_model_scores_as_ours_and_a_broken_conversion_does_not(small_data, tmp_path):
    cfg, tokenizer, model = untrained_model(small_data, 2, (
        "model.positions=rope", "model.qk_norm=true", "model.cross_query_norm=width"))
    with torch.no_grad():  # scales away from 1, as training leaves them
        for name, weight in model.named_parameters():
            if name.endswith(("q_norm.weight", "k_norm.weight")):
                weight.uniform_(0.5, 2.0)
    save_checkpoint(tmp_path / "m.pt", model, cfg, tokenizer, 1)
    loaded = load_checkpoint(tmp_path / "m.pt")
    rows = read_jsonl(small_data / "test_2016_flickr.jsonl", 40)
    src, ref = [r["en"] for r in rows], [r["de"] for r in rows]
    folder = export(tmp_path / "m.pt", "ctranslate2", tmp_path / "ct2").out
    translator = ctranslate2.Translator(str(folder), "cpu", intra_threads=1)
    assert bench.logprob_difference(translator, loaded, src, ref, batch_size=16) < 1e-4
    with torch.no_grad():  # ours changed after the export: the check must see it
        next(w for name, w in loaded.model.named_parameters()
             if name.endswith("cross_attn.q_norm.weight")).mul_(3.0)
    assert bench.logprob_difference(translator, loaded, src, ref, batch_size=16) > 1e-2
