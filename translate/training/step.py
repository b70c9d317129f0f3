"""One training step as the textbook writes it.

`Updater.step` (translate/training/update.py) takes this same step with the bookkeeping a real
run needs around it: several batches a step, fp16 loss scaling, NaN/inf checks that stay on a
GPU, the all-reduce across processes, the weight average. tests/training/test_plain_step.py
checks that the two compute the same loss and the same gradients, in fp32 and in bf16.
"""

from __future__ import annotations

import torch
from torch import nn

from translate.data.batch import Batch
from translate.loss import label_smoothed_cross_entropy
from translate.tokens import PAD
from translate.utils import autocast


def plain_step(model: nn.Module, batch: Batch, optimizer: torch.optim.Optimizer, scheduler,
               label_smoothing: float, clip_norm: float, precision: str = "fp32") -> float:
    """Forward, loss, backward, clip, update, schedule; returns the batch's NLL per token."""
    model.train()
    with autocast(batch.src.device, precision):
        logits = model(batch.src, batch.tgt_in)  # (B, T, V): teacher forcing
    loss, nll = label_smoothed_cross_entropy(logits, batch.tgt_out, label_smoothing, PAD)
    (loss / batch.num_tgt_tokens).backward()  # gradients of the mean loss per target token
    if clip_norm > 0:  # one long step after a bad batch is what clipping prevents
        nn.utils.clip_grad_norm_(model.parameters(), clip_norm)
    optimizer.step()  # AdamW
    optimizer.zero_grad(set_to_none=True)
    scheduler.step()  # the learning rate of the next step
    return nll.item() / batch.num_tgt_tokens
