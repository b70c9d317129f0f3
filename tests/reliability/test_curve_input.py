"""`translate curve --reach` on hostile thresholds and metrics logs: one clear line each."""

import json
import os

import pytest
from click.testing import CliRunner

from translate.cli import main


@pytest.fixture
def run(tmp_path):
    folder = tmp_path / "run"
    folder.mkdir()
    record = {"kind": "valid", "step": 100, "elapsed": 60.0, "dev_bleu": 30.0}
    (folder / "metrics.jsonl").write_text(json.dumps(record) + "\n")
    return folder


@pytest.mark.parametrize("reach", ["-1", "100.5", "nan", "30,NaN", "thirty", "", ",", "inf"])
def test_a_bad_threshold_is_one_usage_line_naming_reach(run, tmp_path, reach):
    out = tmp_path / "curve.png"
    result = CliRunner().invoke(main, ["curve", str(run), "--reach", reach, "-o", str(out)])
    assert result.exit_code == 2
    errors = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and "'--reach'" in errors[0], result.output
    assert not out.exists()


@pytest.mark.parametrize("field, value", [("dev_bleu", "38.0"), ("elapsed", None),
                                          ("elapsed", [1]), ("dev_bleu", True)])
def test_a_non_number_in_the_log_names_the_file_and_line(run, tmp_path, field, value):
    log = run / "metrics.jsonl"
    bad = {"kind": "valid", "step": 200, "elapsed": 120.0, "dev_bleu": 31.0, field: value}
    log.write_text(log.read_text() + json.dumps(bad) + "\n")
    out = tmp_path / "curve.png"
    result = CliRunner().invoke(main, ["curve", str(run), "--reach", "30", "-o", str(out)])
    assert result.exit_code == 1
    assert result.output == (f"Error: {log}: line 2: its valid record has {value!r} under "
                             f"'{field}', not a number\n")
    assert not out.exists()


def contents(folder):
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


@pytest.mark.parametrize("field, value, says", [
    ("dev_bleu", "Infinity", "not a BLEU from 0 to 100"),
    ("dev_bleu", "NaN", "not a BLEU from 0 to 100"),
    ("dev_bleu", "-0.5", "not a BLEU from 0 to 100"),
    ("dev_bleu", "150", "not a BLEU from 0 to 100"),
    ("test_2016_flickr_bleu", "101.0", "not a BLEU from 0 to 100"),
    ("elapsed", "-60.0", "not a time in seconds (finite, not negative)"),
    ("elapsed", "NaN", "not a time in seconds (finite, not negative)"),
    ("elapsed", "Infinity", "not a time in seconds (finite, not negative)"),
    ("train_seconds", "-1", "not a time in seconds (finite, not negative)"),
])
def test_an_impossible_bleu_or_time_names_the_file_line_and_field(run, tmp_path, field, value,
                                                                  says):
    log = run / "metrics.jsonl"
    bad = json.dumps({"kind": "valid", "step": 200, "elapsed": 120.0, "dev_bleu": 31.0,
                      field: 0}).replace(f'"{field}": 0', f'"{field}": {value}')
    log.write_text(log.read_text() + bad + "\n")
    before = contents(run)
    out, data = tmp_path / "curve.png", tmp_path / "reach.json"
    result = CliRunner().invoke(main, ["curve", str(run), "--reach", "30", "-o", str(out),
                                       "--json", str(data)])
    assert result.exit_code == 1
    shown = repr(json.loads(value))
    assert result.output == (f"Error: {log}: line 2: its valid record has {shown} under "
                             f"'{field}', {says}\n")
    assert contents(run) == before and not out.exists() and not data.exists()


@pytest.mark.parametrize("make, says", [("fifo", "is a FIFO (named pipe), not a metrics log"),
                                        ("link to /dev/zero", "is a character device, not a "
                                                              "metrics log")])
def test_a_metrics_log_that_is_a_fifo_or_a_device_is_named_at_once(run, tmp_path, make, says):
    log = run / "metrics.jsonl"
    log.unlink()
    if make == "fifo":
        os.mkfifo(log)
    else:
        log.symlink_to("/dev/zero")
    out = tmp_path / "curve.png"
    result = CliRunner().invoke(main, ["curve", str(run), "-o", str(out)])  # never blocks
    assert result.exit_code == 1
    assert result.output == f"Error: {log} {says}; put the metrics log itself there\n"
    assert sorted(p.name for p in run.iterdir()) == ["metrics.jsonl"] and not out.exists()
