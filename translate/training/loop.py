"""The training loop: `Trainer.run()` takes optimizer steps until a stopping rule fires,
validating, logging and saving checkpoints as the recipe says. `training.build.build_trainer`
makes a Trainer; each step is an `Updater`'s (`training.update`), the textbook step with a real
run's bookkeeping; the counters are a `TrainState` (`training.state`)."""

from __future__ import annotations

import logging
import signal
import time
from pathlib import Path

from translate.checkpoint import copy_checkpoint, save_checkpoint
from translate.config import Recipe
from translate.data.batch import TokenBatches
from translate.metrics import LogWindow, MetricsLog
from translate.training.batches import TrainBatcher
from translate.training.checkpoints import drop_old_steps
from translate.training.distributed import World, agree, any_rank, from_main_numbers
from translate.training.optim import lr_scale, warmup_ended
from translate.training.prepare import TrainingData
from translate.training.progress import TrainingBar
from translate.training.promise import PromiseWatch
from translate.training.state import (TrainState, budget_used, out_of_budget, train_record,
                                      valid_record, validation_due)
from translate.training.update import Updater
from translate.training.validation import Validation
from translate.utils import rng_state, set_rng_state, stop_signals

log = logging.getLogger(__name__)


class Interrupted(Exception):
    """SIGINT or SIGTERM stopped training after a checkpoint was saved."""

    def __init__(self, signum: int, step: int, checkpoint: Path):
        self.signum, self.step, self.checkpoint = signum, step, checkpoint
        name = signal.Signals(signum).name
        super().__init__(f"{name} received: stopped at step {step} and saved {checkpoint}; "
                         f"resume with: translate train --resume {checkpoint.parent}")


class Trainer:
    """Trains `updater.model` on the prepared data until a stopping rule fires; `state` says
    where training stands, so a checkpoint of it resumes the run exactly."""

    def __init__(self, recipe: Recipe, run_dir: Path, metrics: MetricsLog, data: TrainingData,
                 batcher: TrainBatcher, updater: Updater, validation: Validation,
                 progress: bool = True, world: World = World()):
        self.recipe, self.cfg, self.run_dir, self.metrics = recipe, recipe.train, run_dir, metrics
        self.tokenizer, self.corpus_key = data.tokenizer, data.corpus_key  # what checkpoints hold
        self.batcher, self.updater, self.device = batcher, updater, updater.batch_loss.device
        self.validation, self.progress, self.world = validation, progress, world
        self.state = TrainState()
        self.last_eval_seconds = 0.0  # the last validation's, counted ahead against the budget
        self.run_id: str | None = None  # run.json's, written into every checkpoint
        self.promise = PromiseWatch(recipe, world.is_main)  # what the budget buys, said once
        self.schedule(0.0)  # the first step's learning rates (a resumed run loads its own)

    def run(self) -> int:
        """Train until a stopping rule fires; SIGINT/SIGTERM save last.pt and raise Interrupted."""
        state = self.state
        self.bar = TrainingBar(self.cfg, state.step, state.elapsed,
                               enabled=self.progress and self.world.is_main)
        self.start = time.perf_counter() - state.elapsed  # a resumed run counts the time spent
        self.last_eval = time.perf_counter()
        stop = False
        with stop_signals(announce=self.world.is_main) as received:
            while not stop:
                if state.position == 0:
                    state.epoch += 1
                batches = self.batcher.epoch(state.epoch)
                while state.position < len(batches) and not stop:
                    stop = self.next_step(batches)
                    if any_rank(bool(received), self.world):
                        signum = received[0] if received else signal.SIGTERM
                        raise Interrupted(signum, state.step, self.save("last.pt"))
                stop = stop or self.end_epoch()
        self.bar.close()
        return state.step

    def next_step(self, batches: TokenBatches) -> bool:
        """Train on the next batch group; log, validate and save as due. True: a rule stops it."""
        cfg, state = self.cfg, self.state
        step_batches = cfg.accum_steps * self.world.size  # what one optimizer step consumes
        chosen = batches[state.position: state.position + step_batches]
        group = [self.batcher.batch(idx) for idx in self.world.share(chosen)]
        tokens = self.batcher.tokens(chosen, group, self.world)
        state.position += step_batches
        t0 = time.perf_counter()
        figures = self.updater.step(group, tokens, state)
        if figures is not None and state.step % cfg.log_every == 0:
            self.updater.settle(state)  # on a GPU: waits for the queued steps, whose time counts
        now = time.perf_counter()
        state.train_seconds += now - t0
        state.elapsed = now - self.start
        if figures is None:  # a skipped step (CPU): nothing to log, validate or save
            return False
        self.bar.advance(state.step, state.elapsed)
        self.log_train(now - t0)
        self.promise.after_step(state.step, state.elapsed, tokens, self.metrics)
        ahead = self.last_eval_seconds
        due, stop, used = from_main_numbers(
            [validation_due(cfg, state, now - self.last_eval), out_of_budget(cfg, state, ahead),
             budget_used(cfg, state, ahead, len(batches))], self.world)
        self.schedule(used)  # the steps and the budget used set the next step's learning rates
        due, stop = due > 0, stop > 0
        if due or stop:
            stop = agree([self.validate()], self.world)[0] or stop
            self.last_eval = time.perf_counter()
            self.last_eval_seconds = self.last_eval - now
        elif cfg.save_every and state.step % cfg.save_every == 0:  # step_N.pt serves when due
            self.save("last.pt")
        return stop

    def schedule(self, used: float) -> None:
        """Set the next step's learning rates (`Updater.set_lr`): the schedule's `optim.lr_scale`
        of the steps taken, `used` (the budget's fraction used so far) and when warm-up ended,
        a fraction the state records (`optim.warmup_ended`) and a checkpoint saves."""
        state = self.state
        state.warmup_end = warmup_ended(self.cfg, state.step, used, state.warmup_end)
        self.updater.set_lr(lr_scale(self.cfg, state.step, used, state.warmup_end))

    def end_epoch(self) -> bool:
        """Start the next epoch's order; validate and return True when max_epochs are done."""
        self.state.position = 0
        if self.cfg.max_epochs and self.state.epoch >= self.cfg.max_epochs:
            self.state.elapsed = time.perf_counter() - self.start
            self.validate()
            return True
        return False

    def log_train(self, seconds: float) -> None:
        """Add a step's time to the window; every `log_every` steps write the averages of the
        window's settled steps (those skipped for a NaN/inf loss left out)."""
        state = self.state
        state.window.seconds += seconds
        if state.step % self.cfg.log_every or not state.window.losses:
            return
        record = train_record(state, self.updater.lr, self.world.size)  # the step's own rate
        self.metrics.write(record)
        self.bar.show_record(record, state.window, state.epoch)
        state.window = LogWindow()

    def validate(self) -> bool:
        """Score the dev set, log it, save checkpoints; return True when patience runs out.
        Across processes rank 0 validates alone (the weights are the same on every rank)."""
        self.updater.settle(self.state)
        if not self.world.is_main:
            return False
        state = self.state
        losses, bleus = self.validation(self.updater.eval_model, state.best_bleu)
        bleu, probed = bleus["dev_bleu"], bleus.get("dev_bleu_sentences")
        improved, self.bar.dev = bleu > state.best_bleu, bleu
        self.metrics.write(valid_record(state, losses, bleus, improved))
        log.info("step %d: dev loss %.3f, dev BLEU %.2f%s%s, %.1f min", state.step,
                 losses["dev_loss"], bleu, f" (first {probed} sentences)" if probed else "",
                 " (best)" if improved else "", state.elapsed / 60)
        # Counters first, so the checkpoints hold them; the one --resume takes last, so a crash
        # before it validates again. best.pt and step_N.pt never share a file (clone or copy).
        state.bad_evals = 0 if improved else state.bad_evals + 1
        state.best_bleu = max(bleu, state.best_bleu)
        weights_only, step = self.cfg.step_checkpoints == "weights", f"step_{state.step}.pt"
        saved = self.save("best.pt" if improved else step, weights_only)
        if improved:
            copy_checkpoint(saved, self.run_dir / step)
        drop_old_steps(self.run_dir, self.cfg.keep_last, state.step)
        if weights_only:
            self.save("last.pt")
        return 0 < self.cfg.patience <= state.bad_evals

    def save(self, name: str, weights_only: bool = False) -> Path:
        """Write checkpoint `name` into the run folder (rank 0 alone) and return its path: the
        weights and the training state, or with `weights_only` the weights alone."""
        path, state = self.run_dir / name, self.state
        self.updater.settle(state)  # the checkpoint holds the log window and the bad-loss count
        if not self.world.is_main:
            return path
        kept = {**self.updater.weights(), "weights_only": True} if weights_only else {
            **self.updater.state_dict(), "rng": rng_state(self.device),
            "trainer": state.to_checkpoint(self.corpus_key)}
        save_checkpoint(path, self.updater.eval_model, self.recipe, self.tokenizer, state.step, {
            **kept, "best_dev_bleu": max(state.best_bleu, 0.0), "world_size": self.world.size,
            **({"run_id": self.run_id} if self.run_id else {})})
        return path

    def restore(self, data: dict) -> None:
        """Continue from a checkpoint `save()` wrote: weights, optimizer, counters, RNG, log."""
        self.updater.load_state_dict(data)
        self.state = TrainState.from_checkpoint(data, self.corpus_key)
        self.metrics.truncate(self.state.step)
        set_rng_state(data["rng"], self.device)
