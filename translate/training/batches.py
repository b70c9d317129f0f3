"""The train split as a run's batches: each epoch's order, fixed by the seed and the epoch, and
each batch's tensors, its pairs segmented afresh when the recipe samples subwords.

Tests: tests/training/test_loop.py, tests/training/test_subword_sampling.py.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Optional

import numpy as np
import torch

from translate.config import Recipe, TrainConfig
from translate.data.batch import Batch, TokenBatches, collate, token_batches
from translate.data.encode import EncodedPairs
from translate.tokenizer import SubwordSampler, Tokenizer
from translate.training.distributed import World, all_sum

log = logging.getLogger(__name__)


# Lengths rounded up to a multiple of this where bf16 training runs on a CPU (`auto`)
ONEDNN_MULTIPLE = 8


def length_multiple(cfg: TrainConfig, device: torch.device, precision: str) -> int:
    """`train.length_multiple` resolved for a run on `device` in `precision`: 0 (auto) is 8
    where a CPU trains in bf16, else 1.

    A CPU's bf16 matmuls run on oneDNN, which builds a kernel for each shape it meets: built
    afresh at every matmul, they left bf16 steps 0.6x as fast on an Intel Xeon with AMX; kept,
    they cost gigabytes when every batch is a new shape. Lengths rounded up to 8 make a few
    dozen shapes, whose kernels a training process keeps (`keeps_kernels`): 1.7x the target
    tokens a second of building every kernel afresh, its memory near flat
    (docs/journal/2026-12-07-amx-shapes.md). Elsewhere each batch is padded to its longest."""
    if cfg.length_multiple:
        return cfg.length_multiple
    return ONEDNN_MULTIPLE if device.type == "cpu" and precision == "bf16" else 1


def keeps_kernels(device: torch.device, precision: str, multiple: int) -> bool:
    """Whether a training process keeps oneDNN's kernels (else `hardware.bound_kernel_caches`):
    where a CPU trains in bf16 on batches of a few shapes (`multiple` >= 8)."""
    return device.type == "cpu" and precision == "bf16" and multiple >= ONEDNN_MULTIPLE


@dataclass
class TrainBatcher:
    """The encoded train pairs as a run batches them (`train.max_tokens`, lengths rounded up to
    `multiple`, the seed)."""

    pairs: EncodedPairs
    cfg: TrainConfig
    multiple: int = 1  # train.length_multiple, resolved (`length_multiple`)
    sampler: Optional[SubwordSampler] = None  # tokenizer.sampling_alpha's

    def epoch(self, epoch: int) -> TokenBatches:
        """Epoch `epoch`'s batches (arrays of pair indices), in the order the seed and it fix."""
        pairs, cfg = self.pairs, self.cfg
        return token_batches(pairs.src.lengths, pairs.tgt.lengths, cfg.max_tokens,
                             shuffle=True, seed=cfg.seed * 1000 + epoch,
                             length_filter=pairs.length_filter, multiple=self.multiple)

    def batch(self, indices: np.ndarray) -> Batch:
        """A batch, its pairs given by their indices, as tensors; with subword sampling,
        segmented afresh."""
        src = [self.pairs.src[i] for i in indices]
        tgt = [self.pairs.tgt[i] for i in indices]
        if self.sampler is not None:
            src, tgt = self.sampler(src, tgt)
        return collate(src, tgt, self.multiple)

    def tokens(self, chosen: list, group: list[Batch], world: World) -> int:
        """The target tokens of a step's batches on every rank: `chosen`, the step's index
        arrays (all ranks'); `group`, this rank's share as batches."""
        if self.sampler is None:  # from the order all ranks share
            return sum(self.pairs.tgt.total_length(idx) for idx in chosen)
        # segmentations drawn on each rank: their lengths are summed over the ranks
        return round(all_sum([sum(b.num_tgt_tokens for b in group)], world)[0])


def train_batcher(recipe: Recipe, tokenizer: Tokenizer, pairs: EncodedPairs, world: World,
                  multiple: int = 1) -> TrainBatcher:
    """The run's batcher, lengths rounded up to `multiple` (`length_multiple`); with
    tokenizer.sampling_alpha, its subword sampler, whose extra pieces per sentence the main
    process logs."""
    tok = recipe.tokenizer
    if tok.sampling_alpha is None:
        return TrainBatcher(pairs, recipe.train, multiple)
    sampler = SubwordSampler(tokenizer, tok.sampling_alpha, tok.sampling_nbest,
                             recipe.data.max_len)
    if world.is_main:
        some = pairs.indices()[:2000]
        ratio = sampler.length_ratio([pairs.src[i] for i in some], [pairs.tgt[i] for i in some])
        log.info("subword sampling: %.2f pieces drawn per piece of the one best (%d train "
                 "pairs); batches hold as many more tokens than train.max_tokens, and pad "
                 "more", ratio, len(some))
    return TrainBatcher(pairs, recipe.train, multiple, sampler)
