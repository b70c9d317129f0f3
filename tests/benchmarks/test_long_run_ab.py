"""benchmarks/long_run_ab.py: the windows a pause fell into are left out, the speeds grouped by
stretches of steps, and setups that are not two are refused."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
import long_run_ab  # noqa: E402


def test_a_window_a_pause_fell_into_is_left_out(tmp_path):
    """Windows of 10 steps at 2,000 tokens/s; the one at step 30 held a 60-second pause."""
    records = [{"kind": "train", "step": step, "step_tokens": 200.0,
                "tok_per_s": 2000.0 if step != 30 else 2000.0 / 61}
               for step in range(10, 110, 10)]
    records.insert(5, {"kind": "valid", "step": 50, "dev_bleu": 1.0})
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    kept = long_run_ab.windows(tmp_path, log_every=10)
    assert [r["step"] for r in kept] == [10, 20, 40, 50, 60, 70, 80, 90, 100]
    assert all(r["seconds"] == pytest.approx(1.0) for r in kept)


def test_speeds_are_medians_over_stretches_of_steps():
    records = [{"step": s, "tok_per_s": t} for s, t in
               [(10, 100), (20, 300), (30, 200), (40, 50), (50, 70), (60, 1000)]]
    assert long_run_ab.by_bucket(records, 30) == {0: 200, 30: 70}


@pytest.mark.parametrize("args, message", [
    ([], "A and B are the same setup"),
    (["--a", "train.seed=1", "--b", "train.seed=1"], "A and B are the same setup"),
    (["--b-env", "LD_PRELOAD"], "'LD_PRELOAD': an environment variable is KEY=VALUE"),
])
def test_setups_that_compare_nothing_are_refused(args, message):
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks/long_run_ab.py"), "--data",
                          "x", *args], capture_output=True, text=True)
    assert out.returncode == 2 and message in out.stderr
