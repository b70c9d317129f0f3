"""Numerical faults: a NaN/inf loss skips its batch, too many stop training; fp16 overflow."""

import logging
from dataclasses import replace

import pytest
import torch
from click.testing import CliRunner

import translate.training.build
from helpers.training import TINY_OVERRIDES, poison_loss, step
from translate.cli import main
from translate.config import load_recipe
from translate.engine import resolve_engine
from translate.metrics import MetricsLog
from translate.training import TrainingError, build_trainer, prepare_data


def poisoned_engine(bad_calls: set[int]):
    """`resolve_engine` whose engine's loss is made infinite on the calls numbered in
    `bad_calls` (1-based)."""
    calls = []

    def engine(name, device):
        real = resolve_engine(name, device)

        def loss(*args):
            calls.append(1)
            value, nll = real.loss(*args)
            return (value * float("inf"), nll) if len(calls) in bad_calls else (value, nll)

        return replace(real, loss=loss)

    return engine


@pytest.fixture
def trainer(recipe_path, small_data, tmp_path):
    cfg = load_recipe(recipe_path, [*TINY_OVERRIDES, f"data.dataset={small_data}",
                                    "train.max_bad_losses=1"])
    metrics = MetricsLog(tmp_path / "metrics.jsonl")
    yield build_trainer(cfg, tmp_path, prepare_data(cfg, tmp_path), metrics, device="cpu",
                  progress=False)
    metrics.close()


def first_batches(trainer, n=1):
    from translate.data.batch import collate

    return [collate([trainer.batcher.pairs.src[i] for i in idx],
                    [trainer.batcher.pairs.tgt[i] for i in idx])
            for idx in trainer.batcher.epoch(trainer.state.epoch)[:n]]


def snapshot(module):
    return {k: v.clone() for k, v in module.state_dict().items()}


def test_a_nan_loss_skips_the_batch_without_touching_the_weights(monkeypatch, trainer, caplog):
    batch = first_batches(trainer)
    assert step(trainer, batch) is not None  # one real step: Adam has state now
    before = snapshot(trainer.updater.model)
    adam = trainer.updater.optimizer.state_dict()["state"][0]["exp_avg"].clone()
    poison_loss(trainer, {1, 2})
    with caplog.at_level(logging.WARNING, logger="translate"):
        assert step(trainer, batch) is None
    assert "after step 1: inf loss" in caplog.text and "skipped (1 of at most 1)" in caplog.text
    after = snapshot(trainer.updater.model)
    assert all(torch.equal(before[k], after[k]) for k in before)
    assert torch.equal(trainer.updater.optimizer.state_dict()["state"][0]["exp_avg"], adam)
    assert trainer.state.step == 1
    assert all(p.grad is None for p in trainer.updater.model.parameters())
    with pytest.raises(TrainingError, match=r"2 batches had a NaN/inf loss, over "
                                            r"train.max_bad_losses \(1\); stopping"):
        step(trainer, batch)


def test_fp16_overflow_is_skipped_by_the_grad_scaler(trainer):
    trainer.updater.scaler = torch.amp.GradScaler("cpu", init_scale=2.0**16)
    trainer.updater.model.output.weight.register_hook(lambda grad: grad * float("inf"))
    before = snapshot(trainer.updater.model)
    assert step(trainer, first_batches(trainer)) is not None
    trainer.updater.settle(trainer.state)
    window = trainer.state.window
    assert window.losses[0] > 0 and window.tokens > 0  # the loss was fine;
    assert trainer.state.bad_losses == 0  # the gradient overflowed
    after = snapshot(trainer.updater.model)
    assert all(torch.equal(before[k], after[k]) for k in before)
    assert trainer.updater.scaler.get_scale() == 2.0**15  # backed off for the next step


def test_training_goes_on_past_few_bad_losses_and_stops_on_many(monkeypatch, recipe_path,
                                                                small_data, tmp_path):
    args = ["train", str(recipe_path), "--data", str(small_data), "--no-progress",
            *[a for item in TINY_OVERRIDES for a in ("--set", item)], "--set",
            "train.max_steps=12", "--set", "train.eval_every=0", "--set", "data.test_splits=[]",
            "--set", "train.max_bad_losses=2"]
    monkeypatch.setattr(translate.training.build, "resolve_engine", poisoned_engine({3, 5}))
    result = CliRunner().invoke(main, [*args, "--run-dir", str(tmp_path / "ok")])
    assert result.exit_code == 0, result.output
    assert "(step 12 of 12" in result.output
    monkeypatch.setattr(translate.training.build, "resolve_engine", poisoned_engine({3, 5, 6}))
    result = CliRunner().invoke(main, [*args, "--run-dir", str(tmp_path / "diverged")])
    assert result.exit_code == 1 and "Traceback" not in result.output
    errors = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert errors == [errors[0]] and "3 batches had a NaN/inf loss" in errors[0]
    assert "after step 3:" in errors[0] and ("Train anew (another --run-dir, or --overwrite) "
                                             "with a lower train.lr") in errors[0]
    assert "--resume" not in errors[0]  # resuming keeps the rates that diverged
    assert (tmp_path / "diverged" / "run.json").is_file()  # a run --overwrite may start over
