"""What a run trains on: the cleaned, encoded train split, the tokenizer and the dev split."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from translate.config import Recipe
from translate.data import (DataError, EncodedPairs, clean_text_pairs, encode_pairs,
                            filter_lengths, load_split, resolve_dataset)
from translate.tokenizer import Tokenizer
from translate.training.distributed import World, from_main

log = logging.getLogger(__name__)


@dataclass
class DevSplit:
    """The dev split: raw text to translate and score, token ids for the loss."""

    src: list[str]
    tgt: list[str]
    pairs: EncodedPairs


@dataclass
class TrainingData:
    tokenizer: Tokenizer
    train: EncodedPairs
    dev: DevSplit


def prepare_data(recipe: Recipe, run_dir: Path, tokenizer: Optional[Tokenizer] = None,
                 world: World = World()) -> TrainingData:
    """Load and clean the train split; train the tokenizer and save it into `run_dir` unless one
    is given (resuming); encode and length-filter; read the dev split. Across processes, rank 0
    trains the tokenizer and every rank gets its models."""
    cfg = recipe.data
    log.info("dataset: %s (%s -> %s)", resolve_dataset(cfg), cfg.src_lang, cfg.tgt_lang)
    src, tgt = load_split(cfg, "train")
    keep, stats = clean_text_pairs(src, tgt)
    if not keep:
        raise DataError(f"{resolve_dataset(cfg)}: the train split has no usable pairs "
                        f"({stats.total} read, {stats.empty} with an empty side, "
                        f"{stats.no_letters} without letters)")
    src, tgt = [src[i] for i in keep], [tgt[i] for i in keep]
    if tokenizer is None and world.is_main:
        tokenizer = Tokenizer.train(src, tgt, recipe.tokenizer, recipe.train.seed)
        tokenizer.save(run_dir, cfg.src_lang, cfg.tgt_lang)
    tokenizer = from_main(tokenizer, world)  # the other ranks get rank 0's
    log.info("tokenizer: %s %d pieces (%s)", recipe.tokenizer.model_type, tokenizer.tgt_vocab_size,
             "joint" if tokenizer.joint else "separate vocabularies")
    train = filter_lengths(encode_pairs(tokenizer, src, tgt, cfg.cache_dir), cfg.max_len,
                           cfg.max_len_ratio, stats)
    log.info("train pairs: %d read, %d kept (empty: %d, no letters: %d, over %d pieces: %d, "
             "length ratio over %.1f: %d)", stats.total, stats.kept, stats.empty, stats.no_letters,
             cfg.max_len, stats.too_long, cfg.max_len_ratio, stats.bad_ratio)
    if not len(train):
        raise DataError(f"{resolve_dataset(cfg)}: no training pair is left after cleaning and "
                        f"the length filter (data.max_len {cfg.max_len})")
    return TrainingData(tokenizer, train, read_dev(recipe, tokenizer))


def read_dev(recipe: Recipe, tokenizer: Tokenizer) -> DevSplit:
    """The dev split, cleaned as the train split is, and encoded."""
    cfg = recipe.data
    src, tgt = load_split(cfg, "dev")
    keep, _ = clean_text_pairs(src, tgt)
    src, tgt = [src[i] for i in keep], [tgt[i] for i in keep]
    return DevSplit(src, tgt, encode_pairs(tokenizer, src, tgt, cfg.cache_dir))
