"""The step profiler ranks real operators of real training steps and writes them as JSON."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "profile_step.py"


def test_the_profile_ranks_the_steps_operators(small_data, tmp_path):
    out = tmp_path / "profile.json"
    result = subprocess.run([sys.executable, str(SCRIPT), "--data", str(small_data),
                             "--max-tokens", "600", "--steps", "2", "--top", "10",
                             "--json", str(out)], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    report = json.loads(out.read_text())
    ops = report["ops"]
    assert len(ops) == 10 and report["step_ms"] > 0
    times = [op["ms_per_step"] for op in ops]
    assert times == sorted(times, reverse=True) and 0 < sum(op["share"] for op in ops) <= 1
    names = {op["op"] for op in ops}
    assert names & {"aten::mm", "aten::addmm"}, names  # a Transformer step is matmuls first
    assert "ms a step" in result.stdout and ops[0]["op"][:40] in result.stdout
