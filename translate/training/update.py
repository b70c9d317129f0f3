"""One optimizer update with the bookkeeping a real run needs around the textbook step
(`translate.training.step.plain_step`): several batches a step, fp16 loss scaling, the all-reduce
across processes, the weight average, and NaN/inf checks that stay on a GPU.

On a GPU a step never waits for the device: its loss and NaN/inf flag stay there as tensors
(`StepFigures`) until the host needs them, when a log record is written, a checkpoint saved or
a validation run (`Updater.settle`). A step whose loss was NaN or infinite on some rank still
makes no update, decided on the device (`optim.step_unless`); it is counted, warned about and
stopped on (`train.max_bad_losses`) when the figures are read. On the CPU, where reading a
value costs nothing, the flag is read at once and such a step is not counted at all.

Tests: tests/training/test_step.py, tests/reliability/test_loop_signals.py.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Optional

import torch
from torch import nn

from translate.config import TrainConfig
from translate.data.batch import Batch
from translate.training.batch_loss import BatchLoss
from translate.training.distributed import World, all_sum_, step_seed, sum_gradients
from translate.training.graphs import StepGraphs
from translate.training.optim import (ema_decay, plain_numbers, restore_lr_tensors, step_unless,
                                      update_ema, write_lr)
from translate.training.state import TrainingError, TrainState
from translate.weights import upgrade_state_dict

log = logging.getLogger(__name__)


@dataclass
class StepFigures:
    """One optimizer step as the log sees it; `sums` stays on the device until it is read."""

    sums: torch.Tensor  # (3,) over every rank: summed NLL, ranks with a NaN/inf loss, summed loss
    tokens: int  # target tokens of the step, every rank's
    step: int  # steps taken before this one
    epoch: int


@dataclass
class Updater:
    """The model, its optimizer and the device bookkeeping of each update
    (`training.build.build_updater` makes one)."""

    cfg: TrainConfig
    model: nn.Module
    ema: Optional[nn.Module]  # the weight average: validated, saved and used to translate
    optimizer: torch.optim.Optimizer  # AdamW: every parameter, or those Muon leaves
    scaler: torch.amp.GradScaler  # enabled in fp16 only
    batch_loss: BatchLoss  # forward and loss, shared with the CUDA graphs and the dev loss
    graphs: Optional[StepGraphs]  # train.cuda_graphs: the step recorded per batch shape
    defer_checks: bool  # NaN/inf checks left on the device, read with the log (a GPU)
    figure_dtype: torch.dtype
    world: World
    # train.optimizer muon: Muon for the hidden matrices (`optim.muon_split`), its learning
    # rate on the same schedule as AdamW's (`set_lr`)
    muon: Optional[torch.optim.Muon] = None
    pending: list[StepFigures] = field(default_factory=list)  # figures the host has not read

    @property
    def optimizers(self) -> list[torch.optim.Optimizer]:
        """AdamW, and Muon when the run has it: every parameter is in one of them."""
        return [self.optimizer] + ([self.muon] if self.muon is not None else [])

    @property
    def peaks(self) -> list[float]:
        """The optimizers' peak learning rates, in the same order: train.lr, train.muon_lr."""
        return [self.cfg.lr] + ([self.cfg.muon_lr] if self.muon is not None else [])

    @property
    def lr(self) -> float:
        """AdamW's learning rate as its parameter groups hold it, the last one `set_lr` wrote
        (read from the device with train.cuda_graphs)."""
        return float(self.optimizer.param_groups[0]["lr"])

    @property
    def eval_model(self) -> nn.Module:
        """The weights to validate, save and translate with: the EMA when there is one."""
        return self.ema if self.ema is not None else self.model

    def step(self, batches: list[Batch], tokens: int, state: TrainState
             ) -> Optional[StepFigures]:
        """Forward/backward over this rank's `batches`, then one optimizer step; `tokens`: the
        target tokens of the step's batches on every rank.

        Returns the step's figures, still on the device, also added to `pending` for `settle`
        to read. A NaN or infinite loss on some rank means no update on any rank. On the CPU
        the step is then not taken at all, and None returned. On a GPU the optimizer skips it
        on the device and the step counts: the EMA and the step number go on (`Trainer` sets
        the next rates), the weights and Adam's moments stay as they were.
        """
        cfg = self.cfg
        if self.world.size > 1:  # every rank's dropout from (seed, rank, step): exact resume
            torch.manual_seed(step_seed(cfg.seed, self.world.rank, state.step))
        if self.graphs is not None:
            return self._recorded(batches[0], tokens, state)
        self.model.train()
        device = self.batch_loss.device
        loss_sum = nll_sum = torch.zeros((), dtype=self.figure_dtype, device=device)
        for batch in batches:
            batch = batch.to(device)
            loss, nll = self.batch_loss(batch.src, batch.tgt_in, batch.tgt_out,
                                        cfg.label_smoothing)
            loss_sum = loss_sum + loss.detach().to(self.figure_dtype)
            nll_sum = nll_sum + nll.detach().to(self.figure_dtype)
            if self.scaler.is_enabled():  # fp16: a NaN/inf loss makes every gradient NaN, so
                loss = loss * (loss.detach() * 0 + 1)  # the scaler skips the step (x 1 or NaN)
            self.scaler.scale(loss / tokens).backward()
        bad = (~torch.isfinite(loss_sum)).to(self.figure_dtype)
        sums = all_sum_(torch.stack([nll_sum, bad, loss_sum]), self.world)  # (3,) on the device
        figures = StepFigures(sums, tokens, state.step, state.epoch)
        if not self.defer_checks and sums[1].item():  # the CPU: reading it costs nothing
            self.zero_grad()
            self.skip_bad_loss(state, sums[2].item(), figures)
            return None
        sum_gradients(self.model.parameters(), self.world)
        self._update(sums[1])
        state.step += 1
        if self.ema is not None:
            update_ema(self.ema, self.model, cfg.ema_decay, state.step)
        self.pending.append(figures)
        return figures

    def _update(self, bad: torch.Tensor) -> None:
        """Clip the summed gradients and take the optimizer step; none where `bad` > 0 (ranks
        whose loss was NaN/inf), decided on the device when the checks are deferred."""
        if self.cfg.clip_norm > 0:
            for optimizer in self.optimizers:
                self.scaler.unscale_(optimizer)
            # error_if_nonfinite stays off: checking the norm would read it on the host
            nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.clip_norm)
        if self.defer_checks and not self.scaler.is_enabled():
            skip = (bad > 0).float()
            for optimizer in self.optimizers:  # fused ones all (`build_updater`)
                step_unless(optimizer, skip)
        else:  # with fp16 the scaler skips the step when a gradient is NaN/inf (on the device
            # with the fused optimizer), and lowers its scale
            for optimizer in self.optimizers:
                self.scaler.step(optimizer)
            self.scaler.update()
        self.zero_grad()

    def zero_grad(self) -> None:
        """Clear every parameter's gradient."""
        for optimizer in self.optimizers:
            optimizer.zero_grad(set_to_none=True)

    def set_lr(self, scale: float) -> None:
        """Write the next step's learning rates into the optimizers' parameter groups: `scale`
        (the schedule's, `optim.lr_scale`) times each one's peak, so Muon warms up and decays as
        AdamW does."""
        for optimizer, peak in zip(self.optimizers, self.peaks):
            write_lr(optimizer, peak * scale)

    def _recorded(self, batch: Batch, tokens: int, state: TrainState) -> StepFigures:
        """`step` through the step's CUDA graph (`train.cuda_graphs`): the same update, with a
        NaN/inf loss skipped on the device on any device (counted when `settle` reads it), as on
        a GPU's eager step."""
        self.model.train()
        ema_weight = 1 - ema_decay(self.cfg.ema_decay, state.step + 1)
        figures = StepFigures(self.graphs.step(batch, tokens, ema_weight), tokens, state.step,
                              state.epoch)
        state.step += 1
        self.pending.append(figures)
        return figures

    def settle(self, state: TrainState) -> None:
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
                self.skip_bad_loss(state, loss, figures)
            else:
                state.window.losses.append(nll / figures.tokens)
                state.window.tokens += figures.tokens

    def skip_bad_loss(self, state: TrainState, loss: float, figures: StepFigures) -> None:
        """Count a step whose loss was NaN/inf on some rank (`loss`: summed over the ranks);
        warn, or stop once more than `max_bad_losses` were skipped."""
        state.bad_losses += 1
        most = self.cfg.max_bad_losses
        where = (f"after step {figures.step}: {loss} loss on a step of {figures.tokens} target "
                 f"tokens (epoch {figures.epoch})")
        if state.bad_losses > most:
            raise TrainingError(f"{where}: {state.bad_losses} batches had a NaN/inf loss, over "
                                f"train.max_bad_losses ({most}); stopping. "
                                f"Train anew (another --run-dir, or --overwrite) with a lower "
                                f"train.lr or a longer train.warmup: a resumed run keeps its "
                                f"rates and would diverge again")
        log.warning("%s: skipped (%d of at most %d)", where, state.bad_losses, most)

    def _load_optimizers(self, data: dict) -> None:
        """The optimizers' states from checkpoint `data`: AdamW's, and Muon's where the run has
        it (a resumed run keeps its train.optimizer). Their parameter groups hold the learning
        rates the next step takes, as `set_lr` wrote them before the checkpoint was saved."""
        saved = "muon" if "muon" in data else "adamw"
        if saved != self.cfg.optimizer:
            raise ValueError(f"the checkpoint holds the state of train.optimizer {saved}, not "
                             f"of {self.cfg.optimizer}; resume with the run's own recipe")
        self.optimizer.load_state_dict(data["optimizer"])
        restore_lr_tensors(self.optimizer, self.cfg.cuda_graphs)
        if self.muon is not None:
            self.muon.load_state_dict(data["muon"])
        for optimizer in self.optimizers:  # torch checks counts, not shapes
            for param, state in optimizer.state.items():
                for name, value in state.items():
                    if isinstance(value, torch.Tensor) and value.dim() and \
                            value.shape != param.shape:
                        raise ValueError(f"the optimizer's {name} of shape {tuple(value.shape)} "
                                         f"does not fit a weight of shape {tuple(param.shape)}")

    def weights(self) -> dict:
        """The optimizer's own weights where the checkpoint's "model" holds the EMA (for
        `translate average --raw`); nothing without an EMA ("model" holds them)."""
        return {"train_model": self.model.state_dict()} if self.ema is not None else {}

    def state_dict(self) -> dict:
        """What a checkpoint needs to resume the updates, beside the weights it saves."""
        return {
            **self.weights(),
            "optimizer": plain_numbers(self.optimizer.state_dict()),
            **({"muon": self.muon.state_dict()} if self.muon is not None else {}),
            "scaler": self.scaler.state_dict(),
        }

    def load_state_dict(self, data: dict) -> None:
        """Weights, optimizers (with the next step's learning rates) and scaler from
        checkpoint `data`."""
        if self.ema is not None:
            self.ema.load_state_dict(upgrade_state_dict(data["model"]))
        self.model.load_state_dict(upgrade_state_dict(data.get("train_model", data["model"])))
        self._load_optimizers(data)
        if data["scaler"]:
            self.scaler.load_state_dict(data["scaler"])
