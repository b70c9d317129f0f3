"""`translate tune-beam` on the tiny trained Transformer: every setting decoded and scored as
`translate evaluate` scores it, the best picked from the numbers, test splits refused."""

import json

import pytest
from click.testing import CliRunner

from translate.analysis.beam_sweep import BeamSweep, SweepPoint
from translate.cli import main
from translate.evaluation import score_checkpoint

PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def sweep(trained_run, small_data, tmp_path_factory):
    out = tmp_path_factory.mktemp("sweep")
    result = CliRunner().invoke(main, ["tune-beam", str(trained_run.run_dir / "best.pt"),
                                       "--data", str(small_data), "--beams", "2,1",
                                       "--lenpens", "0,1.5", "--precision", "fp32",
                                       "-o", str(out)])
    assert result.exit_code == 0, result.output
    return out, json.loads((out / "sweep.json").read_text(encoding="utf-8")), result.output


def test_every_setting_scores_as_evaluate_does(sweep, trained_run, small_data):
    out, data, output = sweep
    points = {(p["beam"], p["lenpen"]): p for p in data["points"]}
    assert sorted(points) == [(1, 0.0), (1, 1.5), (2, 0.0), (2, 1.5)]
    assert data["split"] == "dev" and data["sentences"] == 100
    # greedy ignores the penalty: one decode fills its row
    assert points[1, 0.0]["bleu"] == points[1, 1.5]["bleu"]
    for beam, lenpen in [(1, 0.0), (2, 1.5)]:
        expected = score_checkpoint(str(trained_run.run_dir / "best.pt"), ["dev"],
                                    str(small_data), "cpu", beam, lenpen, "fp32")["dev"]
        assert points[beam, lenpen]["bleu"] == pytest.approx(expected.bleu, abs=1e-9)
        assert points[beam, lenpen]["length_ratio"] == pytest.approx(expected.length_ratio)
    best = max(data["points"], key=lambda p: (round(p["bleu"], 2), -p["beam"], -p["lenpen"]))
    assert data["best"] == best
    assert f"best on dev: beam {best['beam']}, length penalty {best['lenpen']:g}" in output
    assert f"--beam {best['beam']} --lenpen {best['lenpen']:g}" in output
    assert (out / "sweep.png").read_bytes()[:8] == PNG
    table = (out / "sweep.md").read_text(encoding="utf-8")
    assert f"**{best['bleu']:.2f}**" in table and "| 2 |" in table and "| 1 (greedy) |" in table


def test_best_breaks_ties_towards_the_cheaper_setting():
    def point(beam, lenpen, bleu):
        return SweepPoint(beam, lenpen, bleu, 50.0, 1.0, 100.0)

    sweep = BeamSweep("ck.pt", "dev", 10, "fp32", True, 5, 0.6, "sig",
                      [point(1, 0.0, 30.0), point(4, 0.6, 31.004), point(8, 0.3, 31.0),
                       point(4, 1.0, 31.001), point(5, 0.6, 30.5)])
    assert (sweep.best().beam, sweep.best().lenpen) == (4, 0.6)
    assert sweep.at(5, 0.6).bleu == 30.5 and sweep.at(5, 1.0) is None


@pytest.mark.parametrize("split", ["test_2016_flickr", "test_2017_flickr"])
def test_a_test_split_is_refused_before_decoding(trained_run, small_data, tmp_path, split):
    out = tmp_path / "sweep"
    result = CliRunner().invoke(main, ["tune-beam", str(trained_run.run_dir / "best.pt"),
                                       "--data", str(small_data), "--split", split,
                                       "-o", str(out)])
    assert result.exit_code == 1
    assert f"Error: '{split}' is a test split: choose decoding on a dev split" in result.output
    assert not out.exists()


@pytest.mark.parametrize("option, value, message", [
    ("--beams", "0,2", "each at least 1"),
    ("--beams", "2,x", "is not a comma-separated list of ints"),
    ("--lenpens", "-0.5", "each at least 0"),
    ("--lenpens", ",", "give one or more values"),
])
def test_bad_grids_get_a_usage_error(trained_run, option, value, message):
    result = CliRunner().invoke(main, ["tune-beam", str(trained_run.run_dir / "best.pt"),
                                       option, value])
    assert result.exit_code == 2 and message in result.output, result.output
