"""The GPU check script runs end to end on the CPU (`--dry-run`, tiny sizes) and writes every
key of its summary, so a broken script is caught here, before a GPU window is spent on it."""

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

from helpers.limits import within

REPO = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("gpu_summary", REPO / "benchmarks/gpu_summary.py")
gpu_summary = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gpu_summary)
FIGURES = ("device", "multi30k_tok_s", "base_mfu", "big_mfu", "matmul_peak_tflops",
           "gpu_recipe_train_seconds", "gpu_recipe_test_2016_flickr_beam5")


def test_the_dry_run_runs_every_part_and_writes_the_summary(small_data, tmp_path):
    out = tmp_path / "out"
    env = {**os.environ, "PYTHON": sys.executable}
    result = subprocess.run(["bash", str(REPO / "benchmarks/gpu_check.sh"), "--parts",
                             "speed,quality,decode,tests", "--dry-run", str(small_data), str(out)],
                            cwd=tmp_path, env=env, capture_output=True, text=True,
                            timeout=within(starts=150, floor=400))
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    summary = json.loads((out / "summary.json").read_text())
    assert set(gpu_summary.KEYS) <= set(summary)
    for key in FIGURES:
        assert summary[key] is not None, (key, summary["missing"])
    assert summary["base_mfu"] > 0 and summary["gpu_recipe_train_seconds"] > 0
    assert set(summary["missing"]) <= {"decode_beam5_vs_hf", "multi30k_vs_marian"}
    if "decode_beam5_vs_hf" not in summary["missing"]:  # HF generate installed: timed against
        assert summary["decode_beam5_vs_hf"] > 0 and summary["decode_beam5"]["ours"]
    decoded = json.loads((out / "decode.json").read_text())
    assert decoded["sentences"] == 12 and "ours fp32" in decoded["systems"]
    base = json.loads((out / "train_speed-base.json").read_text())
    assert base["loss_chunk"] == 100 and "ours bf16 chunks" in base["systems"]
    assert summary["commit"] and summary["gpu_recipe_bleu_signature"].startswith("nrefs:1")
    profile = (out / "profile.txt").read_text()
    assert "ms a step" in profile and "operator" in profile
    for log in ("train_speed-multi30k", "train_speed-base", "train_speed-big", "profile",
                "quality-train", "decode", "gpu_tests"):
        assert (out / f"{log}.log").is_file(), log
    assert "== gpu_tests: exit 0" in result.stdout
