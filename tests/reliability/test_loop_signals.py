"""SIGINT and SIGTERM stop training cleanly: a checkpoint, a message saying how to resume."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from click.testing import CliRunner

from helpers.limits import within
from helpers.training import TINY_OVERRIDES
from translate.checkpoint import read_checkpoint
from translate.cli import main
from translate.training.update import Updater

REPO = Path(__file__).resolve().parents[2]
# No validation and no periodic save: the only checkpoint is the one the signal asks for.
ENDLESS = [*TINY_OVERRIDES, "train.max_steps=100000", "train.eval_every=0", "train.save_every=0",
           "data.test_splits=[]"]


def sets(*items):
    return [arg for item in items for arg in ("--set", item)]


def train_steps(run_dir) -> list[int]:
    path = run_dir / "metrics.jsonl"
    if not path.is_file():
        return []
    lines = path.read_text(encoding="utf-8").splitlines()
    return [r["step"] for r in map(json.loads, lines) if r["kind"] == "train"]


def test_sigterm_to_the_command_saves_and_says_how_to_resume(recipe_path, small_data, tmp_path):
    run = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    seconds = within(starts=60, floor=120)
    proc = subprocess.Popen(
        [sys.executable, "-m", "translate", "train", str(recipe_path), "--data", str(small_data),
         "--run-dir", str(run), "--no-progress", *sets(*ENDLESS)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path)
    deadline = time.monotonic() + seconds
    while not train_steps(run) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=seconds)
    assert proc.returncode == 128 + signal.SIGTERM, err
    step = read_checkpoint(run / "last.pt")["step"]
    assert step >= 10 and step in range(train_steps(run)[-1], train_steps(run)[-1] + 10)
    assert f"SIGTERM received: stopped at step {step} and saved {run / 'last.pt'}" in err
    assert f"resume with: translate train --resume {run}" in err
    assert "Traceback" not in err + out


def test_sigint_saves_mid_window_and_the_run_resumes(monkeypatch, recipe_path, small_data,
                                                     tmp_path):
    real_step = Updater.step

    def ctrl_c_at_step_7(self, batches, tokens, state):
        if state.step == 6:
            os.kill(os.getpid(), signal.SIGINT)  # arrives while the step runs
        return real_step(self, batches, tokens, state)

    monkeypatch.setattr(Updater, "step", ctrl_c_at_step_7)
    run = tmp_path / "run"
    runner = CliRunner()
    result = runner.invoke(main, ["train", str(recipe_path), "--data", str(small_data),
                                  "--run-dir", str(run), "--no-progress", *sets(*ENDLESS)])
    assert result.exit_code == 128 + signal.SIGINT, result.output
    assert f"stopped at step 7 and saved {run / 'last.pt'}" in result.output
    saved = read_checkpoint(run / "last.pt")
    assert saved["step"] == 7 and len(saved["trainer"]["window"]["losses"]) == 7
    monkeypatch.setattr(Updater, "step", real_step)
    result = runner.invoke(main, ["train", "--resume", str(run), "--no-progress",
                                  *sets("train.max_steps=20")])
    assert result.exit_code == 0, result.output
    assert f"resuming from {run / 'last.pt'}: step 7" in result.output
    assert train_steps(run) == [10, 20]
