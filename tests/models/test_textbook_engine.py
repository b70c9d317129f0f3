"""The textbook engine runs translate/models/ exactly as written: an edit to the written-out
attention shows in a training run's loss (the exercise the tour walks through), while the other
engines (plain and gpu call PyTorch's fused attention, fast its own modules) compute the same
numbers and ignore the edit."""

import copy
import importlib.util
import json
import logging
from pathlib import Path

import pytest
import torch

from helpers.models import with_weights
from helpers.training import take_steps, tiny_trainer
from translate.config.names import ENGINES
from translate.engine import FAST, PLAIN, TEXTBOOK, resolve_engine
from translate.models import TransformerConfig, build_model
from translate.models import attention
from translate.search import beam_search


def model_pair(**options):
    torch.manual_seed(0)
    plain = build_model(TransformerConfig(d_model=32, heads=4, ffn_dim=64, encoder_layers=2,
                                          decoder_layers=2, dropout=0.0, **options), 40, 40, True)
    return plain, TEXTBOOK.prepare(copy.deepcopy(plain))


@pytest.mark.parametrize("options", [{}, {"norm": "rmsnorm", "activation": "swiglu"},
                                     {"activation": "relu2"}, {"positions": "rope", "qk_norm": True}],
                         ids=["classic", "rmsnorm-swiglu", "relu2", "rope+qk_norm"])
def test_the_textbook_computes_what_the_fused_kernel_computes(options):
    plain, textbook = model_pair(**options)
    assert resolve_engine("textbook", torch.device("cpu")) is TEXTBOOK
    assert all(m.written_out for m in textbook.modules()
               if isinstance(m, attention.MultiHeadAttention))
    src = torch.randint(4, 40, (5, 8), generator=torch.Generator().manual_seed(7))
    src[1, 3:] = 0
    tgt = torch.randint(4, 40, (5, 6), generator=torch.Generator().manual_seed(8))
    for mode in ("train", "eval"):  # training's causal self-attention, then decoding's
        getattr(plain, mode)(), getattr(textbook, mode)()
        torch.testing.assert_close(textbook(src, tgt), plain(src, tgt), atol=1e-5, rtol=0)
    limits = torch.tensor([4, 11, 2, 9, 6])
    found = [[[h.tokens for h in hs] for hs in beam_search(m, src, 4, limits, nbest=2)]
             for m in (plain, textbook)]
    assert found[0] == found[1]


# The exercise, as the tour's figure script runs it: the written-out attention with the
# 1/sqrt(Dh) dropped.
_spec = importlib.util.spec_from_file_location(
    "tour_figures", Path(__file__).resolve().parents[2] / "scripts/tour_figures.py")
tour_figures = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(tour_figures)
unscaled_attention = tour_figures.unscaled_attention


def train_losses(recipe_path, small_data, run_dir, engine: str, steps: int = 3) -> list[float]:
    trainer = take_steps(tiny_trainer(recipe_path, small_data, run_dir, f"train.engine={engine}",
                                      "train.eval_every=0", "train.save_every=0",
                                      "train.log_every=1"), steps)
    trainer.metrics.close()
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [r["loss"] for r in map(json.loads, lines) if r["kind"] == "train"]


# The engines that never run the written-out function in training: fast (what auto picks on a
# CPU), plain and gpu (plain's modules, the GPU's searches).
OTHERS = [name for name in ENGINES if name != "textbook"]


def test_dropping_the_scale_changes_the_textbook_run_and_no_other(recipe_path, small_data,
                                                                  tmp_path, monkeypatch,
                                                                  caplog):
    """Every engine a recipe can name trains to the same losses; with the scale dropped from
    the written-out function, the textbook's losses move and every other engine's stay
    exactly as they were."""
    assert resolve_engine("auto", torch.device("cpu")) is FAST
    caplog.set_level(logging.INFO, logger="translate")
    as_written = {e: train_losses(recipe_path, small_data, tmp_path / e, e) for e in ENGINES}
    for e in OTHERS:
        assert as_written[e] == pytest.approx(as_written["textbook"], rel=1e-5), e
    assert "the textbook engine (translate/models/ exactly as written)" in caplog.text
    for e in OTHERS:
        assert f"the {e} engine (--engine textbook, or train.engine: textbook, runs " \
               "translate/models/ exactly as written)" in caplog.text
    monkeypatch.setattr(attention, "scaled_dot_product_attention", unscaled_attention)
    edited = {e: train_losses(recipe_path, small_data, tmp_path / f"{e}-edited", e)
              for e in ENGINES}
    for e in OTHERS:  # their attention never reads the edit
        assert edited[e] == as_written[e], f"the {e} engine ran the edited function"
    # every step's loss moves by far more than rounding (the engines agree to 1e-5 above)
    assert all(abs(a - b) > 1e-3 for a, b in zip(edited["textbook"], as_written["textbook"]))


def test_attention_returns_its_output_and_records_weights_only_while_listened_to():
    plain, textbook = model_pair()
    x = torch.randn(2, 5, 32)
    for model in (plain, textbook):
        layer = model.encoder_layers[0].self_attn
        out = layer(x)
        assert isinstance(out, torch.Tensor) and out.shape == (2, 5, 32)
        recorded, weights = with_weights(layer, x)
        assert weights.shape == (2, 4, 5, 5)
        torch.testing.assert_close(recorded, out, atol=1e-5, rtol=1e-5)
        assert layer.record_weights is None  # the block over, nothing listens
    assert PLAIN.prepare(copy.deepcopy(textbook)) is not None  # plain leaves modules as they are
