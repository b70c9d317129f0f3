"""train.cuda_graphs: the step written for a recorded graph (batch buffers per shape, the
learning rate, the EMA's weight and the NaN/inf skip all on the device) makes exactly the
eager step's update; its checkpoints resume either kind of run; what it cannot record is refused
in one line. Run on the CPU, where the step runs unrecorded (tests/gpu/test_on_cuda.py
records it)."""

import json

import pytest
import torch

from helpers.training import TINY_OVERRIDES, poison_loss, ready_to_step
from translate.config import ConfigError, load_recipe
from translate.metrics import MetricsLog
from translate.training import Trainer, build_trainer, prepare_data
from translate.training.graphs import check_recipe

# dropout, clipping, label smoothing and the EMA all in the step; the engine graphs record
STEP_OVERRIDES = ["train.precision=fp32", "train.engine=plain", "train.eval_every=0",
                  "train.save_every=0",
                  "train.log_every=1", "model.dropout=0.2", "train.clip_norm=0.5",
                  "train.label_smoothing=0.1", "train.ema_decay=0.99"]


@pytest.fixture
def make_trainer(recipe_path, small_data, tmp_path):
    """A tiny Transformer's Trainer on the CPU, with or without train.cuda_graphs."""
    logs = []

    def make(graphs: bool, *overrides: str) -> Trainer:
        cfg = load_recipe(recipe_path, [*TINY_OVERRIDES, f"data.dataset={small_data}",
                                        *STEP_OVERRIDES, f"train.cuda_graphs={graphs}".lower(),
                                        *overrides])
        run_dir = tmp_path / f"run{len(logs)}"
        run_dir.mkdir()
        logs.append(MetricsLog(run_dir / "metrics.jsonl"))
        trainer = build_trainer(cfg, run_dir, prepare_data(cfg, run_dir), logs[-1],
                                device="cpu", progress=False)
        if not graphs:  # the eager step as a GPU takes it: a NaN/inf loss skipped on the device
            trainer.updater.defer_checks = True
        return ready_to_step(trainer)

    yield make
    for log in logs:
        log.close()


def state_of(trainer: Trainer) -> dict:
    """Weights, EMA, Adam's moments and step counts, and the learning rate, as plain tensors."""
    state = {f"model.{k}": v.clone() for k, v in trainer.updater.model.state_dict().items()}
    state.update({f"ema.{k}": v.clone() for k, v in trainer.updater.ema.state_dict().items()})
    for i, moments in trainer.updater.optimizer.state_dict()["state"].items():
        state.update({f"adam.{i}.{k}": torch.as_tensor(v).clone() for k, v in moments.items()})
    lr = trainer.updater.optimizer.param_groups[0]["lr"]
    state["lr"] = torch.as_tensor(lr, dtype=torch.float64)
    return state


def logged(trainer: Trainer) -> list[tuple[int, float]]:
    trainer.metrics.close()
    lines = (trainer.run_dir / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
    return [(r["step"], r["loss"]) for r in map(json.loads, lines)]


def test_the_recorded_step_makes_the_eager_steps_update(make_trainer):
    """Six steps, the fourth with an infinite loss: weights, EMA, Adam's state, learning rate
    and the logged losses are bit for bit the eager run's."""
    runs = []
    for graphs in (False, True):
        trainer = make_trainer(graphs)
        poison_loss(trainer, {4})  # the trainer's BatchLoss, which its graphs share
        order = trainer.batcher.epoch(trainer.state.epoch)
        for _ in range(6):
            trainer.next_step(order)
        runs.append(trainer)
    eager, recorded = runs
    assert recorded.updater.graphs is not None and not recorded.updater.graphs.records
    assert isinstance(recorded.updater.optimizer.param_groups[0]["lr"], torch.Tensor)
    assert len(recorded.updater.graphs.slots) >= 2  # batches of several shapes, a buffer set each
    assert recorded.state.bad_losses == eager.state.bad_losses == 1
    expected, got = state_of(eager), state_of(recorded)
    assert expected.keys() == got.keys()
    for name, value in expected.items():
        assert torch.equal(got[name], value), name
    assert logged(recorded) == logged(eager) and len(logged(eager)) == 5


def test_a_recorded_runs_checkpoint_resumes_it_exactly(make_trainer):
    straight = make_trainer(True)
    order = straight.batcher.epoch(straight.state.epoch)
    for _ in range(4):
        straight.next_step(order)

    first = make_trainer(True)
    for _ in range(2):
        first.next_step(order)
    saved = torch.load(first.save("last.pt"), weights_only=True)
    assert isinstance(saved["optimizer"]["param_groups"][0]["lr"], float)

    resumed = make_trainer(True)
    resumed.restore(saved)
    assert isinstance(resumed.updater.optimizer.param_groups[0]["lr"], torch.Tensor)
    for _ in range(2):
        resumed.next_step(order)
    expected, got = state_of(straight), state_of(resumed)
    for name, value in expected.items():
        assert torch.equal(got[name], value), name

    eager = make_trainer(False)  # the same checkpoint resumes a run without graphs
    eager.restore(saved)
    assert isinstance(eager.updater.optimizer.param_groups[0]["lr"], float)
    eager.next_step(order)
    assert eager.state.step == 3


@pytest.mark.parametrize("overrides, precision, world, reason", [
    (["train.compile=true"], "fp32", 1, "train.compile is the other way"),
    (["train.accum_steps=2"], "bf16", 1, "set train.accum_steps 1"),
    ([], "fp16", 1, "train in bf16 or fp32"),
    ([], "bf16", 2, "train with one process"),
    (["train.engine=fast"], "fp32", 1, "set train.engine to auto or plain"),
    (["train.optimizer=muon"], "bf16", 1, "Muon reads its learning rate on the host .* set "
                                          "train.optimizer adamw$"),
])
def test_what_a_graph_cannot_record_is_refused(recipe_path, overrides, precision, world,
                                               reason):
    recipe = load_recipe(recipe_path, ["train.cuda_graphs=true", *overrides])
    with pytest.raises(ConfigError, match=f"^train.cuda_graphs: .*{reason}"):
        check_recipe(recipe, precision, world)
    check_recipe(load_recipe(recipe_path, ["train.cuda_graphs=true"]), "bf16", 1)
