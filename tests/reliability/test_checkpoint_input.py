"""Safe loading (no code runs from a checkpoint or recipe) and writes that fail cleanly."""

import os
import pathlib
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from click.testing import CliRunner

from helpers.files import ignore_sigxfsz_and_limit_files
from helpers.training import TINY_OVERRIDES
from translate.checkpoint import read_checkpoint
from translate.cli import main

REPO = Path(__file__).resolve().parents[2]


class TouchOnLoad:
    """Unpickling this creates the file `path`: what a malicious checkpoint would do."""

    def __init__(self, path: Path):
        self.path = path

    def __reduce__(self):
        return pathlib.Path.touch, (self.path,)


def error_lines(output: str) -> list[str]:
    assert "Traceback" not in output
    return [line for line in output.splitlines() if line.startswith("Error:")]


def test_a_checkpoint_that_runs_code_on_loading_is_refused(trained_run, tmp_path):
    marker = tmp_path / "pwned"
    evil = tmp_path / "evil.pt"
    good = torch.load(trained_run.best_checkpoint, weights_only=True)
    torch.save({**good, "model": TouchOnLoad(marker)}, evil)
    result = CliRunner().invoke(main, ["decode", str(evil)], input="A dog runs.\n")
    assert result.exit_code == 1
    [line] = error_lines(result.output)
    assert line.startswith(f"Error: {evil}: refused to load: it holds Python objects, not just "
                           f"tensors, and loading them could run code (it names ")
    assert not marker.exists()
    torch.load(evil, weights_only=False)  # the payload is real: a trusting loader runs it
    assert marker.exists()


def test_a_recipe_that_runs_code_on_loading_is_refused(tmp_path):
    marker = tmp_path / "pwned"
    recipe = tmp_path / "evil.yaml"
    recipe.write_text(f"train: !!python/object/apply:os.mkdir [{marker}]\n", encoding="utf-8")
    result = CliRunner().invoke(main, ["train", str(recipe), "--run-dir", str(tmp_path / "r")])
    assert result.exit_code == 1
    [line] = error_lines(result.output)
    assert line.startswith(f"Error: {recipe}: not valid YAML (could not determine a constructor")
    assert not marker.exists()
    yaml.unsafe_load(recipe.read_text(encoding="utf-8"))  # the payload is real
    assert marker.is_dir()


FULL_DISK_SAVE = """
import sys
from pathlib import Path
from translate.checkpoint import CheckpointError, save_checkpoint
from translate.loading import load_checkpoint
loaded = load_checkpoint(sys.argv[1])
try:
    save_checkpoint(Path(sys.argv[2]), loaded.model, loaded.recipe, loaded.tokenizer, step=2)
except CheckpointError as e:
    print(e)
"""


def test_a_failed_checkpoint_write_keeps_the_previous_one(trained_run, tmp_path):
    target = tmp_path / "last.pt"
    target.write_bytes(trained_run.best_checkpoint.read_bytes())
    step = read_checkpoint(target)["step"]
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", FULL_DISK_SAVE, str(target), str(target)],
                          capture_output=True, text=True, env=env,
                          preexec_fn=ignore_sigxfsz_and_limit_files(100_000))
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"could not write the checkpoint {target} (File too large); the file " \
                          f"is unchanged\n"
    assert read_checkpoint(target)["step"] == step
    assert [p.name for p in tmp_path.iterdir()] == ["last.pt"]  # no temporary file left


def test_an_unwritable_run_folder_fails_before_training(recipe_path, small_data, tmp_path):
    run = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "translate", "train", str(recipe_path), "--data", str(small_data),
         "--run-dir", str(run)], capture_output=True, text=True, env=env,
        preexec_fn=ignore_sigxfsz_and_limit_files(512))
    assert done.returncode == 1
    assert error_lines(done.stderr) == [
        f"Error: cannot write to the run folder {run}: File too large"]
    assert not (run / "recipe.yaml").exists() and not (run / "metrics.jsonl").exists()


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes through folder permissions")
def test_a_read_only_run_folder_fails_before_training(recipe_path, tmp_path):
    run = tmp_path / "run"
    run.mkdir(mode=0o500)
    result = CliRunner().invoke(main, ["train", str(recipe_path), "--run-dir", str(run)])
    assert error_lines(result.output) == [
        f"Error: cannot write to the run folder {run}: Permission denied"]


def test_too_little_disk_for_checkpoints_fails_before_training(monkeypatch, recipe_path,
                                                               small_data, tmp_path):
    import shutil

    import translate.training.checkpoints

    monkeypatch.setattr(translate.training.checkpoints.shutil, "disk_usage",
                        lambda path: shutil._ntuple_diskusage(10**12, 10**12 - 10**5, 10**5))
    run = tmp_path / "run"
    result = CliRunner().invoke(main, [
        "train", str(recipe_path), "--data", str(small_data), "--run-dir", str(run),
        *[a for item in TINY_OVERRIDES for a in ("--set", item)]])
    [line] = error_lines(result.output)
    assert line.startswith(f"Error: only 0.1 MiB free for the run folder {run}; its checkpoints "
                           f"need about ")
    assert not (run / "metrics.jsonl").exists()
