"""The textbook training step (translate.training.step.plain_step) is the step the Trainer
takes: the same loss, the same gradient for every parameter, the same weights after it, with
AdamW alone and with Muon for the hidden matrices beside it."""

import pytest
import torch

from helpers.files import read_jsonl
from helpers.training import tiny_trainer
from translate.training.optim import lr_scale
from translate.training.step import plain_step


def gradients_at_each_update(optimizers) -> list[dict[int, torch.Tensor]]:
    """Every parameter's gradient as `optimizers` are about to use it, one dict per step."""
    seen = []

    def note(optimizer, args, kwargs):
        if optimizer is optimizers[0]:  # the step's first update
            seen.append({})
        seen[-1].update({id(p): p.grad.clone() for group in optimizer.param_groups
                         for p in group["params"]})

    for optimizer in optimizers:
        optimizer.register_step_pre_hook(note)
    return seen


@pytest.mark.parametrize("precision, optimizer", [("fp32", "adamw"), ("bf16", "adamw"),
                                                  ("fp32", "muon")])
def test_the_plain_step_is_the_trainers_step(recipe_path, small_data, tmp_path, precision,
                                             optimizer):
    overrides = (f"train.precision={precision}", "train.engine=plain", "model.dropout=0.1",
                 "train.clip_norm=0.5", "train.log_every=1", "train.eval_every=0",
                 "train.save_every=0", f"train.optimizer={optimizer}")
    trainer = tiny_trainer(recipe_path, small_data, tmp_path / "trainer", *overrides)
    order = trainer.batcher.epoch(trainer.state.epoch)
    seen = gradients_at_each_update(trainer.updater.optimizers)
    lrs = []  # each step's learning rates, as the trainer's schedule set them
    for _ in range(2):
        lrs.append([o.param_groups[0]["lr"] for o in trainer.updater.optimizers])
        trainer.next_step(order)
    trainer.updater.settle(trainer.state)
    trainer.metrics.close()
    logged = [r["loss"] for r in read_jsonl(trainer.run_dir / "metrics.jsonl")]

    textbook = tiny_trainer(recipe_path, small_data, tmp_path / "textbook", *overrides)
    optimizers = textbook.updater.optimizers
    assert len(optimizers) == len(lrs[0]) == (2 if optimizer == "muon" else 1)
    mine = gradients_at_each_update(optimizers)
    cfg = textbook.cfg
    # the schedule's rates, a function of the step (inverse_sqrt: the budget plays no part)
    assert lrs == [[peak * lr_scale(cfg, i, 0.0, None) for peak in textbook.updater.peaks]
                   for i in range(2)]
    losses = [plain_step(textbook.updater.model, textbook.batcher.batch(order[i]), optimizers,
                         lrs[i], cfg.label_smoothing, cfg.clip_norm, precision)
              for i in range(2)]
    assert losses == pytest.approx(logged, rel=1e-12)
    assert all(optimizer.state for optimizer in optimizers)  # each took its steps
    names = {id(p): n for n, p in textbook.updater.model.named_parameters()}
    ids = {n: id(p) for n, p in trainer.updater.model.named_parameters()}
    for step, (theirs, ours) in enumerate(zip(seen, mine)):
        for pid, grad in ours.items():
            assert torch.equal(grad, theirs[ids[names[pid]]]), (step, names[pid])
    for (name, weight), other in zip(trainer.updater.model.state_dict().items(),
                                     textbook.updater.model.state_dict().values()):
        assert torch.equal(weight, other), name
