"""train.cuda_graphs with what a recorded step cannot take: `translate train` stops before any
step with one Error line naming the setting to change, and a run folder already there keeps every
file as it was."""

import pytest
from click.testing import CliRunner

from helpers.training import TINY_OVERRIDES
from translate.cli import main


@pytest.mark.parametrize("recipe, sets, says", [
    ("rnn", [], "the RNN packs its batches by lengths read on the host"),
    ("transformer", ["train.accum_steps=2"], "set train.accum_steps 1"),
    ("transformer", ["train.compile=true"], "train.compile is the other way"),
    ("transformer", ["train.engine=fast"], "set train.engine to auto or plain"),
])
def test_a_step_graphs_cannot_record_is_one_error_line(recipe, sets, says, recipe_path,
                                                       rnn_recipe_path, small_data, tmp_path):
    path = rnn_recipe_path if recipe == "rnn" else recipe_path
    overrides = [] if recipe == "rnn" else TINY_OVERRIDES
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "notes.txt").write_text("mine\n")
    args = ["train", str(path), "--run-dir", str(run_dir), "--device", "cpu", "--no-progress"]
    for item in [*overrides, f"data.dataset={small_data}", "train.cuda_graphs=true", *sets]:
        args += ["--set", item]
    result = CliRunner().invoke(main, args)
    assert result.exit_code != 0
    errors = [line for line in result.output.splitlines() if line.startswith("Error")]
    assert len(errors) == 1 and "train.cuda_graphs: " in errors[0] and says in errors[0]
    assert "Traceback" not in result.output
    assert (run_dir / "notes.txt").read_text() == "mine\n"
    assert sorted(p.name for p in run_dir.iterdir()) == ["notes.txt"]  # no data prepared
