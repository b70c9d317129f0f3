"""Models for tests of shapes, files and numbers, not skill: an untrained tiny Transformer with
its tokenizer, and the weights an attention module attended with."""

from __future__ import annotations

from pathlib import Path

import torch

from helpers.files import read_jsonl


def untrained_model(data: Path, layers: int = 1, overrides: tuple[str, ...] = ()):
    """(recipe, tokenizer, model) for tests of shapes and files, not skill: a joint 200-piece
    tokenizer trained on 500 pairs of `data` and a d_model=32 Transformer of `layers` layers a
    side (and the recipe `overrides`, e.g. "model.positions=rope", or "tokenizer.joint=false" for
    one vocabulary a side), drawn with seed 0."""
    from translate.config import load_recipe
    from translate.models import build_model
    from translate.tokenizer import Tokenizer

    rows = read_jsonl(data / "train.jsonl", 500)
    cfg = load_recipe(None, ["tokenizer.vocab_size=200", "model.d_model=32", "model.heads=2",
                             "model.ffn_dim=64", f"model.encoder_layers={layers}",
                             f"model.decoder_layers={layers}", *overrides])
    tokenizer = Tokenizer.train([r["en"] for r in rows], [r["de"] for r in rows], cfg.tokenizer)
    torch.manual_seed(0)
    model = build_model(cfg.model, tokenizer.src_vocab_size, tokenizer.tgt_vocab_size,
                        cfg.tokenizer.joint)
    return cfg, tokenizer, model


def with_weights(attn: torch.nn.Module, *args, **kwargs) -> tuple[torch.Tensor, torch.Tensor]:
    """One call of an attention module: its output, and the weights it attended with, as
    `translate.alignment.record_attention` records them: (B, H, T, S) for
    MultiHeadAttention, (B, 1, S) for AdditiveAttention."""
    from translate.alignment import record_attention

    with record_attention(attn) as recorded:
        out = attn(*args, **kwargs)
    [(weights,)] = recorded.values()  # one module, called once
    return out, weights
