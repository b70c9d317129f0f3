"""Hostile `translate train --seeds`: each refused in one `Error:` line that names the value,
before any run folder is made or any training starts."""

import pytest

from helpers.cli import cli, refused, sets


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
