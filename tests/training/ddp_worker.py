"""Trains the tiny Transformer for a few steps, alone or as one rank under torchrun, and saves its
weights and losses: run by test_distributed.py."""

import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from conftest import TINY_OVERRIDES  # noqa: E402
from translate.config import load_recipe  # noqa: E402
from translate.metrics import MetricsLog  # noqa: E402
from translate.training import Trainer, prepare_data  # noqa: E402
from translate.training.distributed import join  # noqa: E402
from translate.training.progress import TrainingBar  # noqa: E402


def main(recipe: str, data: str, out: str, steps: int, accum: int, *overrides: str) -> None:
    cfg = load_recipe(recipe, [*TINY_OVERRIDES, f"data.dataset={data}",
                               f"train.accum_steps={accum}", "train.eval_every=0",
                               "train.log_every=100000", "train.save_every=0", *overrides])
    world = join(torch.device("cpu"))
    run_dir = Path(out) / f"rank{world.rank}"
    run_dir.mkdir(parents=True)
    metrics = MetricsLog(run_dir / "metrics.jsonl")
    trainer = Trainer(cfg, run_dir, prepare_data(cfg, run_dir), metrics, "cpu", False, world)
    trainer.epoch, trainer.monitor = 1, {}
    trainer.start = trainer.last_eval = time.perf_counter()
    trainer.bar = TrainingBar(cfg.train, enabled=False)
    batches = trainer.epoch_batches()
    for _ in range(steps):
        trainer.next_step(batches)
    trainer.settle()  # the steps' losses, read from the device into the log window
    torch.save({"model": trainer.model.state_dict(), "losses": trainer.window.losses,
                "tokens": trainer.window.tokens,
                "position": trainer.position, "step": trainer.step,
                "lr": trainer.optimizer.param_groups[0]["lr"]},
               Path(out) / f"rank{world.rank}.pt")
    metrics.close()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), *sys.argv[6:])
