"""`translate curve`: dev BLEU of a real run's validations against minutes or steps."""

from click.testing import CliRunner

from translate.analysis.plots import learning_curve, read_metrics
from translate.cli import main

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def test_curve_points_are_the_runs_validations(trained_run):
    valid = [r for r in read_metrics(trained_run.run_dir) if r["kind"] == "valid"]
    steps, bleu = learning_curve(valid, "steps")
    assert steps == [100, 200, 300]  # eval_every=100, 300 steps
    minutes, same_bleu = learning_curve(valid, "minutes")
    assert minutes == [r["elapsed"] / 60 for r in valid] and minutes == sorted(minutes)
    assert bleu == same_bleu == [r["dev_bleu"] for r in valid]
    assert bleu[-1] > bleu[0]  # the tiny model learns


def test_curve_command_writes_a_png_for_each_axis(trained_run, tmp_path):
    for x in ("minutes", "steps"):
        out = tmp_path / f"{x}.png"
        result = CliRunner().invoke(main, ["curve", str(trained_run.run_dir), "--x", x,
                                           "-o", str(out)])
        assert result.exit_code == 0, result.output
        assert result.output == f"wrote {out}\n"
        assert out.read_bytes()[:8] == PNG_SIGNATURE


def test_curve_refuses_an_unknown_axis_and_writes_nothing(trained_run, tmp_path):
    out = tmp_path / "curve.png"
    result = CliRunner().invoke(main, ["curve", str(trained_run.run_dir), "--x", "epochs",
                                       "-o", str(out)])
    assert result.exit_code == 2
    assert "'epochs' is not one of 'minutes', 'steps'" in result.output
    assert not out.exists()
