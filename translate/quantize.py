"""Decoding precisions: fp32, bf16/fp16 autocast, and int8 dynamic quantization on the CPU."""

from __future__ import annotations

import copy
import warnings

import torch
from torch import nn

from translate.models.attention import MultiHeadAttention
from translate.models.linear import Linear
from translate.utils import resolve_precision


def quantize_int8(model: nn.Module) -> nn.Module:
    """A CPU copy of `model` for decoding whose Linear layers hold int8 weights.

    Dynamic quantization: weights are quantized once, activations per batch on the fly, and the
    matmuls run in int8. Fused Q/K/V projections are split first (a quantized Linear has no
    weight to slice). Embeddings, LayerNorms and RNN cells stay fp32.
    """
    model = copy.deepcopy(model).cpu().eval()
    for module in model.modules():
        if isinstance(module, MultiHeadAttention):
            module.unfuse()
        if type(module) is Linear:  # it differs from nn.Linear only in forward; quantize_dynamic
            module.__class__ = nn.Linear  # converts modules of type nn.Linear exactly
    with warnings.catch_warnings():  # torch.ao.quantization is deprecated in favour of torchao
        warnings.simplefilter("ignore")
        return torch.ao.quantization.quantize_dynamic(model, {nn.Linear}, dtype=torch.qint8)


def decoding_model(model: nn.Module, precision: str, device: torch.device
                   ) -> tuple[nn.Module, str]:
    """The model to decode with on `device` and the autocast precision to run it under.

    `precision` is a recipe's or the command line's name (auto, fp32, bf16, fp16, int8): int8
    quantizes a copy and runs it without autocast; the others keep the model as it is.
    """
    precision = resolve_precision(precision, device)
    if precision == "int8":
        return quantize_int8(model), "fp32"
    return model, precision
