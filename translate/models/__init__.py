"""Model registry: the recipe's `model.arch` picks a class from MODELS."""

from __future__ import annotations

from torch import nn

from translate.models.rnn import RNNSeq2Seq
from translate.models.transformer import Transformer

MODELS: dict[str, type[nn.Module]] = {"transformer": Transformer, "rnn": RNNSeq2Seq}


def build_model(cfg, src_vocab: int, tgt_vocab: int, shared_vocab: bool) -> nn.Module:
    """Instantiate the model named by `cfg.arch`."""
    if cfg.arch not in MODELS:
        raise ValueError(f"unknown model arch '{cfg.arch}'; valid: {sorted(MODELS)}")
    return MODELS[cfg.arch](cfg, src_vocab, tgt_vocab, shared_vocab)


def count_parameters(model: nn.Module) -> int:
    """Trainable parameters, each shared (tied) tensor counted once."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)
