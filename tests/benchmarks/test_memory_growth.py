"""benchmarks/memory_growth.py: the heap read after every step of a real run, the growth taken
over the run's second half, the allocations of a profiled window counted by size."""

import collections
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "tests"))
import memory_growth  # noqa: E402
from helpers.training import TINY_OVERRIDES  # noqa: E402

MB = 1 << 20


def test_growth_is_taken_over_the_second_half():
    """Resident memory flat for 10 steps, then 1 MiB a step; the heap's live bytes flat."""
    rows = [{"step": s, "rss": 500 * MB + max(0, s - 10) * MB, "seconds": 0.5, "tokens": 100,
             "shape": [[8, 12, 14 + s % 3]], "held": 400 * MB + max(0, s - 10) * MB,
             "in_use": 200 * MB, "free": 200 * MB + max(0, s - 10) * MB, "free_chunks": 9}
            for s in range(1, 41)]
    got = memory_growth.summary(rows, collections.Counter(), 0)
    assert got["resident_growth_kb_per_step"] == pytest.approx(1024)
    assert got["held_growth_kb_per_step"] == pytest.approx(1024)
    assert got["in_use_growth_kb_per_step"] == 0
    assert got["distinct_batch_shapes"] == 3
    assert got["resident_mb"]["peak"] == pytest.approx(530)


def test_allocations_are_counted_by_size_per_step():
    counted = collections.Counter({("aten::mm", 1 << 20): 6, ("aten::add", 64): 4})
    got = memory_growth.summary([{"step": 1, "rss": MB, "seconds": 1.0, "tokens": 1,
                                  "shape": [[1, 1, 1]]}], counted, profiled=2)["allocations"]
    assert got["per_step"] == 5 and got["distinct_sizes"] == 2 and got["distinct_sizes_64k_up"] == 1
    assert got["top_ops_mb_per_step"] == {"aten::mm": 3.0, "aten::add": pytest.approx(128 / MB)}


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallinfo2, /proc")
def test_a_real_run_reads_the_heap_after_every_step(small_data, tmp_path):
    out = tmp_path / "growth.json"
    sets = [arg for s in TINY_OVERRIDES for arg in ("--set", s)]
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks/memory_growth.py"), "--data",
                           str(small_data), "--steps", "12", "--every", "4",
                           "--profile-steps", "4:6", "--json", str(out), *sets],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(out.read_text())
    assert [r["step"] for r in result["steps"]] == list(range(1, 13))
    assert all(0 < r["in_use"] <= r["held"] < r["rss"] for r in result["steps"])
    assert result["summary"]["allocations"]["per_step"] > 10  # a step allocates its tensors
    assert "step    12: resident" in done.stdout
