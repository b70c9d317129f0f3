"""The models: a recipe's `model.arch` names one entry of MODELS, its class and its config.

    attention.py    scaled dot-product attention written out, and one MultiHeadAttention for
                    the encoder's self-, the decoder's masked self- and cross-attention
    transformer.py  the Transformer: embeddings and positions, pre-norm encoder and decoder
    rnn.py          the attention RNN encoder-decoder (Bahdanau et al., 2014)
    interface.py    the contract every model offers to training, search and evaluation
"""

from __future__ import annotations

from typing import NamedTuple

from torch import nn

from translate.hardware import ModelTooLarge, check_fits_in_memory
from translate.models.interface import DecoderState, Seq2Seq
from translate.models.rnn import RNNConfig, RNNSeq2Seq
from translate.models.transformer import Transformer, TransformerConfig


class ModelEntry(NamedTuple):
    model: type[nn.Module]
    config: type


MODELS: dict[str, ModelEntry] = {
    "transformer": ModelEntry(Transformer, TransformerConfig),
    "rnn": ModelEntry(RNNSeq2Seq, RNNConfig),
}


def build_model(cfg, src_vocab: int, tgt_vocab: int, shared_vocab: bool) -> nn.Module:
    """Instantiate the model named by `cfg.arch` with its config `cfg`; refuse, before allocating
    anything, one whose fp32 weights alone would not fit in this machine's memory
    (`translate.hardware.check_fits_in_memory`)."""
    if cfg.arch not in MODELS:
        raise ValueError(f"unknown model arch '{cfg.arch}'; valid: {sorted(MODELS)}")
    parameters = cfg.parameter_count(src_vocab, tgt_vocab, shared_vocab)
    check_fits_in_memory(4 * parameters, f"the {cfg.arch} model of this recipe has about "
                                         f"{parameters / 1e9:.1f}G parameters")
    try:
        return MODELS[cfg.arch].model(cfg, src_vocab, tgt_vocab, shared_vocab)
    except RuntimeError as e:  # torch's CPU allocator says so in a RuntimeError
        if "alloc" not in str(e).lower():
            raise
        raise ModelTooLarge(f"the {cfg.arch} model of this recipe does not fit in memory "
                            f"({str(e).strip().splitlines()[-1][:200]}); make it smaller") from None


def count_parameters(model: nn.Module) -> int:
    """Trainable parameters, each shared (tied) tensor counted once."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


__all__ = ["MODELS", "DecoderState", "ModelTooLarge", "RNNConfig", "RNNSeq2Seq", "Seq2Seq",
           "Transformer", "TransformerConfig", "build_model", "count_parameters"]
