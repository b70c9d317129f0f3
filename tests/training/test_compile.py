"""train.compile: the compiled model trains as the eager one does, its checkpoints hold plain
parameter names and decode; where torch.compile cannot compile, one Error line says so."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from helpers.training import TINY_OVERRIDES, take_steps, tiny_trainer
from translate.cli import main
from translate.config import ConfigError, load_recipe
from translate.training import Trainer
from translate.training.compilation import engine_name

REPO = Path(__file__).resolve().parents[2]
STEPS = 4


def train_steps(recipe_path, data, run_dir: Path, compile_: bool) -> Trainer:
    """STEPS steps of the tiny Transformer in fp32 with the plain engine, then best.pt saved."""
    trainer = take_steps(tiny_trainer(recipe_path, data, run_dir, "train.precision=fp32",
                                      "train.engine=plain",
                                      f"train.compile={str(compile_).lower()}",
                                      "train.log_every=1", "train.eval_every=0",
                                      "train.save_every=0"), STEPS)
    trainer.save("best.pt")
    trainer.metrics.close()
    return trainer


def logged_losses(run_dir: Path) -> torch.Tensor:
    lines = (run_dir / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
    return torch.tensor([r["loss"] for r in map(json.loads, lines)], dtype=torch.float64)


@pytest.mark.slow  # inductor compiles the forward and backward twice (a second batch shape)
def test_compiled_training_equals_eager_and_its_checkpoint_decodes(recipe_path, small_data,
                                                                   tmp_path):
    eager = train_steps(recipe_path, small_data, tmp_path / "eager", compile_=False)
    compiled = train_steps(recipe_path, small_data, tmp_path / "compiled", compile_=True)
    assert compiled.updater.batch_loss.forward is not compiled.updater.model
    assert len(logged_losses(compiled.run_dir)) == 4
    torch.testing.assert_close(logged_losses(compiled.run_dir), logged_losses(eager.run_dir),
                               rtol=1e-5, atol=0)
    for name, weight in eager.updater.model.state_dict().items():
        if name.endswith("k_proj.bias"):  # softmax ignores it: its gradient is rounding noise,
            continue  # which Adam scales up to steps of the learning rate's size
        torch.testing.assert_close(compiled.updater.model.state_dict()[name], weight, rtol=1e-4,
                                   atol=1e-5, msg=lambda m: f"{name}: {m}")
    saved = torch.load(compiled.run_dir / "best.pt", weights_only=True)
    assert (saved["model"].keys() == saved["train_model"].keys()
            == eager.updater.model.state_dict().keys())
    result = CliRunner().invoke(main, ["decode", str(compiled.run_dir / "best.pt")],
                                input="A man rides a bike.\nTwo dogs play in the snow.\n")
    assert result.exit_code == 0 and "Traceback" not in result.output, result.output


def test_compile_with_the_fast_engine_is_refused(recipe_path):
    cfg = load_recipe(recipe_path, ["train.compile=true", "train.engine=fast"]).train
    with pytest.raises(ConfigError, match="train.compile takes the plain engine"):
        engine_name(cfg)
    assert engine_name(load_recipe(recipe_path, ["train.compile=true"]).train) == "plain"


def test_without_a_cxx_compiler_compile_is_one_error_line(recipe_path, small_data, tmp_path):
    """Inductor builds C++ kernels on the CPU; with no compiler (here: CXX names none, and an
    empty kernel cache) `translate train` stops before training with an Error line."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "CXX": str(tmp_path / "no-such-g++"),
           "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor")}
    sets = [a for item in (*TINY_OVERRIDES, "train.compile=true", "train.max_steps=2")
            for a in ("--set", item)]
    result = subprocess.run(
        [sys.executable, "-m", "translate", "train", str(recipe_path), "--data", str(small_data),
         "--run-dir", str(tmp_path / "run"), "--no-progress", *sets],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr[-3000:]
    (error,) = [line for line in result.stderr.splitlines() if line.startswith("Error:")]
    assert "train.compile: torch.compile cannot compile for the cpu" in error
    assert "no-such-g++" in error and "set train.compile false" in error
