"""Time to quality: when a run's validations first reached a dev BLEU, from hand-written logs."""

import json

import pytest
from click.testing import CliRunner

from translate.analysis.plots import MetricsError
from translate.analysis.reach import Reached, first_reached, run_reach
from translate.cli import main


def valid(step, elapsed, bleu, train_seconds=None, **extra):
    record = {"kind": "valid", "step": step, "elapsed": elapsed, "dev_bleu": bleu, **extra}
    if train_seconds is not None:
        record["train_seconds"] = train_seconds
    return record


# a probe (the first 128 dev sentences) that scored high, then full-dev validations
LOG = [valid(100, 60, 40.0, 50, dev_bleu_sentences=128), valid(200, 180, 20.0, 150),
       valid(300, 300, 35.0, 270), valid(400, 420, 36.5, 380), valid(500, 540, 36.0, 490)]


def write_run(folder, records):
    folder.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps({"kind": "train", "step": 50, "elapsed": 30, "tok_per_s": 1000.0})]
    lines += [json.dumps(r) for r in records]
    (folder / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    return folder


def test_an_equal_bleu_counts_as_reached():
    assert first_reached(LOG, 35.0) == Reached(minutes=5.0, train_minutes=4.5, step=300,
                                               dev_bleu=35.0)
    assert first_reached(LOG, 36.0).step == 400  # the first at or over it, not the closest


def test_a_probe_never_counts():
    assert first_reached(LOG, 21.0).step == 300  # the probe's 40.0 came first, on 128 sentences
    assert first_reached(LOG[:1], 0.0) is None


def test_never_reached_and_an_empty_log():
    assert first_reached(LOG, 36.6) is None
    assert first_reached([], 10.0) is None


def test_training_minutes_are_none_where_not_logged():
    assert first_reached([valid(100, 120, 30.0)], 30.0) == Reached(2.0, None, 100, 30.0)


@pytest.mark.parametrize("records, message", [
    ([valid(200, 100, 1.0), valid(100, 200, 2.0)], "out of order: step 100"),
    ([valid(100, 200, 1.0), valid(200, 100, 2.0)], "out of order: step 200 (elapsed 100 s)"),
    ([{"kind": "valid", "step": 100, "dev_bleu": 3.0}], "None under 'elapsed'"),
    ([valid(100, 60, "38")], "'38' under 'dev_bleu', not a number"),
    ([valid(100, 60, float("nan"))], "nan under 'dev_bleu'"),
    ([valid(100, 60, 1.0, train_seconds="x")], "'x' under 'train_seconds'"),
])
def test_unordered_or_missing_fields_name_the_file(records, message):
    with pytest.raises(MetricsError, match="^runs/a/metrics.jsonl: ") as error:
        first_reached(records, 30.0, "runs/a/metrics.jsonl")
    assert message in str(error.value)


def test_run_reach_reports_the_best_when_never_reached(tmp_path):
    run = write_run(tmp_path / "a", LOG)
    never, = run_reach(run, [37.0])
    assert never.reached is None and (never.best_bleu, never.best_minutes) == (36.5, 7.0)


def test_curve_prints_a_line_per_run_and_threshold(tmp_path):
    a, b = write_run(tmp_path / "a", LOG), write_run(tmp_path / "b", LOG[:1])
    out, data = tmp_path / "curve.png", tmp_path / "reach.json"
    result = CliRunner().invoke(main, ["curve", str(a), str(b), "--reach", "35,37", "-o",
                                       str(out), "--json", str(data)])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines() == [
        f"{a}: dev BLEU 35.0 first at 5.0 min (step 300, 4.5 training min)",
        f"{a}: dev BLEU 37.0 never reached (best 36.5 at 7.0 min)",
        f"{b}: dev BLEU 35.0 never reached (no full-dev validation)",
        f"{b}: dev BLEU 37.0 never reached (no full-dev validation)",
        f"wrote {out}", f"wrote {data}"]
    first = json.loads(data.read_text())[0]
    assert first == {"run": str(a), "threshold": 35.0, "best_bleu": 36.5, "best_minutes": 7.0,
                     "reached": {"minutes": 5.0, "train_minutes": 4.5, "step": 300,
                                 "dev_bleu": 35.0}}
    assert out.read_bytes()[:4] == b"\x89PNG"
