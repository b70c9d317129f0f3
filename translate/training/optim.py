"""The optimizer, its learning-rate schedule and the weight average (EMA)."""

from __future__ import annotations

import math

import torch
from torch import nn

from translate.config import TrainConfig


def inverse_sqrt_lr(step: int, peak: float, warmup: int) -> float:
    """Linear warm-up to `peak` over `warmup` steps, then peak * sqrt(warmup / step)."""
    step = max(step, 1)
    if step < warmup:
        return peak * step / warmup
    return peak * math.sqrt(warmup / step)


def make_optimizer(model: nn.Module, cfg: TrainConfig
                   ) -> tuple[torch.optim.AdamW, torch.optim.lr_scheduler.LambdaLR]:
    """AdamW at `cfg.lr`, scaled each step by the inverse square root schedule; on a GPU, the
    fused kernel (one launch for every parameter)."""
    on_gpu = next(model.parameters()).device.type == "cuda"
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr, betas=tuple(cfg.betas), eps=1e-9,
                                  weight_decay=cfg.weight_decay, fused=True if on_gpu else None)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: inverse_sqrt_lr(s, 1.0, cfg.warmup))
    return optimizer, scheduler


@torch.no_grad()
def update_ema(ema: nn.Module, model: nn.Module, decay: float, step: int) -> None:
    """ema <- d * ema + (1 - d) * model, with d = min(decay, (1 + step) / (10 + step)).

    The ramp keeps the average from dragging early, near-random weights along: its window,
    1 / (1 - d), grows with training (about step / 9) until it reaches 1 / (1 - decay).
    """
    d = min(decay, (1 + step) / (10 + step))
    torch._foreach_lerp_(list(ema.parameters()), list(model.parameters()), 1 - d)
