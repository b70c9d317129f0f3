"""Validation: the dev loss, and the BLEU of the dev split (and any monitored split) translated
the way `translate decode` would, with validation's own beam (`train.valid_beam`).

Tests: tests/training/test_validation_probe.py.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import torch
from torch import nn

from translate.config import DataConfig, Recipe
from translate.data.batch import iterate_batches
from translate.data.encode import EncodedPairs
from translate.data.read import load_split
from translate.engine import Engine
from translate.evaluation import evaluate_split
from translate.ready import Ready
from translate.tokenizer import Tokenizer
from translate.training.batch_loss import BatchLoss
from translate.training.prepare import DevSplit


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


def validation_scores(ready: Ready, recipe: Recipe, splits: dict[str, tuple[list[str], list[str]]]
                      ) -> dict[str, float]:
    """{"<split>_bleu": BLEU} for each split of (sources, references), decoded with `ready` as
    the recipe says, with validation's beam."""
    cfg = replace(recipe.decode, beam=recipe.train.valid_beam)
    return {f"{name}_bleu": evaluate_split(ready, src, ref, cfg, recipe.data.tgt_lang).scores.bleu
            for name, (src, ref) in splits.items()}


# While a run's best dev BLEU is under UNTRAINED_BLEU, validation first translates the first
# PROBE_SENTENCES dev sentences; if they score under it too, that is the validation's dev BLEU:
# an untrained model writes every sentence to the length cap, and all of dev would cost minutes.
UNTRAINED_BLEU, PROBE_SENTENCES = 1.0, 128


def perplexity(loss: float) -> float:
    return math.exp(min(loss, 50))


@dataclass
class Validation:
    """What a run validates on and how: `validation(model)` gives the dev loss and perplexity,
    and the BLEU of the dev split and of each of `train.monitor_splits`."""

    recipe: Recipe
    tokenizer: Tokenizer
    dev: DevSplit
    device: torch.device
    precision: str
    engine: Engine
    source: DataConfig  # where the monitored splits are read (the recipe's, or TRANSLATE_DATA)
    monitor: dict = field(init=False)  # split -> (sources, references)

    def __post_init__(self):
        self.monitor = {s: load_split(self.source, s) for s in self.recipe.train.monitor_splits}

    def __call__(self, model: nn.Module, best_bleu: float = 100.0) -> tuple[dict, dict]:
        """Dev loss and BLEUs; with `best_bleu` (the run's so far) under UNTRAINED_BLEU, the dev
        BLEU of the first PROBE_SENTENCES alone ("dev_bleu_sentences") if they too score under
        it, and no monitored split."""
        cfg = self.recipe.train
        loss = dev_loss(model, self.dev.pairs, cfg.max_tokens, self.device, self.precision,
                        self.engine, cfg.loss_chunk)
        losses = {"dev_loss": loss, "dev_ppl": perplexity(loss)}
        if best_bleu < UNTRAINED_BLEU and len(self.dev.src) > PROBE_SENTENCES:
            probe = (self.dev.src[:PROBE_SENTENCES], self.dev.tgt[:PROBE_SENTENCES])
            bleu = self.scores(model, {"dev": probe})["dev_bleu"]
            if bleu < UNTRAINED_BLEU:
                return losses, {"dev_bleu": bleu, "dev_bleu_sentences": PROBE_SENTENCES}
        return losses, self.scores(model, {"dev": (self.dev.src, self.dev.tgt), **self.monitor})

    def scores(self, model: nn.Module, splits: dict[str, tuple[list[str], list[str]]]
               ) -> dict[str, float]:
        """{"<split>_bleu": BLEU} of each split, decoded with validation's beam."""
        return validation_scores(self.ready(model), self.recipe, splits)

    def ready(self, model: nn.Module) -> Ready:
        """`model` (the one training, or its weight average) as validation decodes it: on the
        run's device, in its training precision, with its engine, which the model was built
        with: nothing left to resolve or prepare."""
        return Ready(model, self.tokenizer, self.device, self.precision, self.engine,
                     self.recipe)
