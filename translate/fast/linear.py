"""Linear layers whose fp32 inference on the CPU runs through oneDNN with packed weights.

On the CPU `F.linear` calls the BLAS that PyTorch was built with (MKL); oneDNN, which PyTorch
also ships, with the weight packed once into its blocked layout, runs the decoder's matmuls
faster (`benchmarks/linear.py`; docs/results.md, the fast engine's parts); decoding is mostly
such matmuls.
oneDNN also applies ReLU or GELU to the output as it writes it. Training, autocast and other
devices keep `F.linear`; the results agree to float rounding.

`linear(x, layers)` computes several layers that read the same input with one matmul (their
weights side by side), as self-attention's Q, K and V projections.

Tests: tests/fast/test_fast_engine.py, tests/fast/test_quantize.py.
"""

from __future__ import annotations

from typing import Optional, Sequence

import torch
import torch.nn.functional as F
from torch import nn
from torch.autograd.graph import increment_version

from translate.models.transformer import ACTIVATIONS

ONEDNN = (torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")
          and hasattr(torch.ops.mkldnn, "_reorder_linear_weight"))
# the activations oneDNN applies as it writes a matmul's output (erf GELU, as F.gelu's); the rest
# run the textbook's function (`ACTIVATIONS`, translate.models.transformer) afterwards
POST_OPS = {None: ("none", ""), "relu": ("relu", ""), "gelu": ("gelu", "none")}


def onednn_applies(x: torch.Tensor, weight: torch.Tensor) -> bool:
    """fp32 inference on the CPU: no autograd, no autocast."""
    return (ONEDNN and x.device.type == "cpu" and x.dtype == weight.dtype == torch.float32
            and not torch.is_grad_enabled() and not torch.is_autocast_enabled("cpu"))


class PackedWeights:
    """Some layers' weights side by side and their biases joined, for inference: packed for
    oneDNN, or plain in the dtype the matmul runs in (autocast's, say). Made on first use and
    again whenever a weight or bias changes (an optimizer step, loading, averaging: the tensor's
    version moves) or another form is asked for."""

    def __init__(self):
        self.key, self.weight, self.bias = None, None, None

    def get(self, layers: Sequence[nn.Linear], pack: bool = True,
            dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
        key = (tuple((t.data_ptr(), t._version) for layer in layers
                     for t in (layer.weight, layer.bias) if t is not None), pack, dtype)
        if key != self.key:
            weight = torch.cat([layer.weight.detach() for layer in layers]).to(dtype).contiguous()
            self.weight = torch.ops.mkldnn._reorder_linear_weight(weight) if pack else weight
            self.bias = (None if layers[0].bias is None else
                         torch.cat([layer.bias.detach() for layer in layers]).to(dtype))
            self.key = key
        return self.weight, self.bias


def linear(x: torch.Tensor, layers: Sequence[nn.Linear], packed: PackedWeights,
           activation: Optional[str] = None) -> torch.Tensor:
    """activation(x [W_1; W_2; ...]^T + [b_1; b_2; ...]): the layers' outputs side by side,
    (..., in) -> (..., sum of out), in one matmul; oneDNN with `packed` where it applies."""
    weight, bias = layers[0].weight, layers[0].bias
    if onednn_applies(x, weight):
        attr, algorithm = POST_OPS[activation]
        packed_weight, bias = packed.get(layers)
        return torch.ops.mkldnn._linear_pointwise(x, packed_weight, bias, attr, [], algorithm)
    if len(layers) > 1 and torch.is_grad_enabled():  # training: gradients reach every layer
        weight = torch.cat([layer.weight for layer in layers])
        bias = None if bias is None else torch.cat([layer.bias for layer in layers])
    elif len(layers) > 1:  # inference: joined once, in the dtype autocast would cast them to
        device = x.device.type
        dtype = (torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device)
                 else weight.dtype)
        weight, bias = packed.get(layers, pack=False, dtype=dtype)
    y = F.linear(x, weight, bias)
    return ACTIVATIONS[activation](y) if activation else y


class NoPickledPacks:
    """Copies and pickles leave packed weights behind (they cannot be copied; they are remade)."""

    def __getstate__(self):
        state = super().__getstate__().copy()
        return {k: v for k, v in state.items() if not isinstance(v, PackedWeights)}

    def packs(self, name: str) -> PackedWeights:
        """The module's packed weights called `name`, made empty on first use."""
        if name not in self.__dict__:
            self.__dict__[name] = PackedWeights()
        return self.__dict__[name]


class PackedLinear(NoPickledPacks, nn.Linear):
    """nn.Linear (same parameters and state dict) whose fp32 CPU inference runs through oneDNN."""

    def forward(self, x: torch.Tensor, activation: Optional[str] = None) -> torch.Tensor:
        """x weight^T + bias, then `activation` ("relu", "gelu" or None)."""
        return linear(x, [self], self.packs("_packed"), activation)


def watch_optimizer(optimizer: torch.optim.Optimizer) -> None:
    """Make a fused optimizer's steps move its weights' versions, as an in-place update does:
    the fused AdamW kernel leaves them alone, and `PackedWeights` remakes its packed copy only
    when a version moves."""
    if optimizer.defaults.get("fused"):
        optimizer.register_step_post_hook(_mark_weights_changed)


def _mark_weights_changed(optimizer: torch.optim.Optimizer, args, kwargs) -> None:
    increment_version([p for group in optimizer.param_groups for p in group["params"]])
