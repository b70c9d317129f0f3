"""Trains the tiny Transformer for a few steps, alone or as one rank under torchrun, and saves what
test_distributed.py compares: the initial and final weights, the first step's gradients summed over
the ranks, every step's loss and learning rate.

Every process computes on one thread (`train.threads=1`), so the lone process and each rank add
up a batch's gradients in the same order. BREAK_GRADIENT_SUM=skip|mean breaks the ranks' gradient
sum on purpose (no sum; an average instead of the sum), for the test that shows the comparison
catches it.
"""

import os
import sys
import time
from pathlib import Path

import torch

# tests/, for `helpers`: run by path, this script has no `pythonpath` of pytest's (setup.cfg)
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from helpers.training import TINY_OVERRIDES  # noqa: E402
from translate.config import load_recipe  # noqa: E402
from translate.metrics import MetricsLog  # noqa: E402
from translate.training import build_trainer, prepare_data, update  # noqa: E402
from translate.training.distributed import join, sum_gradients  # noqa: E402
from translate.training.progress import TrainingBar  # noqa: E402


def broken_sum(how: str):
    """A gradient sum that is wrong in the way `how` says."""
    def skip(parameters, world):
        pass

    def mean(parameters, world):
        parameters = list(parameters)
        sum_gradients(parameters, world)
        for p in parameters:
            p.grad /= world.size

    return {"skip": skip, "mean": mean}[how]


def main(recipe: str, data: str, out: str, steps: int, accum: int, *overrides: str) -> None:
    cfg = load_recipe(recipe, [*TINY_OVERRIDES, f"data.dataset={data}",
                               f"train.accum_steps={accum}", "train.eval_every=0",
                               "train.log_every=100000", "train.save_every=0", "train.threads=1",
                               *overrides])
    world = join(torch.device("cpu"))
    run_dir = Path(out) / f"rank{world.rank}"
    run_dir.mkdir(parents=True)
    metrics = MetricsLog(run_dir / "metrics.jsonl")
    trainer = build_trainer(cfg, run_dir, prepare_data(cfg, run_dir), metrics, "cpu", False,
                            world)
    trainer.state.epoch = 1
    trainer.start = trainer.last_eval = time.perf_counter()
    trainer.bar = TrainingBar(cfg.train, enabled=False)
    init = {k: v.clone() for k, v in trainer.updater.model.state_dict().items()}
    grads, lrs = {}, []
    how = os.environ.get("BREAK_GRADIENT_SUM")
    summed = broken_sum(how) if how else sum_gradients

    def sum_and_keep(parameters, world):  # the first step's gradients, summed, not yet clipped
        summed(parameters, world)
        if not grads:
            grads.update({n: p.grad.clone() for n, p in trainer.updater.model.named_parameters()})

    update.sum_gradients = sum_and_keep
    trainer.updater.optimizer.register_step_pre_hook(
        lambda optimizer, args, kwargs: lrs.append(optimizer.param_groups[0]["lr"]))
    batches = trainer.batcher.epoch(trainer.state.epoch)
    for _ in range(steps):
        trainer.next_step(batches)
    trainer.updater.settle(trainer.state)  # the steps' losses, from the device into the window
    torch.save({"model": trainer.updater.model.state_dict(), "init": init, "grads": grads,
                "lrs": lrs, "losses": trainer.state.window.losses,
                "tokens": trainer.state.window.tokens,
                "position": trainer.state.position, "step": trainer.state.step,
                "threads": torch.get_num_threads(),
                "lr": trainer.updater.optimizer.param_groups[0]["lr"]},
               Path(out) / f"rank{world.rank}.pt")
    metrics.close()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), *sys.argv[6:])
