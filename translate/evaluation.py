"""Decode a split and score it: what training's dev and test decodes, `translate evaluate` and
`translate compare` all do, written once; and `translate evaluate`'s own scoring and report."""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Sequence

import torch
from torch import nn

from translate.config import DecodeConfig
from translate.decode_io import read_lines
from translate.data import DataError
from translate.engine import PLAIN, Engine
from translate.inference import translate_sentences
from translate.scoring import Scores, score
from translate.tokenizer import Tokenizer


@dataclass
class SplitResult:
    """A split's translations (line i for source i), their scores and the decoding time."""

    hypotheses: list[str]
    scores: Scores
    seconds: float


def evaluate_split(model: nn.Module, tokenizer: Tokenizer, sources: Sequence[str],
                   references: Sequence[str], cfg: DecodeConfig, tgt_lang: str,
                   device: torch.device | str = "cpu", precision: str = "fp32",
                   engine: Engine = PLAIN, progress: bool = False) -> SplitResult:
    """Translate `sources` as `translate_sentences` does and score them against `references`.

    The model is expected ready for `precision` and `engine` (`inference.decoding_model`).
    """
    if len(sources) != len(references):
        raise ValueError(f"{len(sources)} sources but {len(references)} references")
    start = time.perf_counter()
    hyps = translate_sentences(model, tokenizer, sources, cfg, device, precision, progress, engine)
    seconds = time.perf_counter() - start
    return SplitResult(hyps, score(hyps, references, tgt_lang), seconds)


@dataclass
class ReadyCheckpoint:
    """A checkpoint loaded and its model prepared for decoding, as `translate evaluate` does."""

    loaded: Any  # translate.checkpoint.Loaded
    model: nn.Module
    device: torch.device
    precision: str
    engine: Engine
    data: Any  # translate.config.DataConfig: the recipe's, with --data's dataset if given


def ready_checkpoint(checkpoint: str, data_path: str | None = None, device: str | None = None,
                     precision: str | None = None, engine: str = "auto") -> ReadyCheckpoint:
    """Load `checkpoint` and prepare its model for `precision` (default: the recipe's) and
    `engine`; its splits are read from `data_path` instead of the recipe's dataset if given."""
    from dataclasses import replace

    from translate.checkpoint import load_checkpoint
    from translate.engine import resolve_engine
    from translate.hardware import pick_device
    from translate.inference import decoding_model

    dev = pick_device(device, precision)
    loaded = load_checkpoint(checkpoint, dev)
    resolved = resolve_engine(engine, dev)
    data_cfg = loaded.recipe.data
    if data_path:
        data_cfg = replace(data_cfg, dataset=data_path)
    model, precision = decoding_model(loaded.model, precision or loaded.recipe.train.precision,
                                      dev, resolved)
    return ReadyCheckpoint(loaded, model, dev, precision, resolved, data_cfg)


def score_checkpoint(checkpoint: str, splits: Sequence[str] = (), data_path: str | None = None,
                     device: str | None = None, beam: int | None = None,
                     lenpen: float | None = None, precision: str | None = None,
                     engine: str = "auto", progress: bool = False,
                     early_exit: bool | None = None) -> dict[str, Scores]:
    """`translate evaluate CHECKPOINT`: the checkpoint's scores on `splits` (default: its
    recipe's test splits), read from `data_path` instead of the recipe's dataset if given.
    Unset decoding options come from the recipe."""
    from translate.config import decode_options
    from translate.data.read import load_split

    ready = ready_checkpoint(checkpoint, data_path, device, precision, engine)
    decode_cfg = decode_options(ready.loaded.recipe.decode, beam=beam, lenpen=lenpen,
                                early_exit=early_exit)
    results = {}
    for split in splits or ready.data.test_splits:
        src, ref = load_split(ready.data, split)
        results[split] = evaluate_split(ready.model, ready.loaded.tokenizer, src, ref, decode_cfg,
                                        ready.data.tgt_lang, ready.device, ready.precision,
                                        ready.engine, progress=progress).scores
    return results


def score_files(hyp: str, ref: str, lang: str | None = None) -> dict[str, Scores]:
    """`translate evaluate --hyp --ref`: a hypothesis file scored against its references (`lang`,
    default de: the target language of the legacy tokenization), keyed by the file's name."""
    hyps, refs = read_lines(hyp), read_lines(ref)
    if not hyps:
        raise DataError(f"{hyp} is empty: nothing to score")
    if len(hyps) != len(refs):
        raise DataError(f"{hyp} has {len(hyps)} lines, {ref} has {len(refs)}")
    return {Path(hyp).name: score(hyps, refs, lang or "de")}


def scores_report(results: dict[str, Scores], as_json: bool = False) -> list[str]:
    """`translate evaluate`'s report, a block to print for each name's scores, or one JSON block
    for all of them."""
    if as_json:
        return [json.dumps({k: asdict(v) for k, v in results.items()}, indent=2)]
    return [f"== {name} ==\n{s.summary()}" for name, s in results.items()]
