"""The training loop: `Trainer.run()` takes optimizer steps until a stopping rule fires,
validating, logging and saving checkpoints as the recipe says.

On a GPU a step never waits for the device: its loss and NaN/inf flag stay there as tensors
(`StepFigures`) until the host needs them, when a log record is written, a checkpoint saved or
a validation run (`Trainer.settle`). A step whose loss was NaN or infinite on some rank still
makes no update, decided on the device (`optim.step_unless`); it is counted, warned about and
stopped on (`train.max_bad_losses`) when the figures are read. On the CPU, where reading a
value costs nothing, the flag is read at once and such a step is not counted at all.
"""

from __future__ import annotations

import copy
import logging
import signal
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Optional

import numpy as np
import torch
from torch import nn

from translate.batching import Batch, TokenBatches, collate, token_batches
from translate.checkpoint import (check_free_space, checkpoint_bytes, save_checkpoint,
                                  step_number, upgrade_state_dict)
from translate.config import ConfigError, Recipe
from translate.data import load_split
from translate.engine import engine_note, resolve_engine
from translate.metrics import LogWindow, MetricsLog
from translate.models import build_model, count_parameters
from translate.tokenizer import SubwordSampler
from translate.training.compilation import compiled, engine_name
from translate.training.distributed import (World, agree, all_sum, all_sum_, any_rank,
                                            from_main_numbers, step_seed, sum_gradients)
from translate.training.batch_loss import BatchLoss
from translate.training.graphs import StepGraphs, check_recipe
from translate.training.optim import (ema_decay, make_optimizer, plain_numbers,
                                      restore_lr_tensors, skips_on_device, step_unless,
                                      update_ema)
from translate.training.prepare import TrainingData
from translate.training.progress import TrainingBar
from translate.training.validation import dev_loss, perplexity, validation_scores
from translate.utils import (keep_freed_memory, pick_device, resolve_precision,
                             rng_state, seed_everything, set_rng_state, stop_signals)

log = logging.getLogger(__name__)


class TrainingError(RuntimeError):
    """Training cannot go on (say, the loss diverged); the message says why and what to change."""


@dataclass
class StepFigures:
    """One optimizer step as the log sees it; `sums` stays on the device until it is read."""

    sums: torch.Tensor  # (3,) over every rank: summed NLL, ranks with a NaN/inf loss, summed loss
    tokens: int  # target tokens of the step, every rank's
    step: int  # steps taken before this one
    epoch: int


class Interrupted(Exception):
    """SIGINT or SIGTERM stopped training after a checkpoint was saved."""

    def __init__(self, signum: int, step: int, checkpoint: Path):
        self.signum, self.step, self.checkpoint = signum, step, checkpoint
        name = signal.Signals(signum).name
        super().__init__(f"{name} received: stopped at step {step} and saved {checkpoint}; "
                         f"resume with: translate train --resume {checkpoint.parent}")


class Trainer:
    """Holds the model, optimizer and counters; `run()` trains until a stopping rule fires.

    The counters say where training stands, so a checkpoint of them resumes the run exactly:
    `epoch` (1-based once started) and `position`, the index of the next batch in that epoch's
    order, which is a function of the seed and the epoch alone.
    """

    def __init__(self, recipe: Recipe, run_dir: Path, data: TrainingData, metrics: MetricsLog,
                 device: Optional[str] = None, progress: bool = True, world: World = World()):
        self.recipe, self.run_dir, self.metrics, self.progress = recipe, run_dir, metrics, progress
        self.world = world  # the processes training together (translate.training.distributed)
        self.cfg = recipe.train
        self.device = pick_device(device)
        self.precision = resolve_precision(self.cfg.precision, self.device)
        if self.precision == "int8":
            raise ConfigError("train.precision int8 is for decoding only (translate decode/"
                              "evaluate --precision int8); train in fp32, bf16 or fp16")
        if self.cfg.compile and self.cfg.loss_chunk:
            raise ConfigError("train.loss_chunk projects the decoder's states outside the "
                              "compiled forward; set train.compile false or train.loss_chunk 0")
        if self.cfg.cuda_graphs:
            check_recipe(recipe, self.precision, world.size)
        if self.cfg.threads:
            torch.set_num_threads(self.cfg.threads)
        if self.cfg.keep_freed_memory and self.device.type == "cpu":
            keep_freed_memory()
        seed_everything(self.cfg.seed)
        self.engine = resolve_engine(engine_name(self.cfg), self.device)
        self.tokenizer, self.train_pairs, self.dev = data.tokenizer, data.train, data.dev
        tok = recipe.tokenizer
        self.sampler = None if tok.sampling_alpha is None else SubwordSampler(
            self.tokenizer, tok.sampling_alpha, tok.sampling_nbest, recipe.data.max_len)
        if self.sampler is not None and world.is_main:
            some = self.train_pairs.indices()[:2000]
            ratio = self.sampler.length_ratio([self.train_pairs.src[i] for i in some],
                                              [self.train_pairs.tgt[i] for i in some])
            log.info("subword sampling: %.2f pieces drawn per piece of the one best (%d train "
                     "pairs); batches hold as many more tokens than train.max_tokens, and pad "
                     "more", ratio, len(some))
        self.corpus_key, self.source = data.corpus_key, data.source
        model = build_model(recipe.model, self.tokenizer.src_vocab_size,
                            self.tokenizer.tgt_vocab_size, self.tokenizer.joint)
        self.model = self.engine.prepare(model.to(self.device))
        self.n_params = count_parameters(self.model)
        if world.is_main:
            processes = f", {world.size} processes" if world.size > 1 else ""
            log.info("%s: %.2fM parameters, device %s, precision %s%s, %d CPU threads%s; the "
                     "%s", recipe.model.arch, self.n_params / 1e6, self.device, self.precision,
                     self.step_note(), torch.get_num_threads(), processes,
                     engine_note(self.engine))
        # The compiled forward shares the model's parameters; checkpoints save the model itself,
        # so their names carry no torch.compile prefix.
        forward = compiled(self.model, self.device) if self.cfg.compile else self.model
        self.batch_loss = BatchLoss(self.model, forward, self.engine.loss, self.device,
                                    self.precision, self.cfg.loss_chunk)
        # Exponential moving average of the weights: validated, saved and used to translate.
        self.ema = copy.deepcopy(self.model).eval().requires_grad_(False) \
            if self.cfg.ema_decay > 0 else None
        self.figure_dtype = torch.float32 if self.device.type == "mps" else torch.float64
        self.optimizer, self.scheduler = make_optimizer(self.model, self.cfg,
                                                        capturable=self.cfg.cuda_graphs)
        # train.cuda_graphs: each step through a graph recorded once per batch shape
        self.graphs = StepGraphs(
            self.model, self.ema, self.optimizer, self.cfg.label_smoothing, self.cfg.clip_norm,
            self.batch_loss, self.device, self.figure_dtype,
        ) if self.cfg.cuda_graphs else None
        self.scaler = torch.amp.GradScaler(self.device.type, enabled=self.precision == "fp16")
        # Where reading a value from the device costs a sync (a GPU), a step's NaN/inf check
        # stays on the device and is read with the log; the CPU reads it at once.
        self.defer_checks = self.device.type == "cuda" and skips_on_device(self.optimizer)
        if world.is_main:
            check_free_space(run_dir, checkpoint_bytes(self.model, self.ema is not None))
        self.step = self.epoch = self.position = 0
        self.elapsed = self.train_seconds = 0.0  # wall-clock and optimizer-step seconds so far
        self.best_bleu, self.bad_evals, self.bad_losses = -1.0, 0, 0
        self.window = LogWindow()
        self.pending: list[StepFigures] = []  # steps whose figures the host has not read yet
        self.kept: list[Path] = []
        self.last_eval_seconds = 0.0
        self.run_id: str | None = None  # run.json's, written into every checkpoint

    # -- the loop ----------------------------------------------------------------------------

    def run(self) -> int:
        """Train until a stopping rule fires; SIGINT/SIGTERM save last.pt and raise Interrupted."""
        self.monitor = {s: load_split(self.source, s) for s in self.cfg.monitor_splits}
        self.bar = TrainingBar(self.cfg, self.step, self.elapsed,
                               enabled=self.progress and self.world.is_main)
        self.start = time.perf_counter() - self.elapsed  # a resumed run counts the time spent
        self.last_eval = time.perf_counter()
        stop = False
        with stop_signals(announce=self.world.is_main) as received:
            while not stop:
                if self.position == 0:
                    self.epoch += 1
                batches = self.epoch_batches()
                while self.position < len(batches) and not stop:
                    stop = self.next_step(batches)
                    if any_rank(bool(received), self.world):
                        signum = received[0] if received else signal.SIGTERM
                        raise Interrupted(signum, self.step, self.save("last.pt"))
                if not stop:
                    stop = self.end_epoch()
        self.bar.close()
        return self.step

    def next_step(self, batches: TokenBatches) -> bool:
        """Train on the epoch's next batch group, then log, validate and save as due; True when
        a stopping rule fired."""
        cfg = self.cfg
        step_batches = cfg.accum_steps * self.world.size  # what one optimizer step consumes
        chosen = batches[self.position: self.position + step_batches]
        group = [self.make_batch(idx) for idx in self.world.share(chosen)]
        if self.sampler is None:  # every rank's target tokens, from the order all ranks share
            tokens = sum(self.train_pairs.tgt.total_length(idx) for idx in chosen)
        else:  # segmentations drawn on each rank: their lengths are summed over the ranks
            tokens = round(all_sum([sum(b.num_tgt_tokens for b in group)], self.world)[0])
        self.position += step_batches
        t0 = time.perf_counter()
        figures = self.train_step(group, tokens)
        if figures is not None and self.step % cfg.log_every == 0:
            self.settle()  # on a GPU this waits for the queued steps: their time counts
        now = time.perf_counter()
        self.train_seconds += now - t0
        self.elapsed = now - self.start
        if figures is None:  # a skipped step (CPU): nothing to log, validate or save
            return False
        self.bar.advance(self.step, self.elapsed)
        self.log_train(now - t0)
        # Stop early enough that the final validation ends within the budget.
        out_of_time = cfg.max_minutes and (
            self.elapsed + self.last_eval_seconds >= cfg.max_minutes * 60)
        out_of_steps = cfg.max_steps and self.step >= cfg.max_steps
        due = (cfg.eval_every and self.step % cfg.eval_every == 0) or (
            cfg.eval_every_minutes and now - self.last_eval >= cfg.eval_every_minutes * 60)
        due, stop, progress = from_main_numbers(
            [due, out_of_time or out_of_steps, self.budget_used(len(batches))], self.world)
        self.scheduler.lr_lambdas[0].progress = progress  # LRSchedule: the budget used ...
        self.scheduler.step()  # ... sets the learning rate of the next step
        due, stop = due > 0, stop > 0
        if due or stop:
            stop = agree([self.validate()], self.world)[0] or stop
            self.last_eval = time.perf_counter()
            self.last_eval_seconds = self.last_eval - now
        elif cfg.save_every and self.step % cfg.save_every == 0:  # step_N.pt serves when due
            self.save("last.pt")
        return stop

    def make_batch(self, pairs: np.ndarray) -> Batch:
        """A batch, its pairs given by their indices, as tensors; with subword sampling,
        segmented afresh."""
        src = [self.train_pairs.src[i] for i in pairs]
        tgt = [self.train_pairs.tgt[i] for i in pairs]
        if self.sampler is not None:
            src, tgt = self.sampler(src, tgt)
        return collate(src, tgt, self.cfg.length_multiple)

    def budget_used(self, epoch_batches: int) -> float:
        """The fraction of the training budget used: of max_steps, max_minutes (the last
        validation's time counted ahead, as the stopping rule does) or max_epochs, whichever is
        furthest along; 0.0 with no budget."""
        cfg, used = self.cfg, [0.0]
        if cfg.max_steps:
            used.append(self.step / cfg.max_steps)
        if cfg.max_minutes:
            used.append((self.elapsed + self.last_eval_seconds) / (cfg.max_minutes * 60))
        if cfg.max_epochs:
            used.append((self.epoch - 1 + self.position / max(epoch_batches, 1)) / cfg.max_epochs)
        return min(max(used), 1.0)

    def end_epoch(self) -> bool:
        """Start the next epoch's order; validate and return True when max_epochs are done."""
        self.position = 0
        if self.cfg.max_epochs and self.epoch >= self.cfg.max_epochs:
            self.elapsed = time.perf_counter() - self.start
            self.validate()
            return True
        return False

    def epoch_batches(self) -> TokenBatches:
        """This epoch's batches (arrays of pair indices), in the order the seed and epoch fix."""
        pairs = self.train_pairs
        return token_batches(pairs.src.lengths, pairs.tgt.lengths, self.cfg.max_tokens,
                             shuffle=True, seed=self.cfg.seed * 1000 + self.epoch,
                             length_filter=pairs.length_filter,
                             multiple=self.cfg.length_multiple)

    def log_train(self, seconds: float) -> None:
        """Add a step's time to the window; every `log_every` steps write the averages of the
        window's settled steps (those skipped for a NaN/inf loss left out)."""
        w = self.window
        w.seconds += seconds
        if self.step % self.cfg.log_every or not w.losses:
            return
        lr = float(self.scheduler.get_last_lr()[0])  # a tensor with train.cuda_graphs
        record = {"kind": "train", "step": self.step, "epoch": self.epoch,
                  "loss": sum(w.losses) / len(w.losses), "lr": lr,
                  "tok_per_s": w.tokens / max(w.seconds, 1e-9), "elapsed": self.elapsed,
                  "train_seconds": self.train_seconds, "world_size": self.world.size,
                  "step_tokens": w.tokens / len(w.losses)}  # target tokens per step, all ranks
        self.metrics.write(record)
        self.bar.show(loss=f"{record['loss']:.3f}", lr=f"{lr:.2e}",
                      tok_s=f"{record['tok_per_s']:.0f}", ep=self.epoch)
        self.window = LogWindow()

    # -- one optimizer step ------------------------------------------------------------------

    def train_step(self, batches: list[Batch], tokens: Optional[int] = None
                   ) -> Optional[StepFigures]:
        """Forward/backward over this rank's batches of the step, then one optimizer step.

        Args:
            batches: this rank's share of the step's batches.
            tokens: target tokens in the step's batches on every rank (default: in `batches`,
                right for a lone process).

        Returns the step's figures, still on the device, also added to `pending` for `settle`
        to read. A NaN or infinite loss on some rank means no update on any rank. On the CPU
        the step is then not taken at all, and None returned. On a GPU the optimizer skips it
        on the device and the step counts: the EMA and the step number go on (`next_step` steps
        the schedule), the weights and Adam's moments stay as they were.
        """
        tokens = tokens if tokens is not None else sum(b.num_tgt_tokens for b in batches)
        if self.world.size > 1:  # every rank's dropout from (seed, rank, step): exact resume
            torch.manual_seed(step_seed(self.cfg.seed, self.world.rank, self.step))
        if self.graphs is not None:
            return self.recorded_step(batches[0], tokens)
        self.model.train()
        loss_sum = nll_sum = torch.zeros((), dtype=self.figure_dtype, device=self.device)
        for batch in batches:
            batch = batch.to(self.device)
            loss, nll = self.batch_loss(batch.src, batch.tgt_in, batch.tgt_out,
                                        self.cfg.label_smoothing)
            loss_sum = loss_sum + loss.detach().to(self.figure_dtype)
            nll_sum = nll_sum + nll.detach().to(self.figure_dtype)
            if self.scaler.is_enabled():  # fp16: a NaN/inf loss makes every gradient NaN, so
                loss = loss * (loss.detach() * 0 + 1)  # the scaler skips the step (x 1 or NaN)
            self.scaler.scale(loss / tokens).backward()
        bad = (~torch.isfinite(loss_sum)).to(self.figure_dtype)
        sums = all_sum_(torch.stack([nll_sum, bad, loss_sum]), self.world)  # (3,) on the device
        figures = StepFigures(sums, tokens, self.step, self.epoch)
        if not self.defer_checks and sums[1].item():  # the CPU: reading it costs nothing
            self.optimizer.zero_grad(set_to_none=True)
            self.skip_bad_loss(sums[2].item(), figures)
            return None
        sum_gradients(self.model.parameters(), self.world)
        if self.cfg.clip_norm > 0:
            self.scaler.unscale_(self.optimizer)
            # error_if_nonfinite stays off: checking the norm would read it on the host
            nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.clip_norm)
        if self.defer_checks and not self.scaler.is_enabled():
            step_unless(self.optimizer, (sums[1] > 0).float())
        else:  # with fp16 the scaler skips the step when a gradient is NaN/inf (on the device
            # with the fused optimizer), and lowers its scale
            self.scaler.step(self.optimizer)
            self.scaler.update()
        self.optimizer.zero_grad(set_to_none=True)
        self.step += 1
        if self.ema is not None:
            update_ema(self.ema, self.model, self.cfg.ema_decay, self.step)
        self.pending.append(figures)
        return figures

    def recorded_step(self, batch: Batch, tokens: int) -> StepFigures:
        """`train_step` through the step's CUDA graph (`train.cuda_graphs`): the same update,
        with a NaN/inf loss skipped on the device on any device (counted when `settle` reads
        it), as on a GPU's eager step."""
        self.model.train()
        ema_weight = 1 - ema_decay(self.cfg.ema_decay, self.step + 1)
        figures = StepFigures(self.graphs.step(batch, tokens, ema_weight), tokens, self.step,
                              self.epoch)
        self.step += 1
        self.pending.append(figures)
        return figures

    def step_note(self) -> str:
        """How steps run, for the log's first line."""
        if self.cfg.compile:
            return ", compiled"
        if not self.cfg.cuda_graphs:
            return ""
        if self.device.type == "cuda":
            return ", CUDA graphs"
        return f", the step written for CUDA graphs run unrecorded (none on the {self.device.type})"

    def settle(self) -> None:
        """Read the pending steps' figures on the host, all in one transfer: their losses per
        token join the log window; a GPU's skipped steps are counted (`skip_bad_loss`).

        Every rank settles at the same steps (log steps, validations, saves), so a stop for too
        many bad losses happens on all of them at once.
        """
        if not self.pending:
            return
        pending, self.pending = self.pending, []
        values = torch.stack([f.sums for f in pending]).tolist()
        for figures, (nll, bad, loss) in zip(pending, values):
            if bad:
                self.skip_bad_loss(loss, figures)
            else:
                self.window.losses.append(nll / figures.tokens)
                self.window.tokens += figures.tokens

    def skip_bad_loss(self, loss: float, figures: StepFigures) -> None:
        """Count a step whose loss was NaN/inf on some rank (`loss`: summed over the ranks);
        warn, or stop once more than `max_bad_losses` were skipped."""
        self.bad_losses += 1
        where = (f"after step {figures.step}: {loss} loss on a step of {figures.tokens} target "
                 f"tokens (epoch {figures.epoch})")
        if self.bad_losses > self.cfg.max_bad_losses:
            raise TrainingError(f"{where}: {self.bad_losses} batches had a NaN/inf loss, over "
                                f"train.max_bad_losses ({self.cfg.max_bad_losses}); stopping. "
                                f"Lower train.lr or raise train.warmup, then --resume or restart")
        log.warning("%s: skipped (%d of at most %d)", where, self.bad_losses,
                    self.cfg.max_bad_losses)

    @property
    def eval_model(self) -> nn.Module:
        """The weights to validate, save and translate with: the EMA when there is one."""
        return self.ema if self.ema is not None else self.model

    # -- validation --------------------------------------------------------------------------

    def validate(self) -> bool:
        """Score the dev set, log it, save checkpoints; return True when patience runs out.
        Across processes rank 0 validates alone (the weights are the same on every rank)."""
        self.settle()
        if not self.world.is_main:
            return False
        model = self.eval_model
        loss = dev_loss(model, self.dev.pairs, self.cfg.max_tokens, self.device, self.precision,
                        self.engine, self.cfg.loss_chunk)
        splits = {"dev": (self.dev.src, self.dev.tgt), **self.monitor}
        bleus = validation_scores(model, self.tokenizer, self.recipe, splits, self.device,
                                  self.precision, self.engine)
        bleu = bleus["dev_bleu"]
        improved = bleu > self.best_bleu
        record = {"kind": "valid", "step": self.step, "epoch": self.epoch, "dev_loss": loss,
                  "dev_ppl": perplexity(loss), "best": improved, "elapsed": self.elapsed,
                  "train_seconds": self.train_seconds, **bleus}
        self.metrics.write(record)
        log.info("step %d: dev loss %.3f, dev BLEU %.2f%s, %.1f min", self.step, loss, bleu,
                 " (best)" if improved else "", self.elapsed / 60)
        # Counters first, so the checkpoints hold them; best.pt before step_N.pt, so a crash
        # between the two resumes from an older step and validates (and saves best.pt) again.
        self.bad_evals = 0 if improved else self.bad_evals + 1
        self.best_bleu = max(bleu, self.best_bleu)
        if improved:
            self.save("best.pt")
        self.save(f"step_{self.step}.pt")
        return 0 < self.cfg.patience <= self.bad_evals

    # -- checkpoints -------------------------------------------------------------------------

    def save(self, name: str) -> Path:
        """Write checkpoint `name` into the run folder (rank 0 alone); return its path."""
        path = self.run_dir / name
        self.settle()  # the checkpoint holds the log window and the bad-loss count
        if not self.world.is_main:
            return path
        save_checkpoint(path, self.eval_model, self.recipe, self.tokenizer, self.step, {
            # the optimizer's own weights, to resume from; "model" holds the EMA when enabled
            **({"train_model": self.model.state_dict()} if self.ema is not None else {}),
            "optimizer": plain_numbers(self.optimizer.state_dict()),
            "scheduler": plain_numbers(self.scheduler.state_dict()),
            "scaler": self.scaler.state_dict(),
            "rng": rng_state(self.device),
            "best_dev_bleu": max(self.best_bleu, 0.0),
            **({"run_id": self.run_id} if self.run_id else {}),
            "trainer": {"epoch": self.epoch, "position": self.position, "elapsed": self.elapsed,
                        "train_seconds": self.train_seconds, "best_bleu": self.best_bleu,
                        "bad_evals": self.bad_evals, "bad_losses": self.bad_losses,
                        "window": asdict(self.window), "corpus": self.corpus_key},
        })
        if name.startswith("step_"):
            self.kept.append(path)
            while len(self.kept) > self.cfg.keep_last:
                self.kept.pop(0).unlink(missing_ok=True)
        return path

    def restore(self, data: dict) -> None:
        """Continue from a checkpoint `save()` wrote: weights, optimizer, counters, RNG, log."""
        if self.ema is not None:
            self.ema.load_state_dict(upgrade_state_dict(data["model"]))
        self.model.load_state_dict(upgrade_state_dict(data.get("train_model", data["model"])))
        self.optimizer.load_state_dict(data["optimizer"])
        restore_lr_tensors(self.optimizer, self.cfg.cuda_graphs)
        for param, state in self.optimizer.state.items():  # torch checks counts, not shapes
            for name, value in state.items():
                if isinstance(value, torch.Tensor) and value.dim() and value.shape != param.shape:
                    raise ValueError(f"the optimizer's {name} of shape {tuple(value.shape)} does "
                                     f"not fit a weight of shape {tuple(param.shape)}")
        self.scheduler.load_state_dict(data["scheduler"])
        if data["scaler"]:
            self.scaler.load_state_dict(data["scaler"])
        state = data["trainer"]
        if state.get("corpus", self.corpus_key) != self.corpus_key:
            raise TrainingError("the train split is not the one this run was trained on (a file's "
                                "size or content changed since the checkpoint); restore it, or "
                                "start a new run to train on the new data")
        self.step = int(data["step"])
        self.epoch, self.position = state["epoch"], state["position"]
        self.elapsed, self.train_seconds = state["elapsed"], state["train_seconds"]
        self.best_bleu, self.bad_evals = state["best_bleu"], state["bad_evals"]
        self.bad_losses, self.window = state["bad_losses"], LogWindow(**state["window"])
        self.kept = sorted((p for p in self.run_dir.glob("step_*.pt")
                            if 0 <= step_number(p) <= self.step), key=step_number)
        self.metrics.truncate(self.step)
        set_rng_state(data["rng"], self.device)
