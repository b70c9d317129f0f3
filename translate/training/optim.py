"""The optimizer, its learning-rate schedule and the weight average (EMA)."""

from __future__ import annotations

import math
from typing import Optional

import torch
from torch import nn

from translate.config import TrainConfig


def inverse_sqrt_lr(step: int, peak: float, warmup: int) -> float:
    """Linear warm-up to `peak` over `warmup` steps, then peak * sqrt(warmup / step)."""
    step = max(step, 1)
    if step < warmup:
        return peak * step / warmup
    return peak * math.sqrt(warmup / step)


def make_optimizer(model: nn.Module, cfg: TrainConfig, fused: Optional[bool] = None
                   ) -> tuple[torch.optim.AdamW, torch.optim.lr_scheduler.LambdaLR]:
    """AdamW at `cfg.lr`, scaled each step by the inverse square root schedule. `fused` (by
    default on a GPU) takes the fused kernel: one launch for every parameter, and a step that
    `step_unless` can skip on the device."""
    if fused is None:
        fused = next(model.parameters()).device.type == "cuda"
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr, betas=tuple(cfg.betas), eps=1e-9,
                                  weight_decay=cfg.weight_decay, fused=fused or None)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: inverse_sqrt_lr(s, 1.0, cfg.warmup))
    return optimizer, scheduler


def skips_on_device(optimizer: torch.optim.Optimizer) -> bool:
    """Whether `step_unless` can skip the optimizer's step on the device (the fused kernels)."""
    return bool(getattr(optimizer, "_step_supports_amp_scaling", False))


def step_unless(optimizer: torch.optim.Optimizer, skip: torch.Tensor) -> None:
    """`optimizer.step()`, except where `skip` is 1.0: then the weights, Adam's moments and its
    step count stay as they are. The flag is read by the kernel, never on the host.

    Args:
        skip: () float32 on the weights' device, 1.0 (skip) or 0.0; the fused kernels read it
            as `found_inf`, the attribute torch.amp.GradScaler sets for them to skip a step
            whose gradients overflowed.
    """
    if not skips_on_device(optimizer):
        raise ValueError("step_unless needs an optimizer that skips on the device (fused=True)")
    optimizer.found_inf, optimizer.grad_scale = skip, None
    try:
        optimizer.step()
    finally:
        del optimizer.found_inf, optimizer.grad_scale


@torch.no_grad()
def update_ema(ema: nn.Module, model: nn.Module, decay: float, step: int) -> None:
    """ema <- d * ema + (1 - d) * model, with d = min(decay, (1 + step) / (10 + step)).

    The ramp keeps the average from dragging early, near-random weights along: its window,
    1 / (1 - d), grows with training (about step / 9) until it reaches 1 / (1 - decay).
    """
    d = min(decay, (1 + step) / (10 + step))
    torch._foreach_lerp_(list(ema.parameters()), list(model.parameters()), 1 - d)
