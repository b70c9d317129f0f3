"""The train split as a run's batches: each epoch's order, fixed by the seed and the epoch, and
each batch's tensors, its pairs segmented afresh when the recipe samples subwords.

Tests: tests/training/test_loop.py, tests/training/test_subword_sampling.py.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Optional

import numpy as np

from translate.config import Recipe, TrainConfig
from translate.data.batch import Batch, TokenBatches, collate, token_batches
from translate.data.encode import EncodedPairs
from translate.tokenizer import SubwordSampler, Tokenizer
from translate.training.distributed import World, all_sum

log = logging.getLogger(__name__)


@dataclass
class TrainBatcher:
    """The encoded train pairs as a run batches them (`train.max_tokens`,
    `train.length_multiple`, the seed)."""

    pairs: EncodedPairs
    cfg: TrainConfig
    sampler: Optional[SubwordSampler] = None  # tokenizer.sampling_alpha's

    def epoch(self, epoch: int) -> TokenBatches:
        """Epoch `epoch`'s batches (arrays of pair indices), in the order the seed and it fix."""
        pairs, cfg = self.pairs, self.cfg
        return token_batches(pairs.src.lengths, pairs.tgt.lengths, cfg.max_tokens,
                             shuffle=True, seed=cfg.seed * 1000 + epoch,
                             length_filter=pairs.length_filter, multiple=cfg.length_multiple)

    def batch(self, indices: np.ndarray) -> Batch:
        """A batch, its pairs given by their indices, as tensors; with subword sampling,
        segmented afresh."""
        src = [self.pairs.src[i] for i in indices]
        tgt = [self.pairs.tgt[i] for i in indices]
        if self.sampler is not None:
            src, tgt = self.sampler(src, tgt)
        return collate(src, tgt, self.cfg.length_multiple)

    def tokens(self, chosen: list, group: list[Batch], world: World) -> int:
        """The target tokens of a step's batches on every rank: `chosen`, the step's index
        arrays (all ranks'); `group`, this rank's share as batches."""
        if self.sampler is None:  # from the order all ranks share
            return sum(self.pairs.tgt.total_length(idx) for idx in chosen)
        # segmentations drawn on each rank: their lengths are summed over the ranks
        return round(all_sum([sum(b.num_tgt_tokens for b in group)], world)[0])


def train_batcher(recipe: Recipe, tokenizer: Tokenizer, pairs: EncodedPairs,
                  world: World) -> TrainBatcher:
    """The run's batcher; with tokenizer.sampling_alpha, its subword sampler, whose extra
    pieces per sentence the main process logs."""
    tok = recipe.tokenizer
    if tok.sampling_alpha is None:
        return TrainBatcher(pairs, recipe.train)
    sampler = SubwordSampler(tokenizer, tok.sampling_alpha, tok.sampling_nbest,
                             recipe.data.max_len)
    if world.is_main:
        some = pairs.indices()[:2000]
        ratio = sampler.length_ratio([pairs.src[i] for i in some], [pairs.tgt[i] for i in some])
        log.info("subword sampling: %.2f pieces drawn per piece of the one best (%d train "
                 "pairs); batches hold as many more tokens than train.max_tokens, and pad "
                 "more", ratio, len(some))
    return TrainBatcher(pairs, recipe.train, sampler)
