"""`train.pick: dev` on what it may meet at a run's end: a file of the user's where the average
goes, a damaged step checkpoint, too few checkpoints, a wrong word. The run ends with best.pt,
says why, and changes nothing it did not write."""

import logging
import shutil

import pytest
import torch

from helpers.training import TINY_OVERRIDES, train_tiny
from translate.checkpoint import read_checkpoint, write_checkpoint
from translate.config import ConfigError, load_recipe
from translate.training.pick import candidates

@pytest.fixture(scope="module")
def three_steps(small_data, recipe_path, tmp_path_factory):
    """A tiny run of 30 steps that kept step_10, step_20 and step_30 (no pick: the tests pick)."""
    run = tmp_path_factory.mktemp("pick_input") / "run"
    train_tiny(recipe_path, [*TINY_OVERRIDES, "train.eval_every=10", "train.keep_last=3",
                             "data.test_splits=[]"], small_data, 30, run)
    return run


def test_a_file_of_the_users_where_the_average_goes_is_kept_and_best_pt_picked(three_steps,
                                                                               tmp_path, caplog):
    """(A new run refuses a folder that holds one; this file came in while the run trained.)"""
    run = shutil.copytree(three_steps, tmp_path / "run")
    mine = run / "average_last3_raw.pt"
    mine.write_bytes(b"my notes, not a checkpoint\n")
    with caplog.at_level(logging.WARNING, logger="translate"):
        assert candidates(run, 3) == [run / "best.pt"]
    assert mine.read_bytes() == b"my notes, not a checkpoint\n"
    assert "pick: best.pt alone, the average could not be made" in caplog.text
    assert str(mine) in caplog.text


def test_a_damaged_step_checkpoint_leaves_best_pt_alone(three_steps, tmp_path, caplog):
    run = shutil.copytree(three_steps, tmp_path / "run")
    data = read_checkpoint(run / "step_20.pt")
    data["train_model"]["output.weight"][0, 0] = float("nan")
    data.pop("checksum", None)
    (run / "step_20.pt").unlink()
    write_checkpoint(run / "step_20.pt", data)
    with caplog.at_level(logging.WARNING, logger="translate"):
        assert candidates(run, 3) == [run / "best.pt"]
    assert "NaN" in caplog.text and "step_20.pt" in caplog.text
    assert not (run / "average_last3_raw.pt").exists()


def test_fewer_checkpoints_than_keep_last_are_averaged_as_they_are(three_steps, tmp_path):
    run = shutil.copytree(three_steps, tmp_path / "run")
    (run / "step_10.pt").unlink()
    assert candidates(run, 5) == [run / "best.pt", run / "average_last2_raw.pt"]
    assert read_checkpoint(run / "average_last2_raw.pt")["averaged"] == ["step_20.pt", "step_30.pt"]


def test_one_checkpoint_is_no_average(three_steps, tmp_path, caplog):
    run = shutil.copytree(three_steps, tmp_path / "run")
    for n in (10, 20):
        (run / f"step_{n}.pt").unlink()
    with caplog.at_level(logging.INFO, logger="translate"):
        assert candidates(run, 5) == [run / "best.pt"]
    assert "an average needs 2" in caplog.text
    assert sorted(p.name for p in run.glob("average*")) == []


def test_an_unknown_pick_is_refused_by_name(recipe_path):
    with pytest.raises(ConfigError, match=r"train.pick.*'sometimes' is not one of best, dev"):
        load_recipe(recipe_path, ["train.pick=sometimes"])


def test_an_average_from_an_earlier_end_is_replaced(three_steps, tmp_path):
    """A run resumed after its end writes its pick's average again, over its own older one."""
    run = shutil.copytree(three_steps, tmp_path / "run")
    candidates(run, 2)
    first = read_checkpoint(run / "average_last2_raw.pt")["model"]["output.weight"].clone()
    (run / "step_30.pt").unlink()
    candidates(run, 2)
    again = read_checkpoint(run / "average_last2_raw.pt")
    assert again["averaged"] == ["step_10.pt", "step_20.pt"]
    assert not torch.equal(again["model"]["output.weight"], first)
