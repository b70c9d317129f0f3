"""The optimizers (AdamW; with `train.optimizer: muon`, Muon for the hidden matrices beside it),
their learning-rate schedule (`lr_scale`, a pure function the trainer calls each step; the rate
written into the optimizers' parameter groups by `write_lr`) and the weight average (EMA).

Tests: tests/training/test_optimizers.py, tests/training/test_schedule.py.
"""

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


def lr_scale(cfg: TrainConfig, step: int, used: float, warmup_end: Optional[float]) -> float:
    """The learning rate after `step` steps, as a fraction of its peak: a function of the steps
    taken, of `used`, the training budget's fraction used so far, and of `warmup_end`, the
    fraction used when warm-up ended (None until then; `warmup_ended` records it).

    Every schedule (`cfg.lr_schedule`) warms up linearly over `cfg.warmup` steps. After that,
    `inverse_sqrt` decays as sqrt(warmup / step) and never ends; `linear` and `cosine` decay to
    zero as the training budget runs out, over the part of it left when warm-up ends; `wsd`
    (warm-up, stable, decay) holds the peak until the budget's last `cfg.decay_fraction`, then
    decays to zero over it. The budget's fraction used is that of max_steps, max_minutes or
    max_epochs, whichever is furthest along (`state.budget_used`). So a 60-minute run ends at a
    small learning rate on any machine, however many steps it makes there (and `wsd` decays in
    its last 12 minutes at 0.2). The trainer keeps `warmup_end` in its state, which a
    checkpoint saves, so a resumed run goes on where it stood.
    """
    step = max(step, 1)
    if cfg.lr_schedule == "inverse_sqrt" or step < cfg.warmup:
        return inverse_sqrt_lr(step, 1.0, cfg.warmup)
    start = used if warmup_end is None else warmup_end  # None: warm-up ends at this step
    if cfg.lr_schedule == "wsd":  # stable at the peak until the last decay_fraction (or warm-up
        start = max(start, 1.0 - cfg.decay_fraction)  # ends, if that is later)
    if start >= 1.0:
        return 0.0
    done = min(max((used - start) / (1.0 - start), 0.0), 1.0)
    if cfg.lr_schedule == "linear":
        return 1.0 - done
    if cfg.lr_schedule == "wsd":  # 1 - sqrt: beat a linear decay of the same length in
        return 1.0 - math.sqrt(done)  # Hägele et al. 2024 (arXiv:2405.18392)
    return 0.5 * (1.0 + math.cos(math.pi * done))  # cosine


def warmup_ended(cfg: TrainConfig, step: int, used: float, warmup_end: Optional[float]
                 ) -> Optional[float]:
    """`lr_scale`'s `warmup_end` after `step` steps with the budget's fraction `used`:
    `warmup_end` once known; else, for a schedule that decays with the budget, `used` at the
    first step past warm-up; else None."""
    if warmup_end is None and cfg.lr_schedule != "inverse_sqrt" and max(step, 1) >= cfg.warmup:
        return used
    return warmup_end


def write_lr(optimizer: torch.optim.Optimizer, lr: float) -> None:
    """Set every parameter group of `optimizer` to learning rate `lr`. A capturable optimizer's
    rate is a tensor on the device (`make_optimizer`), filled in place: a recorded CUDA graph
    reads it there."""
    for group in optimizer.param_groups:
        if isinstance(group["lr"], torch.Tensor):
            group["lr"].fill_(lr)
        else:
            group["lr"] = lr


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
                   capturable: bool = False) -> torch.optim.AdamW:
    """AdamW at its peak rate `cfg.lr` (each step's is set by the trainer: `Updater.set_lr`):
    over every parameter, or with `train.optimizer: muon` over those `muon_split` leaves it
    (`make_muon` makes Muon for the others). `fused` (by default on a GPU and a CPU) takes the
    fused kernel: one pass over every parameter's weights and moments (on a GPU one launch, and
    a step that `step_unless` can skip on the device).
    `capturable`: the learning rate is a tensor on the weights' device, which `write_lr` fills
    in place, so a recorded CUDA graph (`translate.training.graphs`) reads each step's. Its
    dtype is what each device's fused kernel reads a float learning rate as (CUDA's float32, the
    CPU's float64), so the update is the one a float learning rate makes."""
    device = next(model.parameters()).device
    if fused is None:
        fused = device.type in ("cuda", "cpu")
    lr = torch.tensor(cfg.lr, dtype=_lr_dtype(device), device=device) if capturable else cfg.lr
    params = muon_split(model)[1].values() if cfg.optimizer == "muon" else model.parameters()
    return torch.optim.AdamW(params, lr=lr, betas=tuple(cfg.betas), eps=1e-9,
                             weight_decay=cfg.weight_decay, fused=fused or None,
                             capturable=capturable)


def make_muon(model: nn.Module, cfg: TrainConfig) -> torch.optim.Muon:
    """torch.optim.Muon over the hidden matrices (`muon_split`) at its peak rate `cfg.muon_lr`;
    each step's is that peak scaled as AdamW's is (`Updater.set_lr`), so both warm up and decay
    as one."""
    return torch.optim.Muon(muon_split(model)[0].values(), lr=cfg.muon_lr,
                            momentum=cfg.muon_momentum, weight_decay=cfg.muon_weight_decay,
                            adjust_lr_fn=cfg.muon_adjust_lr)


def plain_numbers(state: dict) -> dict:
    """An optimizer's state dict with learning rates held as tensors (a capturable optimizer's)
    turned into floats, so a checkpoint reads the same on any device and resumes either kind of
    run; `restore_lr_tensors` turns them back."""
    def plain(value):
        return float(value) if isinstance(value, torch.Tensor) and value.dim() == 0 else value
    state = dict(state)
    if "param_groups" in state:
        state["param_groups"] = [{key: plain(value) if key == "lr" else value
                                  for key, value in group.items()}
                                 for group in state["param_groups"]]
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
    """Whether `step_unless` can skip the optimizer's step on the device: one built with
    `fused=True`, whose kernels read the skip flag (AdamW's; Muon has no fused kernel)."""
    return bool(optimizer.defaults.get("fused"))


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
    # PyTorch's EMA update (torch.optim.swa_utils): one multi-tensor lerp by 1 - d
    average = torch.optim.swa_utils.get_ema_multi_avg_fn(ema_decay(decay, step))
    average(list(ema.parameters()), list(model.parameters()), None)


def ema_decay(decay: float, step: int) -> float:
    """The EMA's decay after `step` steps: min(decay, (1 + step) / (10 + step))."""
    return min(decay, (1 + step) / (10 + step))
