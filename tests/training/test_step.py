"""One optimizer step: the loss it logs, and a NaN/inf loss skipped on the device the way a GPU
skips it (run here on the CPU, with the fused optimizer that can skip a step on the device)."""

import json
import logging

import pytest
import torch
import torch.nn.functional as F

from helpers.training import TINY_OVERRIDES, poison_loss, ready_to_step
from translate.config import load_recipe
from translate.metrics import MetricsLog
from translate.tokens import PAD
from translate.training import Trainer, TrainingError, build_trainer, prepare_data
from translate.training.optim import make_optimizer


@pytest.fixture
def make_trainer(recipe_path, small_data, tmp_path):
    """A tiny Transformer's Trainer on the CPU in fp32, ready for `next_step`."""
    logs = []

    def make(*overrides: str) -> Trainer:
        cfg = load_recipe(recipe_path, [*TINY_OVERRIDES, f"data.dataset={small_data}",
                                        "train.precision=fp32", "train.eval_every=0",
                                        "train.save_every=0", *overrides])
        run_dir = tmp_path / f"run{len(logs)}"
        run_dir.mkdir()
        logs.append(MetricsLog(run_dir / "metrics.jsonl"))
        return ready_to_step(build_trainer(cfg, run_dir, prepare_data(cfg, run_dir), logs[-1],
                                     device="cpu", progress=False))

    yield make
    for log in logs:
        log.close()


def skipping_on_device(trainer: Trainer) -> Trainer:
    """`trainer` as it runs on a GPU: fused AdamW, NaN/inf checks left on the device."""
    updater = trainer.updater
    updater.optimizer = make_optimizer(updater.model, trainer.cfg, fused=True)
    trainer.validation.engine.watch_optimizer(updater.optimizer)  # the run's engine
    trainer.updater.defer_checks = True
    trainer.schedule(0.0)  # the first step's learning rate, into the new optimizer
    return trainer


def batches_of(trainer: Trainer, indices: list[list[int]]):
    return [trainer.batcher.batch(idx) for idx in indices]


def snapshot(trainer: Trainer) -> dict:
    return {k: v.clone() for k, v in trainer.updater.model.state_dict().items()}


def test_the_logged_loss_is_the_nll_per_target_token_of_the_steps_batches(make_trainer):
    trainer = make_trainer("train.accum_steps=2", "train.log_every=1")
    order = trainer.batcher.epoch(trainer.state.epoch)
    expected = []
    for step in range(3):  # before each step, the model's NLL on the two batches it will take
        nll = tokens = 0
        with torch.no_grad():
            for batch in batches_of(trainer, order[2 * step: 2 * step + 2]):
                logits = trainer.updater.model(batch.src, batch.tgt_in)  # (B, T, V); dropout is 0
                nll += F.cross_entropy(logits.flatten(0, 1), batch.tgt_out.flatten(),
                                       ignore_index=PAD, reduction="sum").item()
                tokens += batch.num_tgt_tokens
        expected.append((nll / tokens, tokens))
        trainer.next_step(order)
    lines = (trainer.run_dir / "metrics.jsonl").read_text().splitlines()
    logged = [(r["loss"], r["step_tokens"]) for r in map(json.loads, lines)]
    assert [t for _, t in logged] == [t for _, t in expected]
    torch.testing.assert_close(torch.tensor([loss for loss, _ in logged], dtype=torch.float64),
                               torch.tensor([loss for loss, _ in expected], dtype=torch.float64),
                               rtol=1e-5, atol=0)


def test_on_the_device_a_nan_loss_leaves_the_weights_and_is_counted_when_read(make_trainer,
                                                                              caplog):
    trainer = skipping_on_device(make_trainer("train.max_bad_losses=1", "train.log_every=3"))
    order = trainer.batcher.epoch(trainer.state.epoch)
    trainer.next_step(order)  # a real step: Adam has state now
    before = snapshot(trainer)
    adam = {k: v.clone() for k, v in trainer.updater.optimizer.state_dict()["state"][0].items()}
    poison_loss(trainer, {1, 3})
    with caplog.at_level(logging.WARNING, logger="translate"):
        trainer.next_step(order)  # step 2: skipped on the device, nothing read on the host yet
        state = trainer.state
        assert state.step == 2 and state.bad_losses == 0 and len(trainer.updater.pending) == 2
        after = snapshot(trainer)
        assert all(torch.equal(before[k], after[k]) for k in before)
        state = trainer.updater.optimizer.state_dict()["state"][0]
        assert all(torch.equal(state[k], adam[k]) for k in adam)  # moments and step count
        trainer.next_step(order)  # step 3 logs: the figures are read, the bad loss counted
    assert "after step 1: inf loss on a step of" in caplog.text
    assert "skipped (1 of at most 1)" in caplog.text and trainer.state.bad_losses == 1
    lines = (trainer.run_dir / "metrics.jsonl").read_text().splitlines()
    (record,) = map(json.loads, lines)
    good = [trainer.batcher.pairs.tgt.total_length(order[i]) for i in (0, 2)]  # steps 1 and 3
    assert record["step"] == 3 and record["step_tokens"] == sum(good) / 2
    assert record["loss"] > 0 and not trainer.updater.pending
    trainer.next_step(order)  # step 4: bad again; the stop comes when it is read
    with pytest.raises(TrainingError, match=r"2 batches had a NaN/inf loss, over "
                                            r"train.max_bad_losses \(1\)"):
        trainer.save("last.pt")


def test_a_step_not_skipped_on_the_device_is_the_plain_step(make_trainer):
    trainer = make_trainer("train.accum_steps=2")
    order, start = trainer.batcher.epoch(trainer.state.epoch), snapshot(trainer)
    weights = []
    for defer in (True, False):
        updater = trainer.updater
        updater.model.load_state_dict(start)
        updater.optimizer = make_optimizer(updater.model, trainer.cfg, fused=True)
        trainer.validation.engine.watch_optimizer(updater.optimizer)
        # from step 0 again: the learning rate is a function of the step
        trainer.updater.defer_checks, trainer.state.position, trainer.state.step = defer, 0, 0
        trainer.schedule(0.0)
        for _ in range(3):
            trainer.next_step(order)
        weights.append(snapshot(trainer))
    assert all(torch.equal(weights[0][k], weights[1][k]) for k in start)


@pytest.mark.parametrize("optimizer", ["adamw", "muon"])
def test_the_fast_engines_packed_weights_follow_the_trainers_steps(make_trainer, optimizer):
    """The fast engine packs weights for inference and repacks when a weight's version moves;
    the fused AdamW leaves versions alone, so the engine watches the run's optimizers
    (`Engine.watch_optimizer`; Muon updates in place): after each step the model translates
    with the new weights."""
    from translate.models import build_model

    trainer = make_trainer("train.engine=fast", f"train.optimizer={optimizer}")
    order = trainer.batcher.epoch(trainer.state.epoch)
    batch = trainer.batcher.batch(order[0])
    for _ in range(2):
        trainer.next_step(order)
        with torch.no_grad():
            # (B, T, V) from packed weights
            fast = trainer.updater.model.eval()(batch.src, batch.tgt_in)
            tok = trainer.tokenizer
            plain = build_model(trainer.recipe.model, tok.src_vocab_size, tok.tgt_vocab_size,
                                tok.joint)
            plain.load_state_dict(trainer.updater.model.state_dict())
            torch.testing.assert_close(fast, plain.eval()(batch.src, batch.tgt_in),
                                       rtol=1e-4, atol=1e-4)
