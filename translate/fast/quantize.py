"""int8 decoding on the CPU: dynamic quantization of every linear layer and decoder RNN cell.

Weights get one scale per output row (as CTranslate2 does); activations are quantized per call.
Where the fast engine computes several projections of one input with one matmul (self-
attention's Q, K, V; cross-attention's K, V of the memory), the int8 copy holds them as one
joined layer too, so each step quantizes that input once and makes one int8 matmul of it. With
ReLU, the first feed-forward layer applies it as it writes its output.
"""

from __future__ import annotations

import copy
import warnings
from typing import Sequence

import torch
from torch import nn
from torch.ao.nn.intrinsic import LinearReLU

from translate.fast.linear import PackedWeights
from translate.models.attention import CROSS, MultiHeadAttention
from translate.models.transformer import FeedForward

JOINED = {"qkv_int8": ("q_proj", "k_proj", "v_proj"), "kv_int8": ("k_proj", "v_proj")}


def joined_linear(layers: Sequence[nn.Linear]) -> nn.Linear:
    """One linear layer whose output is the layers' outputs side by side."""
    weight, bias = PackedWeights().get(layers, pack=False)  # (sum of out, in), (sum of out,)
    joined = nn.Linear(weight.size(1), weight.size(0), bias=bias is not None)
    with torch.no_grad():
        joined.weight.copy_(weight)
        if bias is not None:
            joined.bias.copy_(bias)
    return joined


def quantize_int8(model: nn.Module) -> nn.Module:
    """A CPU copy of `model` for decoding whose linear layers hold int8 weights.

    Dynamic quantization: weights are quantized once, activations per batch on the fly, and the
    matmuls run in int8, in the RNN decoder's cell too (the encoder's GRU or LSTM, run once
    per sentence, stays fp32, as do embeddings and norms); the original model is left as
    it was. Attention modules also get their joined projections (`JOINED`), which the
    fast engine uses and the plain one ignores.
    """
    model = copy.deepcopy(model).cpu().eval()
    for module in model.modules():
        if isinstance(module, nn.Linear) and type(module) is not nn.Linear:
            module.__class__ = nn.Linear  # quantize_dynamic converts exactly nn.Linear
    for module in list(model.modules()):
        if isinstance(module, MultiHeadAttention):
            name = "kv_int8" if module.role == CROSS else "qkv_int8"
            module.add_module(name, joined_linear([getattr(module, p) for p in JOINED[name]]))
        if isinstance(module, FeedForward) and module.activation == "relu":
            # the plain path applies ReLU again: ReLU(ReLU(x)) = ReLU(x)
            module.fc1 = LinearReLU(module.fc1, nn.ReLU())
    qconfig = torch.ao.quantization.per_channel_dynamic_qconfig
    cells = torch.ao.quantization.default_dynamic_qconfig  # PyTorch's int8 cells: per tensor
    with warnings.catch_warnings():  # torch.ao.quantization is deprecated in favour of torchao
        warnings.simplefilter("ignore")
        return torch.ao.quantization.quantize_dynamic(
            model, {nn.Linear: qconfig, LinearReLU: qconfig, nn.GRUCell: cells,
                    nn.LSTMCell: cells}, dtype=torch.qint8)
