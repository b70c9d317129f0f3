"""`translate average`: the mean of a run's last step checkpoints, which decodes and exports; and
one-line errors for too few checkpoints or checkpoints of different models."""

import shutil

import pytest
import torch
from click.testing import CliRunner

from helpers.training import TINY_OVERRIDES, train_tiny
from translate.averaging import average_checkpoints, average_state_dicts
from translate.checkpoint import CheckpointError, read_checkpoint, write_checkpoint
from translate.cli import main


@pytest.fixture(scope="module")
def run_with_steps(small_data, recipe_path, tmp_path_factory):
    """A tiny run that kept its step checkpoints 10, 20 and 30."""
    run = tmp_path_factory.mktemp("avg_run")
    train_tiny(recipe_path, [*TINY_OVERRIDES, "train.eval_every=10", "train.keep_last=3"],
               small_data, 30, run)
    return run


def test_the_average_is_the_mean_of_the_last_checkpoints_and_decodes(run_with_steps, tmp_path):
    result = CliRunner().invoke(main, ["average", str(run_with_steps), "--last", "2", "-o",
                                       str(tmp_path / "avg.pt")])
    assert result.exit_code == 0, result.output
    assert result.output == f"averaged step_20.pt, step_30.pt into {tmp_path / 'avg.pt'}\n"
    inputs = [read_checkpoint(run_with_steps / f"step_{n}.pt") for n in (20, 30)]
    averaged = read_checkpoint(tmp_path / "avg.pt")
    assert set(averaged["model"]) == set(inputs[0]["model"])
    for name, tensor in averaged["model"].items():
        a, b = (data["model"][name].double() for data in inputs)  # the EMA weights
        assert torch.equal(tensor, ((a + b) / 2).float()), name
    assert not torch.equal(averaged["model"]["output.weight"], inputs[1]["model"]["output.weight"])
    model = averaged["model"]  # tied embeddings stay one tensor
    assert model["output.weight"].data_ptr() == model["src_embed.tokens.weight"].data_ptr()
    assert averaged["averaged"] == ["step_20.pt", "step_30.pt"] and averaged["step"] == 30
    assert averaged["recipe"] == inputs[1]["recipe"]
    assert not {"optimizer", "scheduler", "trainer", "train_model"} & set(averaged)
    decoded = CliRunner().invoke(main, ["decode", str(tmp_path / "avg.pt")],
                                 input="A man rides a bike.\nTwo dogs play.\n")
    assert decoded.exit_code == 0 and len(decoded.stdout.splitlines()) == 2, decoded.output
    exported = CliRunner().invoke(main, ["export", str(tmp_path / "avg.pt"), "-o",
                                         str(tmp_path / "model")])
    assert exported.exit_code == 0, exported.output


def test_raw_averages_the_optimizers_weights_not_the_ema(run_with_steps, tmp_path):
    result = CliRunner().invoke(main, ["average", str(run_with_steps), "--last", "2", "--raw"])
    path = run_with_steps / "average_last2_raw.pt"
    assert result.exit_code == 0 and str(path) in result.output, result.output
    inputs = [read_checkpoint(run_with_steps / f"step_{n}.pt") for n in (20, 30)]
    averaged = read_checkpoint(path)
    assert averaged["averaged_weights"] == "raw"
    for name, tensor in averaged["model"].items():
        a, b = (data["train_model"][name].double() for data in inputs)
        assert torch.equal(tensor, ((a + b) / 2).float()), name
    ema = (inputs[0]["model"]["output.weight"] + inputs[1]["model"]["output.weight"]) / 2
    assert not torch.allclose(averaged["model"]["output.weight"], ema)  # not the EMA's mean
    path.unlink()


def test_the_default_output_averages_the_last_n_by_step_number(run_with_steps, tmp_path):
    run = shutil.copytree(run_with_steps, tmp_path / "run")
    (run / "step_9.pt").write_bytes((run / "step_10.pt").read_bytes())  # 9 < 10 < 20 < 30
    result = average_checkpoints(run, last=3)
    assert result.path == run / "average_last3.pt" and result.step == 30
    assert [p.name for p in result.inputs] == ["step_10.pt", "step_20.pt", "step_30.pt"]


def test_the_mean_is_summed_in_float64():
    states = [{"w": torch.tensor([2.0 ** 24])}, {"w": torch.tensor([1.0])},
              {"w": torch.tensor([1.0])}]  # in float32, 2 ** 24 + 1 == 2 ** 24
    assert average_state_dicts(iter(states))["w"].item() == (2 ** 24 + 2) / 3


def test_too_few_or_mismatched_checkpoints_get_one_error_line(run_with_steps, tmp_path):
    def fails(*args: str) -> str:
        result = CliRunner().invoke(main, ["average", *args])
        assert result.exit_code == 1 and result.output.count("\n") == 1, result.output
        return result.output

    output = fails(str(run_with_steps), "--last", "4")
    assert ("holds 3 step checkpoint(s) (step_10.pt, step_20.pt, step_30.pt), fewer than "
            "--last 4: train with --set train.keep_last=4" in output)
    short = shutil.copytree(run_with_steps, tmp_path / "short")
    (short / "step_10.pt").unlink()  # the recipe keeps 3; the run saved 2 of them
    assert ("fewer than --last 3: the run keeps 3 but saved 2 before it ended: train longer, or "
            "average fewer (--last 2)") in fails(str(short), "--last", "3")
    usage = CliRunner().invoke(main, ["average", str(run_with_steps), "--last", "1"])
    assert usage.exit_code == 2 and "1 is not in the range x>=2" in usage.output
    run = shutil.copytree(run_with_steps, tmp_path / "run")
    data = torch.load(run / "step_20.pt", weights_only=True)
    data["recipe"]["model"]["ffn_dim"] = 256
    write_checkpoint(run / "step_20.pt", data)
    output = fails(str(run), "--last", "3")
    assert "step_10.pt and step_20.pt have different recipes (model.ffn_dim: 128 and 256)" in output
    data["recipe"] = read_checkpoint(run / "step_10.pt")["recipe"]
    data["model"]["encoder_norm.weight"] = torch.ones(7)
    write_checkpoint(run / "step_20.pt", data)
    output = fails(str(run), "--last", "3")
    assert "different shapes for encoder_norm.weight ((64,) and (7,))" in output
    with pytest.raises(CheckpointError, match="run folder not found"):
        average_checkpoints(tmp_path / "nowhere", 2)
