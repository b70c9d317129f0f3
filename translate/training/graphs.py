"""`train.cuda_graphs`: the whole training step recorded once per batch shape as a CUDA graph,
then replayed with one launch.

A small model's step is hundreds of short kernels with Python between them, so the GPU spends
most of the step waiting for the host. A CUDA graph records the kernels of one step (forward,
loss, backward, gradient clipping, the fused AdamW update and the EMA) and replays them all at
once. A graph replays fixed memory at fixed addresses, so everything that changes from step to
step lives in device memory the graph reads:

    the batch              copied into buffers kept per shape (B, S, T): `Slots`
    the target tokens      a () tensor filled before each replay
    the learning rate      a tensor in the optimizer, which `Updater.set_lr` fills
    the EMA's weight       a () tensor, 1 - decay for this step
    a NaN/inf loss         decided on the device: the fused AdamW skips the update

Batches rounded to `train.length_multiple` come in a few shapes, so a run records a few graphs;
they share one memory pool. Nothing in the step reads a value on the host.

`StepGraphs.step` runs the same code whether it records or not. On a CPU there are no graphs and
it runs as written, which the tests compare with `Updater.step`.

Tests: tests/training/test_cuda_graphs.py, tests/reliability/test_cuda_graphs_input.py.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Optional

import torch
from torch import nn

from translate.config import ConfigError, Recipe
from translate.data.batch import Batch
from translate.training.batch_loss import BatchLoss
from translate.training.optim import step_unless

log = logging.getLogger(__name__)


def check_recipe(recipe: Recipe, precision: str, world_size: int) -> None:
    """Refuse, in one line each, what a recorded step cannot do."""
    cfg = recipe.train
    reasons = {
        "train.compile is the other way to cut launches; set one of the two":
            cfg.compile,
        "a graph records one batch a step; set train.accum_steps 1": cfg.accum_steps != 1,
        "the fp16 loss scaler reads its scale on the host; train in bf16 or fp32":
            precision == "fp16",
        "the graph holds one process's step; train with one process": world_size > 1,
        "the RNN packs its batches by lengths read on the host; train a transformer":
            recipe.model.arch != "transformer",
        "the graphs record the plain engine; set train.engine to auto or plain":
            cfg.engine == "fast",
        "Muon reads its learning rate on the host and cannot skip a step on the device; set "
        "train.optimizer adamw": cfg.optimizer == "muon",
    }
    for reason, refused in reasons.items():
        if refused:
            raise ConfigError(f"train.cuda_graphs: {reason}")


@dataclass
class Slots:
    """The device memory one batch shape's graph reads and writes."""

    src: torch.Tensor  # (B, S)
    tgt_in: torch.Tensor  # (B, T)
    tgt_out: torch.Tensor  # (B, T)
    tokens: torch.Tensor  # () float32: target tokens of the step, the loss's divisor
    sums: Optional[torch.Tensor] = None  # (3,) summed NLL, NaN/inf flag, summed loss
    graph: Optional["torch.cuda.CUDAGraph"] = None

    @classmethod
    def like(cls, batch: Batch, device: torch.device) -> "Slots":
        return cls(*(torch.empty_like(t, device=device)
                     for t in (batch.src, batch.tgt_in, batch.tgt_out)),
                   torch.zeros((), device=device))

    def fill(self, batch: Batch, tokens: int) -> None:
        """Copy a batch in: from pinned host memory to a GPU, so the copies do not wait."""
        for slot, value in zip((self.src, self.tgt_in, self.tgt_out),
                               (batch.src, batch.tgt_in, batch.tgt_out)):
            if slot.device.type == "cuda" and value.device.type == "cpu":
                value = value.pin_memory()
            slot.copy_(value, non_blocking=True)
        self.tokens.fill_(tokens)


class StepGraphs:
    """Training steps through one graph per batch shape (on CUDA), recorded at the shape's
    first batch: that batch's step runs eagerly, which also warms up what a recording needs
    (cuBLAS handles, autograd, the optimizer's state), then the step is recorded for the next.

    Args:
        model, ema: the weights trained and their average (None: no EMA).
        optimizer: a fused AdamW whose learning rate is a device tensor (`make_optimizer`
            with `capturable=True`).
        loss: a batch's forward and loss (the trainer's).
        figure_dtype: the dtype of the step's sums.
    """

    def __init__(self, model: nn.Module, ema: Optional[nn.Module], optimizer,
                 label_smoothing: float, clip_norm: float, loss: BatchLoss,
                 device: torch.device, figure_dtype: torch.dtype):
        self.model, self.optimizer, self.loss = model, optimizer, loss
        self.params = list(model.parameters())
        self.ema_params = list(ema.parameters()) if ema is not None else []
        self.label_smoothing, self.clip_norm = label_smoothing, clip_norm
        self.device, self.figure_dtype = device, figure_dtype
        self.records = device.type == "cuda"
        self.ema_weight = torch.zeros((), device=device)  # 1 - decay of this step's EMA update
        self.slots: dict[tuple[int, int, int], Slots] = {}
        self.pool = torch.cuda.graph_pool_handle() if self.records else None

    def step(self, batch: Batch, tokens: int, ema_weight: float) -> torch.Tensor:
        """One optimizer step on `batch`; returns its (3,) sums, still on the device."""
        shape = (batch.src.size(0), batch.src.size(1), batch.tgt_in.size(1))
        slots = self.slots.get(shape)
        if slots is None:
            slots = self.slots[shape] = Slots.like(batch, self.device)
        slots.fill(batch, tokens)
        self.ema_weight.fill_(ema_weight)
        if slots.graph is not None:
            slots.graph.replay()
            return slots.sums.clone()  # the next replay of any shape may reuse its memory
        if not self.records:
            return self.body(slots)
        sums = self.warm_up(slots)
        slots.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(slots.graph, pool=self.pool):
            slots.sums = self.body(slots)
        log.debug("recorded the training step for batches of shape %s (%d shapes so far)",
                  shape, len(self.slots))
        return sums

    def warm_up(self, slots: Slots) -> torch.Tensor:
        """The shape's first step, run eagerly on a side stream, as a recording asks."""
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            sums = self.body(slots)
        torch.cuda.current_stream().wait_stream(stream)
        return sums

    def body(self, slots: Slots) -> torch.Tensor:
        """The step itself: forward, loss, backward, clipping, AdamW (skipped on a NaN/inf
        loss, decided on the device) and the EMA. Returns the (3,) sums."""
        # autocast's weight cache would hold casts made during a recording: off
        loss, nll = self.loss(slots.src, slots.tgt_in, slots.tgt_out, self.label_smoothing,
                              cache=False)
        (loss / slots.tokens).backward()
        bad = (~torch.isfinite(loss)).float()  # () 1.0 on a NaN/inf loss
        if self.clip_norm > 0:
            nn.utils.clip_grad_norm_(self.params, self.clip_norm)
        step_unless(self.optimizer, bad)
        self.optimizer.zero_grad(set_to_none=True)
        if self.ema_params:
            with torch.no_grad():  # optim.update_ema's lerp, by a tensor each replay reads
                torch._foreach_lerp_(self.ema_params, self.params,
                                     [self.ema_weight] * len(self.params))
        return torch.stack([t.detach().to(self.figure_dtype) for t in (nll, bad, loss)])
