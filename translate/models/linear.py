"""A Linear layer whose fp32 inference on the CPU runs through oneDNN.

On the CPU `F.linear` calls the BLAS that PyTorch was built with (MKL); oneDNN, which PyTorch
also ships, with the weight packed once into its blocked layout, ran the decoder's matmuls
1.07-1.49x as fast on the development machine (`benchmarks/linear.py`); decoding is mostly
such matmuls. Training, autocast and other devices keep `F.linear`; the results agree to float
rounding.
"""

from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

ONEDNN = (torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")
          and hasattr(torch.ops.mkldnn, "_reorder_linear_weight"))


ALL = slice(None)
POST_OPS = {None: ("none", ""), "relu": ("relu", ""), "gelu": ("gelu", "none")}  # erf GELU
ACTIVATIONS = {"relu": F.relu, "gelu": F.gelu}


def onednn_applies(x: torch.Tensor, weight: torch.Tensor) -> bool:
    """fp32 inference on the CPU: no autograd, no autocast."""
    return (ONEDNN and x.device.type == "cpu" and x.dtype == weight.dtype == torch.float32
            and not torch.is_grad_enabled() and not torch.is_autocast_enabled("cpu"))


class Linear(nn.Linear):
    """nn.Linear (same parameters and state dict) whose fp32 CPU inference runs through oneDNN
    with a copy of the weight packed for it. The copy is made on first use and again
    whenever the weight changes (an optimizer step, loading, averaging: its version moves)."""

    def forward(self, x: torch.Tensor, activation: Optional[str] = None) -> torch.Tensor:
        """x weight^T + bias, then `activation` ("relu", "gelu" or None): oneDNN applies it to
        the matmul's output as it writes it."""
        return self._matmul(x, ALL, self.weight, self.bias, activation)

    def rows(self, x: torch.Tensor, rows: slice) -> torch.Tensor:
        """The output features `rows` only: (..., in) -> (..., len(rows)), as
        `self(x)[..., rows]` but computing just those (a fused Q/K/V projection's Q, say)."""
        bias = None if self.bias is None else self.bias[rows]
        return self._matmul(x, rows, self.weight[rows], bias)

    def _matmul(self, x: torch.Tensor, rows: slice, weight: torch.Tensor,
                bias: Optional[torch.Tensor], activation: Optional[str] = None) -> torch.Tensor:
        """activation(x weight^T + bias), where `weight` is `self.weight[rows]`."""
        if onednn_applies(x, weight):
            attr, algorithm = POST_OPS[activation]
            return torch.ops.mkldnn._linear_pointwise(x, self._packed_weight(rows), bias, attr,
                                                      [], algorithm)
        y = F.linear(x, weight, bias)
        return ACTIVATIONS[activation](y) if activation else y

    def _packed_weight(self, rows: slice) -> torch.Tensor:
        key = (self.weight.data_ptr(), self.weight._version)
        packed = self.__dict__.setdefault("_packed", {})  # (start, stop) -> (key, weight)
        span = (rows.start, rows.stop)
        if span not in packed or packed[span][0] != key:
            weight = self.weight.detach()[rows].contiguous()
            packed[span] = (key, torch.ops.mkldnn._reorder_linear_weight(weight))
        return packed[span][1]

    def __getstate__(self):
        """Copies and pickles leave the packed weights behind (they cannot be copied; they are
        remade)."""
        state = super().__getstate__().copy()
        state.pop("_packed", None)
        return state
