"""Inference: raw sentences in, translations out, batched by length, n-best with scores.

`decoding_model` readies a model for a precision and engine once; `decode_sentences` is the one
decoding path every command uses (`translate decode`, `evaluate`, `compare`, training's dev and
test decodes), greedy or beam search by what is asked.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Sequence

import torch
from torch import nn

from translate.config import DecodeConfig
from translate.data.batch import length_batches, pad
from translate.engine import PLAIN, Engine, engine_note
from translate.hardware import autocast, resolve_precision
from translate.search import Hypothesis, output_limits
from translate.tokenizer import Tokenizer

log = logging.getLogger(__name__)


@dataclass
class Translation:
    text: str
    score: float = 0.0  # beam score: logprob / length penalty
    logprob: float = 0.0  # sum of token log-probabilities, EOS included
    tokens: int = 0  # output pieces, EOS excluded


def decoding_model(model: nn.Module, precision: str, device: torch.device, engine: Engine
                   ) -> tuple[nn.Module, str]:
    """The model to decode with on `device`, and the autocast precision to run it under.

    `precision` is a recipe's or the command line's name (auto, fp32, bf16, fp16, int8): int8
    quantizes a copy of every linear layer and runs it without autocast. The engine is applied
    to the model (in place, unless int8 made a copy).
    """
    precision = resolve_precision(precision, device, decoding=True)
    if precision == "int8":
        from translate.engine import quantize_int8

        model, precision = quantize_int8(model), "fp32"
    log.debug("decoding on %s in %s with the %s", device, precision, engine_note(engine))
    return engine.prepare(model), precision


@torch.inference_mode()
def decode_sentences(model: nn.Module, tokenizer: Tokenizer, sentences: Sequence[str],
                     cfg: DecodeConfig, device: torch.device | str = "cpu",
                     precision: str = "fp32", progress: bool = False, nbest: int = 1,
                     with_scores: bool = False, engine: Engine = PLAIN
                     ) -> list[list[Translation]]:
    """Translate raw sentences: for input i, its `nbest` translations, best first.

    Batches by length, restores the input order, gives an empty input one empty translation and
    truncates (with a warning) a line longer than the model's limit. Greedy search serves beam
    1 unless scores or several hypotheses are asked for; beam search serves the rest: the
    engine's searches and step (`engine.candidates`; the model is expected prepared by
    `engine.prepare`).
    Runs in inference mode: no autograd bookkeeping at all, which `no_grad` still does for views
    and versions (1.03x the sentences/s at beam 5 on a 2-core CPU, docs/results.md).
    """
    model.eval()
    device = torch.device(device)
    if max(cfg.beam, nbest) > tokenizer.tgt_vocab_size:
        raise ValueError(f"a beam of {max(cfg.beam, nbest)} is more than the target vocabulary "
                         f"({tokenizer.tgt_vocab_size} pieces) has to offer; use at most "
                         f"{tokenizer.tgt_vocab_size}")
    limit = model.cfg.max_positions - 1
    encoded = tokenizer.encode_src(sentences)
    for i, ids in enumerate(encoded):
        if len(ids) > limit:
            log.warning("line %d has %d pieces, over the model's limit of %d: translating its "
                        "first %d pieces only", i + 1, len(ids), limit, limit)
            encoded[i] = ids[: limit - 1] + ids[-1:]
    todo = [i for i, s in enumerate(sentences) if s.strip()]
    outputs = [[Translation("")] for _ in sentences]
    use_beam = cfg.beam > 1 or nbest > 1 or with_scores
    bar = _progress(len(todo), progress)
    for batch in length_batches([len(encoded[i]) for i in todo], cfg.max_tokens, cfg.batch_size):
        idx = [todo[j] for j in batch]
        src = pad([torch.tensor(encoded[i]) for i in idx]).to(device)  # (B, S)
        limits = output_limits(src, cfg.max_len_a, cfg.max_len_b, limit)  # (B,)
        with autocast(device, precision):
            if use_beam:
                found = engine.beam_search(model, src, max(cfg.beam, nbest), limits, cfg.lenpen,
                                           nbest, engine.candidates, cfg.early_exit)
            else:
                found = [[Hypothesis(ids, 0.0, 0.0)]
                         for ids in engine.greedy_search(model, src, limits)]
        texts = iter(tokenizer.decode_tgt([h.tokens for hyps in found for h in hyps]))
        for i, hyps in zip(idx, found):
            outputs[i] = [Translation(next(texts), h.score, h.logprob, len(h.tokens))
                          for h in hyps]
        bar.update(len(idx))
    bar.close()
    return outputs


def translate_sentences(model: nn.Module, tokenizer: Tokenizer, sentences: Sequence[str],
                        cfg: DecodeConfig, device: torch.device | str = "cpu",
                        precision: str = "fp32", progress: bool = False,
                        engine: Engine = PLAIN) -> list[str]:
    """Translate raw sentences; output i belongs to input i, an empty input gives ''."""
    found = decode_sentences(model, tokenizer, sentences, cfg, device, precision, progress,
                             engine=engine)
    return [hyps[0].text for hyps in found]


def _progress(total: int, enabled: bool):
    from tqdm.auto import tqdm

    return tqdm(total=total, disable=not enabled, unit="sent", desc="decoding", leave=False)
