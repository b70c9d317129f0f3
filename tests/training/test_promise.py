"""The promise `translate train` makes after its first minute: the recorded curve it reads, the
recipes it holds for, the step a budget reaches at a measured speed, and a run that says it."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from helpers.files import read_jsonl
from helpers.training import RECIPES, TINY_OVERRIDES, take_steps, tiny_trainer
from translate.config import load_recipe
from translate.training import promise
from translate.training.promise import (RecordedCurve, SpeedProbe, comparable, find_curve,
                                        make_promise)

REPO = Path(__file__).resolve().parents[2]
RECIPE = RECIPES / "transformer.yaml"
POINTS = [[0, 0.0], [100, 10.0], [300, 30.0], [1000, 40.0]]


def write_curve(folder: Path, recipe, name: str = "the recipe", points=POINTS,
                validation_steps: float = 5.0) -> Path:
    folder.mkdir(exist_ok=True)
    path = folder / f"{name.replace(' ', '_')}.json"
    path.write_text(json.dumps({"name": name, "recorded": "a test", "points": points,
                                "recipe": comparable(recipe.to_dict()),
                                "validation_steps": validation_steps}))
    return path


def test_the_curve_is_read_between_its_points_and_held_past_its_end(tmp_path):
    curve = RecordedCurve.load(write_curve(tmp_path, load_recipe(RECIPE)))
    assert [curve.bleu_at(s) for s in (0, 50, 100, 200, 1000, 5000)] == [0, 5, 10, 20, 40, 40]
    assert curve.last_step == 1000
    for bad in ([[5, 1.0], [10, 2.0]], [[0, 0.0], [10, 2.0], [10, 3.0]]):
        with pytest.raises(ValueError, match="start at \\(0, 0\\) with steps ascending"):
            RecordedCurve.load(write_curve(tmp_path, load_recipe(RECIPE), "bad", bad))


def test_a_curve_holds_across_seeds_precision_and_budget_but_not_a_model_change(tmp_path):
    write_curve(tmp_path, load_recipe(RECIPE))
    for same in (["train.seed=7", "train.precision=fp32", "train.max_minutes=10",
                  "train.eval_every_minutes=2", "decode.beam=4", "data.dataset=/elsewhere"],):
        curve, why = find_curve(load_recipe(RECIPE, same), tmp_path)
        assert curve is not None and curve.name == "the recipe" and why == ""
    curve, why = find_curve(load_recipe(RECIPE, ["model.d_model=128", "train.lr=1e-3"]), tmp_path)
    assert curve is None
    assert why == ("the nearest recorded curve (the recipe) differs in model.d_model: 128 "
                   "(curve: 256); train.lr: 0.001 (curve: 0.003)")
    curve, why = find_curve(load_recipe(RECIPE, ["train.lr_schedule=linear"]), tmp_path)
    assert curve is None and "decays with the budget" in why
    assert find_curve(load_recipe(RECIPE), tmp_path / "none") == (None, "no curve is recorded")


def test_the_budget_reaches_the_measured_steps_less_its_validations(tmp_path):
    recipe = load_recipe(RECIPE, ["train.max_minutes=10", "train.eval_every_minutes=2"])
    curve = RecordedCurve.load(write_curve(tmp_path, recipe))
    # at step 60 after 1 minute, 50 steps a minute: 9 minutes left, 4 validations to come in
    # them and the last one, 5 steps each
    made = make_promise(recipe, curve, "", 60, 60.0, 50.0, 1500.0)
    assert made.steps == 60 + 9 * 50 - 5 * 5 and made.budget == "10 minutes"
    assert made.dev_bleu == pytest.approx(30 + 10 * (485 - 300) / 700)
    assert [(m, s) for m, s, _ in made.longer] == [(30, 60 + 29 * 50 - 15 * 5),
                                                   (60, 60 + 59 * 50 - 30 * 5)]
    assert not made.beyond_curve and made.longer[-1][2] == 40.0
    text = made.message()
    assert text.startswith("this machine makes 50 steps a minute (1,500 target tokens/s): the 10 "
                           "minutes end near step 485, where the recipe's recorded curve gives "
                           "a greedy dev BLEU of about 33; 30 minutes: step 1,435, about 40")
    assert made.record(60)["expected_steps"] == 485
    capped = make_promise(replace(recipe, train=replace(recipe.train, max_steps=200)), curve, "",
                          60, 60.0, 50.0, 1500.0)
    assert (capped.steps, capped.budget, capped.minutes) == (200, "200 steps", 1.0 + 140 / 50)
    far = make_promise(recipe, curve, "", 60, 60.0, 500.0, 1500.0)
    assert far.beyond_curve and "at least 40" in far.message()
    none = make_promise(recipe, None, "no curve is recorded", 60, 60.0, 50.0, 1500.0)
    assert none.dev_bleu is None and none.steps == 60 + 9 * 50
    assert none.message().endswith("the 10 minutes end near step 510 (no dev BLEU to expect: "
                                   "no curve is recorded)")


def test_the_speed_is_measured_after_the_first_steps_once():
    probe = SpeedProbe(budget_minutes=60)
    assert probe.seconds == 60
    assert probe.due(5, 3.0, 100) is None  # settling
    assert probe.due(10, 5.0, 300) is None  # starts here
    assert probe.due(40, 60.0, 900) is None
    assert probe.due(70, 65.0, 1500) == (60.0, 20.0)  # 60 steps and 1,200 tokens in 60 s
    assert probe.due(200, 200.0, 3000) is None  # once
    assert SpeedProbe(budget_minutes=2).seconds == 24  # a fifth of a short budget


def test_a_run_with_a_recorded_curve_says_what_its_budget_buys(small_data, tmp_path,
                                                               monkeypatch, caplog):
    monkeypatch.setattr(promise, "MEASURE_SECONDS", 0.0)
    overrides = ["train.max_minutes=30", "train.eval_every=1000"]
    write_curve(tmp_path / "curves", load_recipe(RECIPE, [*TINY_OVERRIDES, *overrides]))
    monkeypatch.setattr(promise, "CURVES", tmp_path / "curves")
    trainer = tiny_trainer(RECIPE, small_data, tmp_path / "run", *overrides)
    with caplog.at_level("INFO", logger="translate"):
        take_steps(trainer, promise.SETTLE_STEPS + 2)
    trainer.metrics.close()
    [made] = [r for r in read_jsonl(tmp_path / "run" / "metrics.jsonl") if r["kind"] == "promise"]
    assert made["step"] == promise.SETTLE_STEPS + 1 and made["steps_per_minute"] > 0
    assert made["budget"] == "30 minutes" and made["curve"] == "the recipe"
    assert 0 < made["expected_dev_bleu"] <= 40.0
    [said] = [r.getMessage() for r in caplog.records if "steps a minute" in r.getMessage()]
    assert "where the recipe's recorded curve gives a greedy dev BLEU of" in said


def test_the_packaged_curve_is_what_its_runs_record(tmp_path):
    """Each curve in translate/training/curves/ is scripts/record_curve.py's output from the run
    logs its `recorded` names (kept under docs/runs/), so neither drifts from the other."""
    for path in sorted(promise.CURVES.glob("*.json")):
        curve = json.loads(path.read_text())
        runs = [REPO / run for run in curve["runs"]]
        out = tmp_path / path.name
        subprocess.run([sys.executable, str(REPO / "scripts" / "record_curve.py"), *map(str, runs),
                        "--name", curve["name"], "--recorded", curve["recorded"], "-o", str(out),
                        *(["--size", curve["size"]] if "size" in curve else [])],
                       check=True, capture_output=True, cwd=REPO)
        assert json.loads(out.read_text()) == curve, path.name
    assert find_curve(load_recipe(RECIPE), promise.CURVES)[0] is not None, \
        "no curve recorded for the default recipe"
