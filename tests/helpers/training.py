"""Tiny training for tests: the overrides that make the Multi30k recipes tiny and quick on a
CPU, a tiny run trained to the end, and a Trainer driven a step at a time. Imports nothing
heavy at import time, so a script a test starts (training/ddp_worker.py) may import it."""

from __future__ import annotations

from pathlib import Path

TINY_TRAIN = [
    "tokenizer.vocab_size=1000", "train.max_tokens=1500", "train.lr=3e-3", "train.warmup=30",
    "train.eval_every=100", "train.log_every=10", "train.eval_every_minutes=0",
    "train.max_minutes=0", "train.patience=0", "train.ema_decay=0.999",
    "decode.beam=1",  # tiny models decode greedy: a beam finds their short, empty outputs
    # one precision on every CPU: `auto` would train these tiny models in bf16 where the CPU
    # has AMX, 1.4-1.8x slower at their size (tests of `auto` itself set it)
    "train.precision=fp32",
]
TINY_OVERRIDES = [
    "model.d_model=64", "model.heads=4", "model.ffn_dim=128", "model.encoder_layers=2",
    "model.decoder_layers=2", "model.dropout=0.0", *TINY_TRAIN,
]
RNN_TINY_OVERRIDES = [
    "model.embed_dim=64", "model.encoder_hidden=64", "model.decoder_hidden=96",
    "model.attn_dim=64", "model.dropout=0.0", *TINY_TRAIN,
]
RECIPES = Path(__file__).resolve().parents[2] / "recipes/multi30k"


def train_tiny(recipe: Path, overrides: list[str], data: Path, steps: int, run_dir: Path):
    from translate.config import load_recipe
    from translate.training import train

    cfg = load_recipe(recipe, [*overrides, f"data.dataset={data}", f"train.max_steps={steps}"])
    return train(cfg, run_dir, device="cpu", progress=False)


def ready_to_step(trainer):
    """`trainer` set up for `next_step` calls outside `run()`: epoch 1, no progress bar."""
    import time

    from translate.training.progress import TrainingBar

    trainer.state.epoch = 1
    trainer.bar = TrainingBar(trainer.cfg, enabled=False)
    trainer.start = trainer.last_eval = time.perf_counter()
    return trainer


def tiny_trainer(recipe: Path, data: Path, run_dir: Path, *overrides: str):
    """A Trainer of `recipe` with TINY_OVERRIDES and `overrides` on the CPU, in a new `run_dir`,
    logging to its metrics.jsonl, ready for `take_steps`."""
    from translate.config import load_recipe
    from translate.metrics import MetricsLog
    from translate.training import build_trainer, prepare_data

    cfg = load_recipe(recipe, [*TINY_OVERRIDES, f"data.dataset={data}", *overrides])
    run_dir.mkdir()
    return ready_to_step(build_trainer(cfg, run_dir, prepare_data(cfg, run_dir),
                                       MetricsLog(run_dir / "metrics.jsonl"), device="cpu",
                                       progress=False))


def step(trainer, batches, tokens=None):
    """One optimizer step of `trainer` on `batches` (target tokens: theirs unless given)."""
    tokens = tokens if tokens is not None else sum(b.num_tgt_tokens for b in batches)
    return trainer.updater.step(batches, tokens, trainer.state)


def take_steps(trainer, steps: int):
    """`steps` optimizer steps of the first epoch's batches, their figures read."""
    order = trainer.batcher.epoch(trainer.state.epoch)
    for _ in range(steps):
        trainer.next_step(order)
    trainer.updater.settle(trainer.state)
    return trainer


def poison_loss(trainer, bad_calls: set[int]) -> None:
    """Make `trainer`'s loss infinite on its engine's calls numbered in `bad_calls` (1-based)."""
    real, calls = trainer.updater.batch_loss.loss, []

    def loss(*args):
        calls.append(1)
        value, nll = real(*args)
        return (value * float("inf"), nll) if len(calls) in bad_calls else (value, nll)

    trainer.updater.batch_loss.loss = loss  # the step's BatchLoss, shared with its CUDA graphs
