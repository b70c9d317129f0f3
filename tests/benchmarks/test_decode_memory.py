"""benchmarks/decode_memory.py: a long-lived decoder's memory call after call, each cache setting
in a process of its own, the same calls for each."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
import decode_memory  # noqa: E402

MB = 1 << 20


def test_every_setting_gets_the_same_calls_of_every_size():
    calls = decode_memory.draws(count=50, calls=200, max_batch=8, seed=3)
    assert calls == decode_memory.draws(count=50, calls=200, max_batch=8, seed=3)
    assert {len(c) for c in calls} == set(range(1, 9))
    assert all(len(set(c)) == len(c) and max(c) < 50 for c in calls)


def test_settings_set_both_caches_or_neither(monkeypatch):
    monkeypatch.setenv("LRU_CACHE_CAPACITY", "7")
    assert not set(decode_memory.CACHE_NAMES) & set(decode_memory.cache_env("default"))
    assert [decode_memory.cache_env("64")[n] for n in decode_memory.CACHE_NAMES] == ["64", "64"]
    assert [decode_memory.cache_env("none")[n] for n in decode_memory.CACHE_NAMES] == ["1", "0"]
    with pytest.raises(SystemExit, match="default, none or a number"):
        decode_memory.cache_env("lots")


def test_growth_is_taken_over_the_second_half():
    rows = [{"call": c, "sentences": 4, "seconds": 0.5, "rss": 600 * MB + max(0, c - 50) * MB // 10,
             "free": 10 * MB, "in_use": 100 * MB} for c in range(1, 101)]
    got = decode_memory.summary(rows)
    assert got["growth_mb_per_1000_calls"] == pytest.approx(100, rel=0.05)
    assert got["resident_mb"]["tenth"] == 600 and got["resident_mb"]["peak"] == pytest.approx(605)
    assert got["sentences_per_s"] == 8


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc, glibc's mallinfo2")
def test_a_real_decoder_is_read_after_every_call(trained_run, small_data, tmp_path):
    out = tmp_path / "decode_memory.json"
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks/decode_memory.py"),
                           str(trained_run.run_dir), "--data", str(small_data), "--split", "validation",
                           "--calls", "6", "--max-batch", "4", "--beam", "2",
                           "--precision", "fp32", "--settings", "default,none", "--rounds", "2",
                           "--json", str(out)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["precision"] == "fp32"
    assert [len(result["results"][s]) for s in ("default", "none")] == [2, 2]
    for runs in result["results"].values():
        for run in runs:
            assert [r["call"] for r in run["rows"]] == list(range(1, 7))
            assert all(1 <= r["sentences"] <= 4 and r["rss"] > 50 * MB for r in run["rows"])
    assert result["speed_over_first"]["default"] == 1.0
    assert "none over default:" in done.stdout and "round 2     none" in done.stdout
