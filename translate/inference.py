"""Inference: raw sentences in, translations out, batched by length, n-best with scores.

`decode_sentences` is the one decoding path every command uses (`translate decode`, `evaluate`,
`compare`, `tune-beam`, the API and the server, training's dev and test decodes), greedy or beam
search by what is asked; it decodes with a `translate.ready.Ready`, the model made ready once
for its device, precision and engine.

Tests: tests/test_search.py, tests/test_cli.py, tests/test_api.py.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Optional, Sequence

import torch

from translate.alignment import Link, Reading, align, output_words, text_words
from translate.config import DecodeConfig
from translate.data.batch import length_batches, pad
from translate.ready import Ready
from translate.search import Hypothesis, output_limits

log = logging.getLogger(__name__)


@dataclass
class Translation:
    text: str
    score: float = 0.0  # beam score: logprob / length penalty
    logprob: float = 0.0  # sum of token log-probabilities, EOS included
    tokens: int = 0  # output pieces, EOS excluded
    alignment: Optional[list[Link]] = None  # (source word, output word) links, when asked for


@torch.inference_mode()
def decode_sentences(ready: Ready, sentences: Sequence[str], cfg: DecodeConfig,
                     progress: bool = False, nbest: int = 1, with_scores: bool = False,
                     alignments: Optional[Reading] = None) -> list[list[Translation]]:
    """Translate raw sentences with `ready`'s model: for input i, its `nbest` translations, best
    first; with `alignments`, each with its word alignment to the source, read from the
    model's attention as the Reading says (`translate.alignment`: one teacher-forced pass over
    the translations found, in fp32, after the search).

    Batches by length, restores the input order, gives an empty input one empty translation and
    truncates (with a warning) a line longer than the model's limit. Greedy search serves beam
    1 unless scores or several hypotheses are asked for; beam search serves the rest: the
    engine's searches and step (`engine.candidates`), under the precision's autocast.
    Runs in inference mode: no autograd bookkeeping at all, which `no_grad` still does for views
    and versions (faster: docs/results.md, the fast engine's parts).
    """
    model, tokenizer, engine = ready.model, ready.tokenizer, ready.engine
    model.eval()
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
    outputs = [[Translation("", alignment=None if alignments is None else [])]
               for _ in sentences]
    use_beam = cfg.beam > 1 or nbest > 1 or with_scores
    bar = _progress(len(todo), progress)
    for batch in length_batches([len(encoded[i]) for i in todo], cfg.max_tokens, cfg.batch_size):
        idx = [todo[j] for j in batch]
        src = pad([torch.tensor(encoded[i]) for i in idx]).to(ready.device)  # (B, S)
        limits = output_limits(src, cfg.max_len_a, cfg.max_len_b, limit)  # (B,)
        with ready.autocast():
            if use_beam:
                found = engine.beam_search(model, src, max(cfg.beam, nbest), limits, cfg.lenpen,
                                           nbest, engine.candidates, cfg.early_exit)
            else:
                found = [[Hypothesis(ids, 0.0, 0.0)]
                         for ids in engine.greedy_search(model, src, limits)]
        texts = iter(tokenizer.decode_tgt([h.tokens for hyps in found for h in hyps]))
        pairs = [i for i, hyps in zip(idx, found) for _ in hyps]  # a source per hypothesis
        links = iter(_alignments(ready, [sentences[i] for i in pairs],
                                 [encoded[i] for i in pairs],
                                 [h.tokens for hyps in found for h in hyps], alignments))
        for i, hyps in zip(idx, found):
            outputs[i] = [Translation(next(texts), h.score, h.logprob, len(h.tokens), next(links))
                          for h in hyps]
        bar.update(len(idx))
    bar.close()
    return outputs


def _alignments(ready: Ready, texts: list[str], sources: list[list[int]],
                outputs: list[list[int]], reading: Optional[Reading]
                ) -> list[Optional[list[Link]]]:
    """Each (source, output) pair's word links as `reading` reads them, words counted as
    `str.split()` separates the source text and the translation (`translate.alignment`);
    Nones without a reading."""
    if reading is None:
        return [None] * len(outputs)
    tokenizer = ready.tokenizer
    return align(ready.model, sources, outputs,
                 text_words(tokenizer.src, texts, [ids[:-1] for ids in sources]),
                 output_words(tokenizer.decode_tgt, outputs), reading)


def translate_sentences(ready: Ready, sentences: Sequence[str], cfg: DecodeConfig,
                        progress: bool = False) -> list[str]:
    """Translate raw sentences; output i belongs to input i, an empty input gives ''."""
    found = decode_sentences(ready, sentences, cfg, progress)
    return [hyps[0].text for hyps in found]


def _progress(total: int, enabled: bool):
    from tqdm.auto import tqdm

    return tqdm(total=total, disable=not enabled, unit="sent", desc="decoding", leave=False)
