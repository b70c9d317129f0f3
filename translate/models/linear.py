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


def onednn_applies(x: torch.Tensor, weight: torch.Tensor) -> bool:
    """fp32 inference on the CPU: no autograd, no autocast."""
    return (ONEDNN and x.device.type == "cpu" and x.dtype == weight.dtype == torch.float32
            and not torch.is_grad_enabled() and not torch.is_autocast_enabled("cpu"))


def linear(x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor] = None
           ) -> torch.Tensor:
    """F.linear: (..., in) x (out, in) -> (..., out); oneDNN for fp32 CPU inference."""
    if onednn_applies(x, weight):
        return torch.ops.mkldnn._linear_pointwise(x, weight, bias, "none", [], "")
    return F.linear(x, weight, bias)


class Linear(nn.Linear):
    """nn.Linear (same parameters and state dict) computed by `linear`, whose fp32 CPU inference
    uses a copy of the weight packed for oneDNN. The copy is made on first use and again
    whenever the weight changes (an optimizer step, loading, averaging: its version moves)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if onednn_applies(x, self.weight):
            return torch.ops.mkldnn._linear_pointwise(x, self._packed_weight(), self.bias,
                                                      "none", [], "")
        return F.linear(x, self.weight, self.bias)

    def _packed_weight(self) -> torch.Tensor:
        key = (self.weight.data_ptr(), self.weight._version)
        packed = self.__dict__.get("_packed")
        if packed is None or packed[0] != key:
            packed = (key, torch.ops.mkldnn._reorder_linear_weight(self.weight.detach()))
            self.__dict__["_packed"] = packed
        return packed[1]

    def __getstate__(self):
        """Copies and pickles leave the packed weight behind (it cannot be copied; it is remade)."""
        state = super().__getstate__().copy()
        state.pop("_packed", None)
        return state
