"""One training step as the textbook writes it.

`Updater.step` (translate/training/update.py) takes this same step with the bookkeeping a real
run needs around it: several batches a step, fp16 loss scaling, NaN/inf checks that stay on a
GPU, the all-reduce across processes, the weight average. tests/training/test_plain_step.py
checks that the two compute the same loss and the same gradients, in fp32 and in bf16, with
AdamW alone and with Muon beside it.
"""

from __future__ import annotations

from typing import Sequence

import torch
from torch import nn

from translate.data.batch import Batch
from translate.hardware import autocast
from translate.loss import label_smoothed_cross_entropy
from translate.tokens import PAD


def plain_step(model: nn.Module, batch: Batch, optimizers: Sequence[torch.optim.Optimizer],
               lrs: Sequence[float], label_smoothing: float, clip_norm: float,
               precision: str = "fp32") -> float:
    """Learning rate, forward, loss, backward, clip, update; returns the batch's NLL per token.
    `optimizers`: AdamW, or Muon for the hidden matrices and AdamW for the rest; `lrs`: their
    learning rates for this step (each one's peak times the schedule's `optim.lr_scale`)."""
    for optimizer, lr in zip(optimizers, lrs):  # computed by the schedule, written in
        for group in optimizer.param_groups:
            group["lr"] = lr
    model.train()
    with autocast(batch.src.device, precision):
        logits = model(batch.src, batch.tgt_in)  # (B, T, V): teacher forcing
    loss, nll = label_smoothed_cross_entropy(logits, batch.tgt_out, label_smoothing, PAD)
    (loss / batch.num_tgt_tokens).backward()  # gradients of the mean loss per target token
    if clip_norm > 0:  # one long step after a bad batch is what clipping prevents
        nn.utils.clip_grad_norm_(model.parameters(), clip_norm)
    for optimizer in optimizers:  # each updates its own parameters
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return nll.item() / batch.num_tgt_tokens
