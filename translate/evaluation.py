"""Decode a split and score it: what training's dev and test decodes, `translate evaluate` and
`translate compare` all do, written once."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Sequence

import torch
from torch import nn

from translate.config import DecodeConfig
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
