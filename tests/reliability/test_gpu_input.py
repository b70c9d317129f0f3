"""The surfaces this toolkit's GPU path and textbook engine added, against bad input:
`train.loss_chunk`, `--engine`, `translate.gpu`'s beam search and chunked loss. Each refusal is
one line naming the setting, before any work, and a run folder already there keeps its files."""

import pytest
import torch
from click.testing import CliRunner
from torch import nn

from helpers.training import TINY_OVERRIDES
from translate import gpu
from translate.cli import main


@pytest.mark.parametrize("value, says", [
    ("-1", "loss_chunk"), ("abc", "loss_chunk"), ("1e30", "loss_chunk"), ("2.5", "loss_chunk"),
])
def test_a_bad_loss_chunk_is_one_error_line_and_the_folder_stays(value, says, recipe_path,
                                                                 small_data, tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "notes.txt").write_text("mine\n")
    args = ["train", str(recipe_path), "--run-dir", str(run_dir), "--device", "cpu",
            "--no-progress"]
    for item in [*TINY_OVERRIDES, f"data.dataset={small_data}", f"train.loss_chunk={value}"]:
        args += ["--set", item]
    result = CliRunner().invoke(main, args)
    errors = [line for line in result.output.splitlines() if line.startswith("Error")]
    assert result.exit_code != 0 and len(errors) == 1 and says in errors[0], result.output
    assert "Traceback" not in result.output
    assert sorted(p.name for p in run_dir.iterdir()) == ["notes.txt"]
    assert (run_dir / "notes.txt").read_text() == "mine\n"


@pytest.mark.parametrize("command", ["decode", "evaluate", "serve"])
def test_an_unknown_engine_is_refused_naming_the_choices(command, trained_run):
    result = CliRunner().invoke(main, [command, str(trained_run.run_dir), "--engine", "cuda"])
    assert result.exit_code == 2
    assert "'cuda' is not one of 'auto', 'fast', 'plain', 'gpu', 'textbook'" in result.output


def test_the_gpu_search_refuses_bad_arguments_and_takes_an_empty_batch_of_limits():
    class Echo(nn.Module):  # never reached: the checks come first
        pass

    src = torch.tensor([[5, 6, 3]])
    with pytest.raises(ValueError, match="check_every must be at least 1 step, got -3"):
        gpu.beam_search(Echo(), src, 2, 5, check_every=-3)
    with pytest.raises(ValueError, match=r"nbest must be between 1 and the beam size \(2\)"):
        gpu.beam_search(Echo(), src, 2, 5, nbest=0)


def test_the_chunked_loss_refuses_a_chunk_under_one_and_ignores_all_padding():
    output = nn.Linear(8, 20, bias=False)
    hidden = torch.randn(6, 8, requires_grad=True)
    with pytest.raises(ValueError, match="chunk must be at least 1 row, got -2"):
        gpu.chunked_cross_entropy(hidden, output, torch.ones(6, dtype=torch.long), 0.1, 0, -2)
    loss, nll = gpu.chunked_cross_entropy(hidden, output, torch.zeros(6, dtype=torch.long),
                                          0.1, 0, 4)  # every target is padding: nothing counts
    assert loss.item() == 0.0 and nll.item() == 0.0
    loss.backward()
    assert torch.equal(hidden.grad, torch.zeros_like(hidden))
