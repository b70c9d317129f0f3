"""Validation: the dev loss, and the BLEU of the dev split (and any monitored split) translated
the way `translate decode` would, with validation's own beam (`train.valid_beam`)."""

from __future__ import annotations

import math
from dataclasses import replace

import torch
from torch import nn

from translate.config import Recipe
from translate.data.batch import iterate_batches
from translate.data.encode import EncodedPairs
from translate.engine import Engine
from translate.evaluation import evaluate_split
from translate.tokenizer import Tokenizer
from translate.training.batch_loss import BatchLoss


@torch.no_grad()
def dev_loss(model: nn.Module, pairs: EncodedPairs, max_tokens: int, device: torch.device,
             precision: str, engine: Engine, loss_chunk: int = 0) -> float:
    """Mean negative log-likelihood per target token (no label smoothing); `loss_chunk` as in
    training (`train.loss_chunk`)."""
    model.eval()
    batch_loss = BatchLoss(model, model, engine.loss, device, precision, loss_chunk)
    nll, tokens = 0.0, 0
    for batch in iterate_batches(pairs, max_tokens, shuffle=False):
        batch = batch.to(device)
        nll += float(batch_loss(batch.src, batch.tgt_in, batch.tgt_out, 0.0)[1])
        tokens += batch.num_tgt_tokens
    return nll / max(tokens, 1)


def validation_scores(model: nn.Module, tokenizer: Tokenizer, recipe: Recipe,
                      splits: dict[str, tuple[list[str], list[str]]], device: torch.device,
                      precision: str, engine: Engine) -> dict[str, float]:
    """{"<split>_bleu": BLEU} for each split of (sources, references), decoded as the recipe
    says with validation's beam."""
    cfg = replace(recipe.decode, beam=recipe.train.valid_beam)
    return {f"{name}_bleu": evaluate_split(model, tokenizer, src, ref, cfg,
                                           recipe.data.tgt_lang, device, precision,
                                           engine).scores.bleu
            for name, (src, ref) in splits.items()}


def perplexity(loss: float) -> float:
    return math.exp(min(loss, 50))
