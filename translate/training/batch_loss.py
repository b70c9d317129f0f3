"""A batch's loss under teacher forcing, as a training step and the dev loss compute it.

Tests: tests/training/test_step.py, tests/training/test_plain_step.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
from torch import nn

from translate.gpu.loss import chunked_cross_entropy
from translate.hardware import autocast
from translate.tokens import PAD


@dataclass
class BatchLoss:
    """Summed label-smoothed loss and NLL of a batch: the model's logits and the engine's loss,
    or with `chunk` > 0 the model's output states and a loss that projects them `chunk` target
    tokens at a time, never holding the (B, T, V) logits (`train.loss_chunk`).

    Args:
        model: the model trained.
        forward: what computes its logits (the model, or its compiled forward).
        loss: the engine's loss on logits.
        chunk: target tokens projected at a time; 0: all the logits at once.
    """

    model: nn.Module
    forward: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
    loss: Callable
    device: torch.device
    precision: str
    chunk: int = 0

    def __call__(self, src: torch.Tensor, tgt_in: torch.Tensor, tgt_out: torch.Tensor,
                 epsilon: float, cache: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
        """(B, S) source, (B, T) target in and out -> the () summed loss and NLL; `cache`:
        autocast's weight cache (off while a CUDA graph records)."""
        with autocast(self.device, self.precision, cache=cache):
            if self.chunk:
                states = self.model.features(src, tgt_in)  # (B, T, D)
                return chunked_cross_entropy(states, self.model.output, tgt_out, epsilon, PAD,
                                             self.chunk)
            logits = self.forward(src, tgt_in)  # (B, T, V)
        return self.loss(logits, tgt_out, epsilon, PAD)
