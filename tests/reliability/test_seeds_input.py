"""Hostile `translate train --seeds`: each refused in one `Error:` line that names the value,
before any run folder is made or any training starts."""

import json
import os

import pytest

from helpers.cli import cli, refused, sets
from helpers.training import TINY_OVERRIDES


@pytest.fixture
def train(recipe_path, small_data, tmp_path):
    """`translate train RECIPE --data ... --run-dir TMP/run ARGS...`."""
    return lambda *args: cli("train", recipe_path, "--data", small_data, "--run-dir",
                             tmp_path / "run", "--no-progress", *args)


@pytest.mark.parametrize("seeds, says, code", [
    ("", "give one or more values", 2),
    ("-1", "each at least 0", 2),
    ("1.5", "not a comma-separated list of ints", 2),
    ("one,two", "not a comma-separated list of ints", 2),
    ("1,1", "seed 1 is given 2 times", 1),
    ("2,3,2", "seed 2 is given 2 times", 1),
    (",".join(map(str, range(10_000))), "10000 seeds, at most 32", 1),
    (str(1 << 32), f"{1 << 32} is not a seed (an integer 0..{(1 << 32) - 1})", 1),
])
def test_bad_seed_lists_are_refused_before_training(train, tmp_path, seeds, says, code):
    refused(train("--seeds", seeds), says, code)
    assert list(tmp_path.iterdir()) == []


def test_seeds_with_resume_or_a_seed_of_its_own_are_refused(recipe_path, tmp_path, train):
    refused(cli("train", "--resume", tmp_path / "run", "--seeds", "1,2"),
            "--seeds starts new runs, --resume goes on with one", 2)
    refused(train("--seeds", "1,2", *sets("train.seed=3")), "drop --set train.seed", 2)
    assert list(tmp_path.iterdir()) == []


def test_a_seed_folder_that_exists_is_named_and_nothing_trains(train, tmp_path):
    (tmp_path / "run-seed2").mkdir()
    refused(train("--seeds", "1,2"), f"{tmp_path / 'run-seed2'} exists")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run-seed2"]


def test_seeds_under_torchrun_are_refused(train, tmp_path, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    refused(train("--seeds", "1,2"), "under torchrun train each seed on its own")
    assert list(tmp_path.iterdir()) == []


# tiny and short: a run that is not refused as it should be ends in seconds
TINY = sets(*TINY_OVERRIDES, "train.max_steps=2", "train.eval_every=2",
            "data.test_splits=[test_2016_flickr]")


def contents(folder) -> dict:
    """Every file under `folder` (links as their targets' names), byte for byte."""
    return {str(p.relative_to(folder)): (os.readlink(p) if p.is_symlink() else p.read_bytes())
            for p in sorted(folder.rglob("*")) if p.is_symlink() or p.is_file()}


def an_old_run(folder):
    """A folder whose run.json names a run, and that run's metrics log."""
    folder.mkdir()
    (folder / "run.json").write_text(json.dumps({"run_id": "a" * 32}) + "\n")
    (folder / "metrics.jsonl").write_text('{"kind": "train", "step": 10}\n')


@pytest.mark.parametrize("make, says", [
    ("files without run.json", "has no run.json naming the run its files belong to"),
    ("fifo", "is a FIFO (named pipe); the run writes its own spm.model there"),
    ("foreign checkpoint", "not this folder's run's checkpoint"),
])
def test_overwrite_refuses_a_seed_folder_no_run_may_start_over_in_before_any_trains(
        train, tmp_path, make, says):
    """As a single run's --overwrite refuses it: before the first seed trains or loses its old
    run."""
    an_old_run(tmp_path / "run-seed1")
    second = tmp_path / "run-seed2"
    if make == "files without run.json":
        second.mkdir()
        (second / "train.log").write_text("the user's own log\n")
    elif make == "fifo":
        an_old_run(second)
        os.mkfifo(second / "spm.model")
    else:
        an_old_run(second)
        (second / "best.pt").write_bytes(b"another run's checkpoint")
    before = contents(tmp_path)
    refused(train("--seeds", "1,2", "--overwrite", *TINY), says)
    assert contents(tmp_path) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run-seed1", "run-seed2"]
