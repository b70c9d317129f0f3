"""`train.compile`: which engine a compiled run takes, and `torch.compile` once it is known to
work on this machine.

Tests: tests/training/test_compile.py.
"""

from __future__ import annotations

import torch
from torch import nn

from translate.config import ConfigError, TrainConfig
from translate.utils import first_line


def engine_name(cfg: TrainConfig) -> str:
    """The engine to train with: under torch.compile the plain one, which compile speeds up
    itself; the fast engine's CPU modules are written for eager mode (compiled, a tiny model's
    step ran tens of times slower than the compiled plain one). CUDA graphs record the plain
    engine too (`translate.training.graphs` refuses the fast one)."""
    if cfg.cuda_graphs and not cfg.compile:
        return "plain" if cfg.engine == "auto" else cfg.engine
    if not cfg.compile:
        return cfg.engine
    if cfg.engine == "fast":
        raise ConfigError("train.compile takes the plain engine: set train.engine to auto or "
                          "plain, or train.compile to false")
    return "plain"


def compiled(model: nn.Module, device: torch.device) -> nn.Module:
    """`torch.compile(model)`, once a tiny function compiled on `device` showed that the backend
    works here: inductor builds C++ kernels for the CPU (it needs a C++ compiler) and Triton
    kernels for a GPU. Where it cannot, a ConfigError says so before training starts, not a
    traceback at the first step."""
    x = torch.ones(2, device=device, requires_grad=True)
    try:
        torch.compile(_compile_probe, dynamic=False)(x).backward()
    except RuntimeError as e:  # BackendCompilerFailed, or no dynamo for this Python
        raise ConfigError(f"train.compile: torch.compile cannot compile for the {device.type} "
                          f"on this machine ({first_line(e)}); inductor needs a C++ compiler "
                          f"(g++ or clang++; CXX names another) on the CPU and Triton on a GPU. "
                          f"Install it, or set train.compile false") from None
    return torch.compile(model)


def _compile_probe(x: torch.Tensor) -> torch.Tensor:
    return (x * 2).sin().sum()
