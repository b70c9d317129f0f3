"""scripts/quickstart.py: what to expect from the chosen budget, read off the recipe's recorded
curve, and after training a few test translations beside their references and what to try next."""

import importlib.util
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("quickstart", REPO / "scripts/quickstart.py")
quickstart = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(quickstart)


def test_the_expectation_comes_from_the_recorded_curve():
    curve = quickstart.recorded_curve()
    assert curve[0] == (0.0, 0.0) and len(curve) >= 10 and curve[-1][0] > 55
    minutes, bleu = curve[3]
    assert quickstart.expected_bleu(minutes) == pytest.approx(bleu)
    middle = (curve[3][0] + curve[4][0]) / 2
    assert quickstart.expected_bleu(middle) == pytest.approx((curve[3][1] + curve[4][1]) / 2)
    assert quickstart.expected_bleu(600) == curve[-1][1]
    said = quickstart.expect(10)
    assert f"expect a dev BLEU of about {quickstart.expected_bleu(10):.0f}" in said
    assert "docs/runs/m30k-transformer-intel-bpe" in said
    short = quickstart.expect(2)
    assert "mostly untrained: expect a BLEU near 0" in short and "about" not in short


def test_after_training_it_shows_translations_beside_references(trained_run, small_data,
                                                                  monkeypatch):
    monkeypatch.setenv("TRANSLATE_DATA", str(small_data))
    shown = quickstart.show(trained_run.run_dir)
    assert shown.count("\n  en   ") == 3 and shown.count("\n  ref  ") == 3
    assert f"translate serve {trained_run.run_dir}" in shown and "docs/tour.md" in shown
