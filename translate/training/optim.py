"""The optimizers (AdamW; with `train.optimizer: muon`, Muon for the hidden matrices beside it),
their learning-rate schedule and the weight average (EMA)."""

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


class LRSchedule:
    """The learning rate as a fraction of its peak, step by step (torch's LambdaLR calls it).

    Every schedule warms up linearly over `warmup` steps. After that, `inverse_sqrt` decays as
    sqrt(warmup / step) and never ends; `linear` and `cosine` decay to zero as the training
    budget runs out, over the part of it left when warm-up ends; `wsd` (warm-up, stable,
    decay) holds the peak until the budget's last `decay_fraction`, then decays to zero over
    it. The budget's fraction used, `progress`, is set by the trainer: max_steps, max_minutes
    or max_epochs, whichever is furthest along. So a 60-minute run ends at a small learning
    rate on any machine, however many steps it makes there (and `wsd` decays in its last 12
    minutes at 0.2). The schedule's state (`progress`, `decay_from`) is saved with the
    scheduler, so a resumed run goes on where it stood.
    """

    def __init__(self, kind: str, warmup: int, decay_fraction: float = 0.2):
        self.kind, self.warmup = kind, warmup
        self.decay_fraction = decay_fraction  # wsd: the budget's last part, where it decays
        self.progress = 0.0  # the budget's fraction used so far (the trainer sets it)
        self.decay_from: Optional[float] = None  # ... when warm-up ended

    def __call__(self, step: int) -> float:
        step = max(step, 1)
        if self.kind == "inverse_sqrt" or step < self.warmup:
            return inverse_sqrt_lr(step, 1.0, self.warmup)
        if self.decay_from is None:
            self.decay_from = self.progress
        start = self.decay_from
        if self.kind == "wsd":  # stable at the peak until the last decay_fraction (or warm-up
            start = max(start, 1.0 - self.decay_fraction)  # ends, if that is later)
        if start >= 1.0:
            return 0.0
        done = min(max((self.progress - start) / (1.0 - start), 0.0), 1.0)
        if self.kind == "linear":
            return 1.0 - done
        if self.kind == "wsd":  # 1 - sqrt: beat a linear decay of the same length in
            return 1.0 - math.sqrt(done)  # Hägele et al. 2024 (arXiv:2405.18392)
        return 0.5 * (1.0 + math.cos(math.pi * done))  # cosine


# The layers whose 2-D weights are hidden matrices, Muon's to train: linear layers, and the
# recurrent layers' input (weight_ih) and recurrent (weight_hh) matrices. A GRU's holds its
# three gates stacked, and Muon orthogonalises the stack as one matrix.
HIDDEN_LAYERS = (nn.Linear, nn.RNNBase, nn.RNNCellBase)


def muon_split(model: nn.Module) -> tuple[dict[str, nn.Parameter], dict[str, nn.Parameter]]:
    """The model's parameters by name: (Muon's, AdamW's), each parameter in one of them once.

    Muon takes the weight matrices of the hidden layers: attention's Q/K/V/out projections and
    the feed-forward layers; the RNN's input and recurrent matrices and its hidden projections.
    AdamW takes the rest: embeddings, the output layer (`model.output`, tied to the target
    embedding by default), norms, biases, and a layer to a single unit (Bahdanau's score v),
    whose (1, N) weight is a vector: orthogonalising it would only normalise it.
    """
    output = {id(p) for p in model.output.parameters()}
    hidden = {id(p) for module in model.modules() if isinstance(module, HIDDEN_LAYERS)
              for p in module.parameters(recurse=False)
              if p.ndim == 2 and min(p.shape) > 1 and id(p) not in output}
    muon, adamw = {}, {}
    for name, param in model.named_parameters():  # a tied parameter once, by its first name
        (muon if id(param) in hidden else adamw)[name] = param
    return muon, adamw


def muon_note(model: nn.Module) -> str:
    """Which parameters Muon trains, for the log."""
    muon, adamw = muon_split(model)
    size = sum(p.numel() for p in muon.values())
    return (f"Muon trains {len(muon)} hidden matrices ({size / 1e6:.2f}M parameters), AdamW "
            f"the other {len(adamw)} tensors")


def make_optimizer(model: nn.Module, cfg: TrainConfig, fused: Optional[bool] = None,
                   capturable: bool = False
                   ) -> tuple[torch.optim.AdamW, torch.optim.lr_scheduler.LambdaLR]:
    """AdamW at `cfg.lr`, scaled each step by `LRSchedule(cfg.lr_schedule)`: over every
    parameter, or with `train.optimizer: muon` over those `muon_split` leaves it (`make_muon`
    makes Muon for the others). `fused` (by default on a GPU and a CPU) takes the fused
    kernel: one pass over every parameter's weights and moments (on a GPU one launch, and a
    step that `step_unless` can skip on the device).
    `capturable`: the learning rate is a tensor on the weights' device, which the scheduler
    fills in place, so a recorded CUDA graph (`translate.training.graphs`) reads each step's. Its
    dtype is what each device's fused kernel reads a float learning rate as (CUDA's float32, the
    CPU's float64), so the update is the one a float learning rate makes."""
    device = next(model.parameters()).device
    if fused is None:
        fused = device.type in ("cuda", "cpu")
    lr = torch.tensor(cfg.lr, dtype=_lr_dtype(device), device=device) if capturable else cfg.lr
    params = muon_split(model)[1].values() if cfg.optimizer == "muon" else model.parameters()
    optimizer = torch.optim.AdamW(params, lr=lr, betas=tuple(cfg.betas), eps=1e-9,
                                  weight_decay=cfg.weight_decay, fused=fused or None,
                                  capturable=capturable)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, LRSchedule(cfg.lr_schedule, cfg.warmup, cfg.decay_fraction))
    return optimizer, scheduler


def make_muon(model: nn.Module, cfg: TrainConfig, schedule: LRSchedule
              ) -> tuple[torch.optim.Muon, torch.optim.lr_scheduler.LambdaLR]:
    """torch.optim.Muon over the hidden matrices (`muon_split`) at `cfg.muon_lr`, scaled each
    step by `schedule`, the one AdamW's scheduler follows, so both warm up and decay as one."""
    muon = torch.optim.Muon(muon_split(model)[0].values(), lr=cfg.muon_lr,
                            momentum=cfg.muon_momentum, weight_decay=cfg.muon_weight_decay,
                            adjust_lr_fn=cfg.muon_adjust_lr)
    return muon, torch.optim.lr_scheduler.LambdaLR(muon, schedule)


def plain_numbers(state: dict) -> dict:
    """An optimizer's or scheduler's state dict with learning rates held as tensors (a
    capturable optimizer's) turned into floats, so a checkpoint reads the same on any device
    and resumes either kind of run; `restore_lr_tensors` turns them back."""
    def plain(value):
        return float(value) if isinstance(value, torch.Tensor) and value.dim() == 0 else value
    state = dict(state)
    if "param_groups" in state:
        state["param_groups"] = [{key: plain(value) if key in ("lr", "initial_lr") else value
                                  for key, value in group.items()}
                                 for group in state["param_groups"]]
    for key in ("base_lrs", "_last_lr"):
        if key in state:
            state[key] = [plain(value) for value in state[key]]
    return state


def restore_lr_tensors(optimizer: torch.optim.Optimizer, capturable: bool) -> None:
    """After `load_state_dict`, which takes the saved groups' options and float learning rates:
    the run's own `capturable`, and with it its learning rates back in device tensors."""
    for group in optimizer.param_groups:
        group["capturable"] = capturable
        lr = float(group["lr"])
        if capturable:
            device = group["params"][0].device
            lr = torch.tensor(lr, dtype=_lr_dtype(device), device=device)
        group["lr"] = lr


def _lr_dtype(device: torch.device) -> torch.dtype:
    return torch.float64 if device.type == "cpu" else torch.float32


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
    torch._foreach_lerp_(list(ema.parameters()), list(model.parameters()),
                         1 - ema_decay(decay, step))


def ema_decay(decay: float, step: int) -> float:
    """The EMA's decay after `step` steps: min(decay, (1 + step) / (10 + step))."""
    return min(decay, (1 + step) / (10 + step))
