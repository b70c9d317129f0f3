"""int8 decoding on the CPU: dynamic quantization of every linear layer."""

from __future__ import annotations

import copy
import warnings

import torch
from torch import nn


def quantize_int8(model: nn.Module) -> nn.Module:
    """A CPU copy of `model` for decoding whose linear layers hold int8 weights.

    Dynamic quantization: weights are quantized once, activations per batch on the fly, and the
    matmuls run in int8. Embeddings, LayerNorms and RNN cells stay fp32; the original model is
    left as it was.
    """
    model = copy.deepcopy(model).cpu().eval()
    for module in model.modules():
        if isinstance(module, nn.Linear) and type(module) is not nn.Linear:
            module.__class__ = nn.Linear  # quantize_dynamic converts exactly nn.Linear
    with warnings.catch_warnings():  # torch.ao.quantization is deprecated in favour of torchao
        warnings.simplefilter("ignore")
        return torch.ao.quantization.quantize_dynamic(model, {nn.Linear}, dtype=torch.qint8)
