"""A Linear layer whose fp32 inference on the CPU runs through oneDNN.

On the CPU `F.linear` calls the BLAS that PyTorch was built with (MKL); oneDNN, which PyTorch
also ships, ran the decoder's matmuls up to 1.57x faster than it on the development machine
(`benchmarks/linear.py`), and decoding is mostly such matmuls. Training, autocast and other
devices keep `F.linear`; the two agree to float rounding.
"""

from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn


def _onednn_available() -> bool:
    return torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")


ONEDNN = _onednn_available()


def linear(x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor] = None
           ) -> torch.Tensor:
    """F.linear: (..., in) x (out, in) -> (..., out); oneDNN for fp32 CPU inference."""
    if (ONEDNN and x.device.type == "cpu" and x.dtype == weight.dtype == torch.float32
            and not torch.is_grad_enabled() and not torch.is_autocast_enabled("cpu")):
        return torch.ops.mkldnn._linear_pointwise(x, weight, bias, "none", [], "")
    return F.linear(x, weight, bias)


class Linear(nn.Linear):
    """nn.Linear (same parameters and state dict) computed by `linear`."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return linear(x, self.weight, self.bias)
