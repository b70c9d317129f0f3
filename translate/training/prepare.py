"""What a run trains on: the cleaned, encoded train split, the tokenizer and the dev split.

Tests: tests/training/test_training.py, tests/data/test_cache.py.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from translate.config import DataConfig, Recipe, TokenizerConfig
from translate.data import DataError
from translate.data.cache import encoded_corpus, sample_pairs
from translate.data.clean import CleanStats, clean_text_pairs
from translate.data.encode import EncodedPairs, encode_pairs, filter_lengths
from translate.data.read import find_split, load_split
from translate.tokenizer import Tokenizer
from translate.training.distributed import World, main_first, on_main

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
    source: DataConfig  # what the splits were read through; the monitor and test splits too
    corpus_key: str = ""  # the encoded train split's content and tokenizer (translate.data.cache)


def prepare_data(recipe: Recipe, run_dir: Path, tokenizer: Optional[Tokenizer] = None,
                 world: World = World(), progress: bool = False) -> TrainingData:
    """Train the tokenizer on a sample of the train split and save it into `run_dir`, unless one
    is given (resuming); encode the train split onto disk, or map an earlier encoding of it;
    filter lengths; read the dev split. Across processes rank 0 does each piece of work first;
    the other ranks get its tokenizer and map the corpus it wrote."""
    cfg, tok = recipe.data, recipe.tokenizer
    log.info("dataset: %s (%s -> %s)", cfg.dataset, cfg.src_lang, cfg.tgt_lang)
    if tokenizer is None:
        tokenizer = on_main(lambda: train_tokenizer(cfg, tok, recipe.train.seed, run_dir,
                                                    progress), world)
    sampling = "" if tok.sampling_alpha is None else (
        f"; subword sampling, alpha {tok.sampling_alpha:g}, nbest {tok.sampling_nbest or 'all'}")
    log.info("tokenizer: %s %d pieces (%s)%s", tok.model_type, tokenizer.tgt_vocab_size,
             "joint" if tokenizer.joint else "separate vocabularies", sampling)
    corpus = main_first(lambda: encoded_corpus(cfg, "train", tokenizer, cfg.num_proc, progress),
                        world)
    stats = corpus.stats
    if not stats.kept:
        raise no_usable_pairs(cfg, stats)
    train = filter_lengths(corpus.pairs, cfg.max_len, cfg.max_len_ratio, stats)
    log.info("train pairs: %d read, %d kept (empty: %d, no letters: %d, over %d pieces: %d, "
             "length ratio over %.1f: %d)", stats.total, stats.kept, stats.empty, stats.no_letters,
             cfg.max_len, stats.too_long, cfg.max_len_ratio, stats.bad_ratio)
    if not len(train):
        raise DataError(f"{cfg.dataset}: no training pair is left after cleaning and "
                        f"the length filter (data.max_len {cfg.max_len})")
    dev = read_dev(cfg, tokenizer)
    check_scored_splits(cfg, [*recipe.data.test_splits, *recipe.train.monitor_splits])
    return TrainingData(tokenizer, train, dev, cfg, corpus.key)


def check_scored_splits(cfg: DataConfig, splits: list[str]) -> None:
    """Refuse, before training, a test or monitored split that holds no sentence: it would be
    found empty only when the run scores it."""
    for split in dict.fromkeys(splits):
        src, _ = load_split(cfg, split)
        if not src:
            raise DataError(f"{find_split(cfg, split).where}: the {split} split holds no "
                            f"sentences; the run scores it (data.test_splits, "
                            f"train.monitor_splits): give one with sentences, or leave it out")


def train_tokenizer(cfg: DataConfig, tok: TokenizerConfig, seed: int, run_dir: Path,
                    progress: bool = False) -> Tokenizer:
    """SentencePiece trained on up to `tok.max_sentences` sentences drawn from the train split
    (or the recipe's `tokenizer.model`), saved into `run_dir`."""
    if tok.model:
        tokenizer = given_tokenizer(tok.model, tok.joint)
        tokenizer.save(run_dir, cfg.src_lang, cfg.tgt_lang)
        return tokenizer
    src, tgt, stats = sample_pairs(cfg, "train", tok.max_sentences // (2 if tok.joint else 1),
                                   seed, progress)
    if not src:
        raise no_usable_pairs(cfg, stats)
    sentences = len(src) + len(tgt) if tok.joint else f"{len(src)} + {len(tgt)}"
    log.info("training SentencePiece (%s, %d pieces%s) on %s sentences", tok.model_type,
             tok.vocab_size, ", joint" if tok.joint else "", sentences)
    start = time.perf_counter()
    tokenizer = Tokenizer.train(src, tgt, tok, seed)
    log.info("SentencePiece trained in %.1f s", time.perf_counter() - start)
    tokenizer.save(run_dir, cfg.src_lang, cfg.tgt_lang)
    return tokenizer


def given_tokenizer(path: str, joint: bool) -> Tokenizer:
    """The SentencePiece model a recipe names, as a joint tokenizer."""
    file = Path(path).expanduser()
    if not joint:
        raise DataError("tokenizer.model gives one vocabulary for both languages; set "
                        "tokenizer.joint: true")
    try:
        model = file.read_bytes()
        return Tokenizer(model, model)
    except OSError as e:
        raise DataError(f"tokenizer.model: cannot read {file} ({e.strerror})") from None
    except RuntimeError:
        raise DataError(f"tokenizer.model: {file} is not a SentencePiece model") from None


def no_usable_pairs(cfg: DataConfig, stats: CleanStats) -> DataError:
    return DataError(f"{cfg.dataset}: the train split has no usable pairs "
                     f"({stats.total} read, {stats.empty} with an empty side, "
                     f"{stats.no_letters} without letters)")


def read_dev(cfg: DataConfig, tokenizer: Tokenizer) -> DevSplit:
    """The dev split, cleaned as the train split is, and encoded."""
    src, tgt = load_split(cfg, "dev")
    keep, _ = clean_text_pairs(src, tgt)
    if not keep:
        raise DataError(f"{find_split(cfg, 'dev').where}: the dev split has no usable pairs "
                        f"({len(src)} read); training validates and picks best.pt on it: give "
                        f"a dev split with sentences (data.splits names it)")
    src, tgt = [src[i] for i in keep], [tgt[i] for i in keep]
    return DevSplit(src, tgt, encode_pairs(tokenizer, src, tgt))
