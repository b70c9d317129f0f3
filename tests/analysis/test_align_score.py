"""`translate align-score`: every reading of a model's attention scored against the shipped gold
set, beside the diagonal baseline, each AER with an interval around it."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from translate.alignment import Reading
from translate.analysis.align_score import align_score, readings
from translate.cli import main

GOLD = Path(__file__).resolve().parents[2] / "gold/multi30k"


def test_every_reading_is_scored_with_an_interval_and_written_as_json(trained_run, tmp_path):
    out = tmp_path / "scores.json"
    result = CliRunner().invoke(main, ["align-score", str(trained_run.run_dir), str(GOLD / "dev"),
                                       "--device", "cpu", "--json", str(out)])
    assert result.exit_code == 0, result.output
    table = result.output.splitlines()
    assert table[0].startswith("| reading | AER (95% interval)")
    assert table[2].startswith("| diagonal baseline | ")
    scored = json.loads(out.read_text())
    layers, heads = 2, 4  # the tiny model's
    assert len(scored) == 1 + len(readings(layers, heads)) == 1 + 4 * layers * (heads + 1)
    for row in scored:
        s = row["scores"]
        assert 0 <= row["aer_low"] <= s["aer"] <= row["aer_high"] <= 100
        assert 0 <= s["precision"] <= 100 and 0 <= s["recall"] <= 100
        assert s["sure"] == 420  # the dev part's sure links (gold/multi30k/README.md)
    assert scored[0]["reading"] is None and scored[0]["scores"]["aer"] > 20
    # the diagonal baseline of the dev part does not depend on the model
    assert abs(scored[0]["scores"]["aer"] - 39.0) < 0.1


def test_the_rnn_has_one_map_read_four_ways(trained_rnn_run):
    _, scored = align_score(str(trained_rnn_run.run_dir), str(GOLD / "dev"), device="cpu")
    assert [r.name() for r in scored] == [
        "diagonal baseline", "the attention, predicting, each source word",
        "the attention, predicting, each output word", "the attention, shifted, each source word",
        "the attention, shifted, each output word"]


def test_chosen_readings_only_and_a_missing_gold_file_is_one_error_line(trained_run, tmp_path):
    _, scored = align_score(str(trained_run.run_dir), str(GOLD / "dev"), device="cpu",
                            chosen=[Reading(1, 2, False)])
    assert [r.name() for r in scored] == ["diagonal baseline",
                                          "layer 1, head 2, predicting, each source word"]
    result = CliRunner().invoke(main, ["align-score", str(trained_run.run_dir),
                                       str(tmp_path / "nothing")])
    assert result.exit_code == 1 and result.output.startswith("Error: ")
    assert "nothing.en" in result.output and "Traceback" not in result.output


def test_choose_on_a_dev_part_scores_only_its_choice_on_the_test_part(trained_run):
    _, on_dev = align_score(str(trained_run.run_dir), str(GOLD / "dev"), device="cpu")
    best = min(on_dev[1:], key=lambda r: r.scores.aer)
    _, on_test = align_score(str(trained_run.run_dir), str(GOLD / "test"), device="cpu",
                             choose_on=str(GOLD / "dev"))
    assert on_test[0].reading is None and on_test[1].reading == best.reading
    assert len(on_test) in (2, 3) and all(r.reading.head is None for r in on_test[2:])
    assert on_test[1].scores.sure == 935
