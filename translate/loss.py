"""The training loss: label-smoothed cross-entropy (Szegedy et al., 2016), summed over tokens.

With smoothing eps the target distribution puts 1 - eps on the gold token and spreads eps evenly
over the vocabulary, so the model is never pushed towards infinitely confident logits.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def label_smoothed_cross_entropy(logits: torch.Tensor, target: torch.Tensor, epsilon: float,
                                 ignore_index: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Summed label-smoothed loss and summed plain NLL over non-ignored targets.

    Args:
        logits: (..., V) scores (any float dtype; computed in fp32).
        target: (...) gold ids; positions equal to `ignore_index` count for nothing.
        epsilon: label smoothing.

    Returns:
        The loss to minimise and the NLL (for perplexity), both summed over the targets.
    """
    logits = logits.reshape(-1, logits.size(-1)).float()  # (N, V)
    target = target.reshape(-1)  # (N,)
    loss = F.cross_entropy(logits, target, ignore_index=ignore_index, label_smoothing=epsilon,
                           reduction="sum")
    with torch.no_grad():
        nll = F.cross_entropy(logits, target, ignore_index=ignore_index, reduction="sum")
    return loss, nll
