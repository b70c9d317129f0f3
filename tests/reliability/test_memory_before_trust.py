"""Memory before trust: a small checkpoint that declares a huge model is refused before the model
takes memory; a checkpoint that holds no training state is skipped by --resume with a warning
naming what it lacks; a dropout near 1 trains instead of dividing by zero."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import torch
from click.testing import CliRunner

from translate.checkpoint import read_checkpoint, write_checkpoint
from translate.cli import main
from translate.fast.layers import ByteDropout

REPO = Path(__file__).resolve().parents[2]
# The peak of this process's own memory: VmHWM (ru_maxrss would carry over the peak of the
# forked test process from before exec).
PEAK = """
import sys
from translate.checkpoint import CheckpointError
from translate.loading import load_checkpoint
try:
    load_checkpoint(sys.argv[1])
    print("loaded")
except CheckpointError as e:
    print("refused:", e)
with open("/proc/self/status") as f:
    print("peak MiB", next(int(l.split()[1]) for l in f if l.startswith("VmHWM")) // 1024)
"""


def test_a_small_file_declaring_a_huge_model_is_refused_before_it_is_built(trained_run,
                                                                          tmp_path):
    """1.5G parameters (6 GB of fp32 weights, which fits this machine) declared in a 1 MB file:
    refused by comparing shapes on the meta device, at the memory the toolkit takes anyway."""
    data = read_checkpoint(trained_run.best_checkpoint)
    data["recipe"]["model"].update(d_model=4096, ffn_dim=16384, encoder_layers=6,
                                   decoder_layers=6)
    crafted = tmp_path / "crafted.pt"
    write_checkpoint(crafted, data)
    assert crafted.stat().st_size < 5e6
    out = subprocess.run([sys.executable, "-c", PEAK, str(crafted)], cwd=REPO,
                         capture_output=True, text=True, timeout=300).stdout
    assert "refused:" in out and "weights do not fit the recipe's transformer model" in out, out
    peak = int(out.split("peak MiB")[1])
    assert peak < 1500, out  # the model's own weights would be 6,000 MiB


def test_resume_skips_a_checkpoint_without_training_state_naming_what_it_lacks(trained_run,
                                                                              tmp_path):
    """As for a damaged file: a warning names the file and the missing part, the run resumes
    from the newest checkpoint before it, and the file stays as it was."""
    run = shutil.copytree(trained_run.run_dir, tmp_path / "run")
    data = read_checkpoint(run / "last.pt")  # the training state (step_N.pt: weights alone)
    newest = data["step"]
    cases = {"trainer.epoch": {**data, "trainer": {}}, "trainer": {**data, "trainer": [1]},
             "optimizer": {k: v for k, v in data.items() if k != "optimizer"}}
    for missing, broken in cases.items():
        broken_path, end = run / f"step_{newest + 1}.pt", newest + 3
        write_checkpoint(broken_path, {**broken, "step": newest + 1})  # named as it holds
        kept = broken_path.read_bytes()
        result = CliRunner().invoke(main, ["train", "--resume", str(run), "--no-progress",
                                           "--set", f"train.max_steps={end}"])
        assert result.exit_code == 0, result.output
        assert (f"skipping {broken_path}: it holds no {missing} to resume from"
                in result.output), result.output
        assert f"resuming from {run / 'last.pt'}: step {newest}" in result.output
        assert "Traceback" not in result.output and broken_path.read_bytes() == kept
        assert read_checkpoint(run / f"step_{end}.pt")["step"] == end
        broken_path.unlink()
        newest = end
    assert json.loads((run / "run.json").read_text())["run_id"]


def test_a_dropout_near_one_drops_nearly_everything_without_dividing_by_zero():
    torch.manual_seed(0)
    x = torch.ones(100_000)
    for p in (0.999, 0.9995, 0.5):
        out = ByteDropout(p).train()(x)
        kept = (out != 0).float().mean().item()
        assert abs(kept - (1 - p)) < 0.01 + 3 * (1 - p), (p, kept)
        assert torch.isfinite(out).all() and abs(out.mean().item() - 1) < 0.5, p
