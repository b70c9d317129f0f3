"""`train.size`: the ladder a recipe's recorded curves make, a size applied by name, and auto's
choice, timed on tiny models here, in a run whose recipe.yaml then says what it trained."""

from __future__ import annotations

import hashlib
import json
import logging
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from helpers.training import RECIPES, TINY_OVERRIDES, train_tiny
from translate.config import ConfigError, load_recipe
from translate.models import build_model, count_parameters
from translate.run_folder import recipe_text
from translate.training import promise, sizes
from translate.training.distributed import World
from translate.training.prepare import prepare_data
from translate.training.promise import comparable, find_curve
from translate.training.sizes import choose_size, ladder, sized

RECIPE = RECIPES / "transformer.yaml"
REPO = Path(__file__).resolve().parents[2]
SMALL = ["model.d_model=32", "model.ffn_dim=64", "model.encoder_layers=1",
         "model.decoder_layers=1", "train.max_tokens=800", "train.warmup=20"]
LOW = [[0, 0.0], [100, 2.0], [1000, 5.0]]
HIGH = [[0, 0.0], [100, 20.0], [1000, 40.0]]


def write_rung(folder: Path, size: str, overrides: list[str], points) -> None:
    folder.mkdir(exist_ok=True)
    recipe = load_recipe(RECIPE, [*TINY_OVERRIDES, *overrides])
    (folder / f"{size}.json").write_text(json.dumps({
        "name": f"tiny {size}", "size": size, "parameters": 1000 if size == "small" else 5000,
        "recorded": "a test", "points": points, "validation_steps": 3.0,
        "recipe": comparable(recipe.to_dict())}))


def tiny(*overrides: str):
    return load_recipe(RECIPE, [*TINY_OVERRIDES, *overrides])


def test_the_ladder_is_the_curves_that_differ_in_the_size_keys_alone(tmp_path):
    write_rung(tmp_path, "base", [], HIGH)
    write_rung(tmp_path, "small", SMALL, LOW)
    write_rung(tmp_path, "other", ["train.label_smoothing=0.2"], HIGH)  # another recipe's
    assert [r.size for r in ladder(tiny(), tmp_path)] == ["small", "base"]
    assert [r.size for r in ladder(tiny(*SMALL, "model.dropout=0.2"), tmp_path)] == [
        "small", "base"]  # a size key of its own does not leave the ladder
    assert [r.size for r in ladder(tiny("train.label_smoothing=0.2"), tmp_path)] == ["other"]
    assert ladder(tiny("train.label_smoothing=0.3"), tmp_path) == []
    small = sized(tiny(), ladder(tiny(), tmp_path)[0])
    assert (small.model.d_model, small.model.encoder_layers, small.train.max_tokens,
            small.train.warmup, small.train.size) == (32, 1, 800, 20, "small")
    assert small.model.heads == 4 and small.train.label_smoothing == 0.1  # the rest as it was
    curve, why = find_curve(small, tmp_path)  # the promise reads the rung's own curve
    assert curve is not None and curve.name == "tiny small", why


def test_a_size_is_named_or_auto_with_a_budget_and_a_ladder(tmp_path, small_data):
    write_rung(tmp_path, "base", [], HIGH)
    write_rung(tmp_path, "small", SMALL, LOW)
    cpu = torch.device("cpu")

    def choose(*overrides, folder=tmp_path, world=World()):
        return choose_size(tiny(*overrides), None, cpu, "fp32", world, folder)

    recipe, spent = choose("train.size=small", "model.d_model=128")
    assert (recipe.model.d_model, recipe.train.size, spent) == (32, "small", 0.0)
    with pytest.raises(ConfigError, match=r"train.size big: not a size of this recipe's ladder "
                                          r"\(small, base\); auto picks one for the budget"):
        choose("train.size=big")
    with pytest.raises(ConfigError, match="set train.max_minutes"):
        choose("train.size=auto")
    with pytest.raises(ConfigError, match=r"has 0 recorded size\(s\) \(none is recorded\)"):
        choose("train.size=auto", "train.max_minutes=5", folder=tmp_path / "none")
    with pytest.raises(ConfigError, match="under torchrun name one"):
        choose("train.size=auto", "train.max_minutes=5", world=World(rank=0, size=2))
    # a budget of steps alone: the curve highest at that step, nothing timed
    assert choose("train.size=auto", "train.max_steps=500")[0].train.size == "base"


@pytest.mark.parametrize("small_points, picked", [(HIGH, "small"), (LOW, "base")])
def test_auto_times_each_size_here_and_picks_the_one_its_curve_favours(
        small_points, picked, tmp_path, small_data, caplog):
    """Where the small size's curve is as high as the larger's, its faster steps win; where it
    is far lower, the larger size's fewer steps still win."""
    write_rung(tmp_path, "base", [], HIGH)
    write_rung(tmp_path, "small", SMALL, small_points)
    recipe = tiny("train.size=auto", "train.max_minutes=5", f"data.dataset={small_data}")
    (tmp_path / "run").mkdir()
    data = prepare_data(recipe, tmp_path / "run")
    with caplog.at_level(logging.INFO, logger="translate"):
        chosen, spent = choose_size(recipe, data, torch.device("cpu"), "fp32", World(),
                                    tmp_path)
    assert chosen.train.size == picked and chosen.model.d_model == (32 if picked == "small"
                                                                     else 64)
    assert spent > 0
    said = "\n".join(r.getMessage() for r in caplog.records)
    assert "size auto: 2 sizes timed on this machine" in said and said.endswith(f"-> {picked}")
    small, base = re.findall(r"(\d+) steps a minute, step ([\d,]+)", said)
    assert int(small[0]) > int(base[0])  # the small size's steps are faster here


def test_a_run_sized_by_auto_says_so_in_its_recipe(tmp_path, small_data, monkeypatch):
    """The run's recipe.yaml holds the size it trained, sealed by run.json (so --resume and the
    loaders read the model it is), and the timing's seconds count against the budget."""
    folder = tmp_path / "curves"
    write_rung(folder, "base", [], LOW)
    write_rung(folder, "small", SMALL, HIGH)
    monkeypatch.setattr(promise, "CURVES", folder)
    monkeypatch.setattr(sizes, "TIMED_SECONDS", 0.0)
    run = tmp_path / "run"
    result = train_tiny(RECIPE, [*TINY_OVERRIDES, "train.size=auto", "train.max_minutes=5",
                                 "data.test_splits=[]"], small_data, 3, run)
    assert result.steps == 3
    trained = load_recipe(run / "recipe.yaml")
    assert (trained.train.size, trained.model.d_model, trained.train.max_tokens) == (
        "small", 32, 800)
    assert json.loads((run / "run.json").read_text())["recipe_sha256"] == hashlib.sha256(
        recipe_text(trained, run).encode()).hexdigest()
    first = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()][0]
    assert first["elapsed"] > first["train_seconds"] + 0.5  # the timing is in the budget's clock


def test_the_timing_takes_its_steps_from_the_first_batches(small_data, tmp_path):
    recipe = tiny(f"data.dataset={small_data}")
    data = prepare_data(recipe, tmp_path)  # the tokenizer into tmp_path
    per_minute, per_second, parameters = sizes.time_rung(recipe, data, torch.device("cpu"),
                                                         "fp32")
    assert per_minute > 0 and per_second > 0
    assert parameters == count_parameters(build_model(recipe.model, 1000, 1000, True))


def test_the_ladder_figure_counts_each_sizes_compute(tmp_path):
    """scripts/ladder_figure.py draws the packaged ladder: a step of a larger size costs more."""
    out = tmp_path / "ladder.png"
    subprocess.run([sys.executable, str(REPO / "scripts" / "ladder_figure.py"), "-o", str(out)],
                   check=True, capture_output=True, cwd=REPO)
    figures = json.loads(out.with_suffix(".json").read_text())
    assert [f["size"] for f in figures] == [r.size for r in ladder(load_recipe(RECIPE))]
    per_step = [f["flops_per_step"] for f in figures]
    assert per_step == sorted(per_step) and per_step[0] > 1e9
    assert out.read_bytes().startswith(b"\x89PNG")
