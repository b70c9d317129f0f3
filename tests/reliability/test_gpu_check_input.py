"""The GPU check script and the benchmarks it calls refuse bad arguments at once, in one line,
before any device time is spent: an unknown part, a missing data folder, a length multiple
below 1, a matmul or batch size that is no size, a checkpoint that is not there."""

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def gpu_check(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(REPO / "benchmarks/gpu_check.sh"), *args], cwd=cwd,
                          capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("args, error", [
    (["--parts", "speeed", "DATA", "OUT"], "Error: --parts: 'speeed' is not one of speed,"),
    (["--parts", "speed,,suite;rm", "DATA", "OUT"], "Error: --parts: 'suite;rm' is not one of"),
    (["MISSING", "OUT"], "Error: DATA MISSING is not a folder"),
    (["--dry-run"], "usage: bash benchmarks/gpu_check.sh"),
])
def test_the_gpu_check_refuses_bad_arguments_before_any_work(args, error, small_data, tmp_path):
    args = [str(small_data) if a == "DATA" else str(tmp_path / "out") if a == "OUT" else a
            for a in args]
    result = gpu_check(*args, cwd=tmp_path)
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.startswith(error), result.stderr
    assert not (tmp_path / "out").exists()  # nothing made, nothing run


@pytest.mark.parametrize("script, args", [
    ("train_speed.py", ["--length-multiple", "0"]),
    ("padding.py", ["--data", "DATA", "--multiples", "1,-8"]),
])
def test_benchmarks_refuse_a_length_multiple_below_one(script, args, small_data, tmp_path):
    args = [str(small_data) if a == "DATA" else a for a in args]
    result = subprocess.run([sys.executable, str(REPO / "benchmarks" / script), *args],
                            cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "must be at least 1" in result.stderr.splitlines()[-1]


@pytest.mark.parametrize("script, args, error", [
    ("train_speed.py", ["--matmul-size", "-1"], "--matmul-size must be 0 (the device's) or more"),
    ("decode_batches.py", ["CKPT", "--sizes", "0,100"], "--sizes must be at least 1 each"),
    ("decode_batches.py", ["CKPT", "--sizes", "many"], "--sizes takes whole numbers"),
    ("decode_batches.py", ["MISSING"], "no checkpoint at"),
])
def test_benchmarks_refuse_a_size_that_is_no_size(script, args, error, tmp_path):
    (tmp_path / "best.pt").write_bytes(b"")
    args = ["best.pt" if a == "CKPT" else "nothing.pt" if a == "MISSING" else a for a in args]
    result = subprocess.run([sys.executable, str(REPO / "benchmarks" / script), *args],
                            cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert error in result.stderr.splitlines()[-1], result.stderr
