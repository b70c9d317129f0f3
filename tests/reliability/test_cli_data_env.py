"""TRANSLATE_DATA, read once by the command line and passed down: a value that names no data is
one Error line, and a new run that cannot start leaves no run folder behind."""

import pytest
from click.testing import CliRunner

from helpers.training import TINY_OVERRIDES
from translate.cli import main


@pytest.mark.parametrize("kind", ["missing folder", "a file", "an empty folder"])
def test_a_data_variable_that_names_no_data_is_one_line_and_leaves_nothing(
        kind, recipe_path, tmp_path):
    where = tmp_path / "data"
    if kind == "a file":
        where.write_text("not a dataset\n", encoding="utf-8")
    elif kind == "an empty folder":
        where.mkdir()
    run = tmp_path / "run"
    sets = [a for item in [*TINY_OVERRIDES, "train.max_steps=2"] for a in ("--set", item)]
    result = CliRunner().invoke(main, ["train", str(recipe_path), "--run-dir", str(run),
                                       "--no-progress", *sets],
                                env={"TRANSLATE_DATA": str(where)})
    assert result.exit_code == 1, result.output
    errors = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and str(where) in errors[0], result.output
    assert "Traceback" not in result.output
    assert not run.exists()  # a new run that never started leaves no folder
