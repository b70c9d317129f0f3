"""Resume goes on only with what it can prove is its own run: a folder without run.json is
refused unless adopted, counters no run reaches are refused by name, a change in the number of
processes is said with what it does to the batch; recipes give each key once; odd step names
are no step checkpoints."""

import json
import logging
import shutil
from pathlib import Path

import pytest
import torch

from helpers.cli import cli, refused, sets
from helpers.training import TINY_OVERRIDES
from translate.checkpoint import read_checkpoint, write_checkpoint

SHORT = [*TINY_OVERRIDES, "train.eval_every=10", "train.log_every=5", "train.keep_last=3",
         "data.test_splits=[test_2016_flickr]"]


def contents(folder: Path) -> dict:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())
            if p.is_file() and p.name != ".lock"}


@pytest.fixture(scope="module")
def short_run(recipe_path, small_data, tmp_path_factory):
    """20 steps: step_10.pt, step_20.pt, best.pt, last.pt."""
    run = tmp_path_factory.mktemp("short") / "run"
    result = cli("train", recipe_path, "--data", small_data, "--run-dir", run, "--no-progress",
                 *sets(*SHORT, "train.max_steps=20"))
    assert result.exit_code == 0, result.output
    return run


@pytest.fixture
def run(short_run, tmp_path):
    return Path(shutil.copytree(short_run, tmp_path / "run"))


def own_id(run: Path) -> str:
    return json.loads((run / "run.json").read_text())["run_id"]


# -- no run.json: refused unless adopted ----------------------------------------------------------

def test_a_folder_without_run_json_is_refused_naming_adopt(run):
    theirs = own_id(run)
    (run / "run.json").unlink()
    before = contents(run)
    refused(cli("train", "--resume", run, "--no-progress", *sets("train.max_steps=25")),
            f"has no run.json naming its run, so nothing shows that last.pt (it says run "
            f"{theirs}) is this folder's run's; if it is, resume with --adopt")
    assert contents(run) == before


def test_another_runs_last_pt_in_a_folder_without_run_json_is_not_carried_on(run, tmp_path,
                                                                            short_run):
    """The folder's run.json is gone and another run's last.pt sits in it: refused, as a
    resume cannot tell whose it is."""
    other = read_checkpoint(run / "last.pt")
    write_checkpoint(run / "last.pt", {**other, "run_id": "f" * 32})
    (run / "run.json").unlink()
    before = contents(run)
    refused(cli("train", "--resume", run, "--no-progress", *sets("train.max_steps=25")),
            f"(it says run {'f' * 32})")
    assert contents(run) == before


def test_adopt_resumes_and_writes_run_json_from_the_checkpoint(run):
    theirs = own_id(run)
    (run / "run.json").unlink()
    result = cli("train", "--resume", run, "--adopt", "--no-progress",
                 *sets("train.max_steps=25"))
    assert result.exit_code == 0, result.output
    identity = json.loads((run / "run.json").read_text())
    assert identity["run_id"] == theirs and "adopted" in identity
    assert read_checkpoint(run / "last.pt")["step"] == 25


def test_adopt_is_refused_without_resume(recipe_path, small_data, tmp_path):
    refused(cli("train", recipe_path, "--data", small_data, "--run-dir", tmp_path / "r",
                "--adopt"), "--adopt goes with --resume RUN_DIR", code=2)


# -- counters no run reaches ----------------------------------------------------------------------

def first_float(tensors: dict) -> torch.Tensor:
    """The first floating-point tensor of a (nested) dict, to write a NaN into."""
    for value in tensors.values():
        found = first_float(value) if isinstance(value, dict) else value
        if isinstance(found, torch.Tensor) and found.is_floating_point() and found.numel() > 1:
            return found
    return None


@pytest.mark.parametrize("change, says", [
    (lambda d: d.update(step=-5), "its step is -5, not a count a run reaches"),
    (lambda d: d["trainer"].update(epoch=-1), "its trainer.epoch is -1"),
    (lambda d: d["trainer"].update(position=-2), "its trainer.position is -2"),
    (lambda d: d["trainer"].update(position="3"), "its trainer.position is '3'"),
    (lambda d: d["trainer"].update(bad_evals=1.5), "its trainer.bad_evals is 1.5"),
    (lambda d: d["trainer"].update(bad_losses=True), "its trainer.bad_losses is True"),
    (lambda d: d["trainer"].update(elapsed=-60.0), "its trainer.elapsed is -60.0, outside"),
    (lambda d: d["trainer"].update(elapsed=float("nan")), "its trainer.elapsed is nan"),
    (lambda d: d["trainer"].update(train_seconds="1"), "its trainer.train_seconds is '1'"),
    (lambda d: d["trainer"].update(best_bleu=250.0), "its trainer.best_bleu is 250.0, outside"),
    (lambda d: d["trainer"].update(best_bleu=-7.0), "its trainer.best_bleu is -7.0"),
    (lambda d: d["trainer"].update(warmup_end=1.5), "its trainer.warmup_end is 1.5, outside"),
    (lambda d: d["trainer"].update(warmup_end="0.2"), "its trainer.warmup_end is '0.2'"),
    (lambda d: d.update(step=0) or d["trainer"].update(epoch=9), "it is at step 0 but in epoch 9"),
    (lambda d: d["trainer"].update(elapsed=float("inf")), "its trainer.elapsed is inf, outside"),
    (lambda d: d["trainer"].update(train_seconds=float("inf")), "its trainer.train_seconds is inf, outside"),
    (lambda d: first_float(d["model"]).fill_(float("nan")), "its weight "),
    (lambda d: first_float(d.get("train_model", d["model"])).fill_(float("inf")), "its weight "),
    (lambda d: first_float(d["optimizer"]["state"]).fill_(float("nan")),
     "its optimizer.state."),
])
def test_a_crafted_last_pt_with_impossible_counters_is_refused_by_name(run, change, says):
    data = read_checkpoint(run / "last.pt")
    change(data)
    write_checkpoint(run / "last.pt", data)
    before = contents(run)
    refused(cli("train", "--resume", run, "--no-progress", *sets("train.max_steps=25")),
            f"last.pt: {says}")
    assert contents(run) == before


def test_a_change_in_the_number_of_processes_is_said_with_its_effect(run, caplog):
    data = read_checkpoint(run / "last.pt")
    write_checkpoint(run / "last.pt", {**data, "world_size": 2})  # as torchrun with 2 wrote it
    with caplog.at_level(logging.WARNING, logger="translate"):
        result = cli("train", "--resume", run, "--no-progress", *sets("train.max_steps=25"))
    assert result.exit_code == 0, result.output
    said = [r.getMessage() for r in caplog.records if "process(es)" in r.getMessage()]
    assert len(said) == 1 and "trained on 2 process(es) and goes on with 1" in said[0]
    assert "takes 1 batch(es) of train.max_tokens instead of 2 (0.5x the tokens" in said[0]
    assert "torchrun --nproc_per_node 2" in said[0]
    assert read_checkpoint(run / "last.pt")["world_size"] == 1


# -- recipes give each key once -------------------------------------------------------------------

@pytest.mark.parametrize("text, says", [
    ("train:\n  lr: 0.1\nmodel:\n  arch: rnn\ntrain:\n  max_steps: 3\n",
     "the key 'train' is given twice in one mapping (lines 1 and 5)"),
    ("model:\n  d_model: 64\n  d_model: 128\n", "the key 'd_model' is given twice"),
    ("data:\n  splits: {dev: a, dev: b}\n", "the key 'dev' is given twice"),
    ("train:\n  lr: 1\n  \"lr\": 2\n", "the key 'lr' is given twice"),
])
def test_a_recipe_that_gives_a_key_twice_is_refused_by_name(tmp_path, text, says):
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(text)
    refused(cli("train", recipe, "--run-dir", tmp_path / "run"), f"{recipe}: {says}")
    assert not (tmp_path / "run").exists()


def test_an_override_value_that_gives_a_key_twice_is_refused(recipe_path, tmp_path):
    refused(cli("train", recipe_path, "--run-dir", tmp_path / "run",
                "--set", "data.splits={dev: validation, dev: test}"),
            "override data.splits: the key 'dev' is given twice")


def test_merge_keys_are_not_duplicates(tmp_path):
    from translate.yaml_limits import safe_load

    assert safe_load("base: &b {x: 1, y: 2}\nmine:\n  <<: *b\n  y: 3\n", "t") == \
        {"base": {"x": 1, "y": 2}, "mine": {"x": 1, "y": 3}}


# -- step names -----------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["step_².pt", "step_٣.pt", "step_-4.pt", "step_ 7.pt",
                                  "step_1e3.pt", "step_0x10.pt"])
def test_a_file_named_like_a_step_with_other_characters_is_no_step_checkpoint(run, tmp_path,
                                                                            name):
    shutil.copyfile(run / "step_10.pt", run / name)
    result = cli("average", run, "--last", 2, "-o", tmp_path / "average.pt")
    assert result.exit_code == 0, result.output
    assert read_checkpoint(tmp_path / "average.pt")["averaged"] == ["step_10.pt", "step_20.pt"]
    result = cli("train", "--resume", run, "--no-progress", *sets("train.max_steps=25"))
    assert result.exit_code == 0, result.output
    assert (run / name).read_bytes() == (run / "step_10.pt").read_bytes()


@pytest.mark.parametrize("name", ["metrics.jsonl", "train.log", "test_2016_flickr.hyp.de"])
@pytest.mark.parametrize("make", ["fifo", "link"])
def test_resume_refuses_a_log_that_is_a_fifo_or_a_link(run, tmp_path, name, make):
    """A resumed run appends to its log and metrics and rewrites its test translations: through
    a link they would land in another file, and a FIFO would block the run."""
    import os

    target = tmp_path / "elsewhere.txt"
    target.write_text("the user's own lines\n")
    (run / name).unlink(missing_ok=True)
    if make == "fifo":
        os.mkfifo(run / name)
    else:
        (run / name).symlink_to(target)
    refused(cli("train", "--resume", run, "--no-progress", *sets("train.max_steps=25")),
            f"the run writes its own {name} there")
    assert target.read_text() == "the user's own lines\n"


@pytest.fixture
def read_only(run, tmp_path):
    """The run seen through a read-only mount where this process may mount (root), else with
    its folder's write permission taken away (which root would write through)."""
    import os
    import subprocess

    if os.geteuid() != 0:
        run.chmod(0o500)
        yield run
        run.chmod(0o700)
        return
    view = tmp_path / "read_only"
    view.mkdir()
    mounted = subprocess.run(["mount", "--bind", str(run), str(view)], capture_output=True)
    if mounted.returncode != 0 or subprocess.run(
            ["mount", "-o", "remount,ro,bind", str(view)], capture_output=True).returncode:
        subprocess.run(["umount", str(view)], capture_output=True)
        pytest.skip("root here cannot make a read-only mount")
    yield view
    subprocess.run(["umount", "-l", str(view)], check=False)


def test_a_read_only_run_folder_fails_to_resume_with_one_line(read_only):
    before = contents(read_only)
    result = cli("train", "--resume", read_only, "--no-progress", *sets("train.max_steps=25"))
    refused(result, f"cannot write to the run folder {read_only}")
    assert result.exit_code == 1 and contents(read_only) == before
