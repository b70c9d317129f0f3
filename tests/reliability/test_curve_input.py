"""`translate curve --reach` on hostile thresholds and metrics logs: one clear line each."""

import json

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
