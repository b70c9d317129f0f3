"""benchmarks/decode_batches.py: a split decoded at each batch size in a process of its own, the
same translations whatever the size, each size's peak memory read."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks/decode_batches.py"


def test_each_size_decodes_the_split_alike_and_reads_its_peak(trained_run, small_data, tmp_path):
    out = tmp_path / "decode_batches.json"
    done = subprocess.run([sys.executable, str(SCRIPT), str(trained_run.run_dir / "best.pt"),
                           "--data", str(small_data), "--split", "validation", "--sizes",
                           "400,60", "--beam", "2", "--rounds", "1", "--json", str(out)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["beam"] == 2 and report["sentences"] == 100 and report["precision"] == "fp32"
    big, small = (report["runs"][size][0] for size in ("400", "60"))
    assert big["bleu"] > 0 and abs(big["bleu"] - small["bleu"]) < 1.0  # rounding, no more
    for run in (big, small):
        assert 50 < run["loaded_mb"] <= run["peak_mb"] and run["seconds"] > 0
    assert "max_tokens" in done.stdout and "time vs 400" in done.stdout

