"""The Python API: a trained model, loaded once, that translates, shows its attention and scores.

    from translate import Translator

    translator = Translator.load("runs/transformer")      # a run folder, a .pt or an export
    translator.translate(["A man is riding a bike."])      # ['Ein Mann fährt Fahrrad.']
    translator.translate("Two dogs play.", nbest=3, return_scores=True)

`translate` decodes as `translate decode` does (batched by length, input order kept, the
recipe's `decode.beam` by default); `attention` returns every attention module's weights for one sentence (on its greedy
translation or one given) with their roles and token labels; `score` is the BLEU/chrF the
toolkit reports everywhere.

An argument of the wrong type is a TypeError, a value out of range a ValueError; each message
names the argument (`texts[3]`, `nbest`). Sentences come as a string or an ordered collection of
strings (a list, a tuple, a generator): a set or a dict's keys have no order to give the outputs
back in, and are refused.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable, Mapping, MappingView, Set
from pathlib import Path
from typing import Any, Sequence, Union, overload

import torch
from torch import nn

from translate.alignment import Reading
from translate.analysis.attention import AttentionMaps, attention_maps
from translate.config import DecodeConfig, decode_options
from translate.engine import Engine
from translate.inference import Translation, decode_sentences
from translate.ready import Ready
from translate.scoring import Scores, score
from translate.tokenizer import Tokenizer, unicode_error

Output = Union[str, Translation, list[str], list[Translation]]


class Translator:
    """A model ready to decode on one device, in one precision, with one engine (a
    `translate.ready.Ready`, loaded from a checkpoint: it carries the recipe and step).

    One Translator may be shared between threads: the calls that run the model (`translate`,
    `attention`) take turns on a lock, since they share its modules, its engine's caches (packed
    weights) and, while `attention` records, a listener on every attention module. Each call
    returns what it would alone; calls run one at a time (each uses PyTorch's threads), `score`
    in parallel. Translators built from one `Ready` share its model and not the lock: load one
    per Translator.
    """

    def __init__(self, ready: Ready):
        if ready.recipe is None:
            raise ValueError("a Translator needs the recipe its model was saved with: build "
                             "it with Translator.load, or from Ready.load")
        self.ready = ready
        self.recipe = ready.recipe
        self.step = ready.step
        self.lock = threading.Lock()  # the model's turn: see the class docstring

    @classmethod
    def load(cls, path: str | Path, device: str | torch.device | None = None,
             precision: str | None = None, engine: str | None = None) -> "Translator":
        """Load a run folder (its best.pt), a checkpoint file or an exported model folder.

        device: cpu, cuda, cuda:1, mps (default: the best available). precision: auto (bf16
        where the CPU has AMX, on an AMD CPU with AVX512-BF16 and on a GPU with bf16; else
        fp32), fp32, bf16, fp16 or int8; default: the recipe's train.precision, the one the
        model was trained in, as `translate decode` decodes (every shipped recipe says auto).
        engine: auto (the default: fast on the CPU, plain elsewhere), fast, plain, gpu or
        textbook. The defaults are `translate.ready`'s, the command line's too. A path that is
        not a str or Path is a TypeError; a missing or damaged model a CheckpointError (a
        ValueError) naming the file.
        """
        if not isinstance(path, (str, os.PathLike)):
            raise TypeError(f"path must be a str or a Path, not {type(path).__name__}")
        return cls(Ready.load(path, device, precision, engine, option="device="))

    @property
    def model(self) -> nn.Module:
        return self.ready.model

    @property
    def tokenizer(self) -> Tokenizer:
        return self.ready.tokenizer

    @property
    def device(self) -> torch.device:
        return self.ready.device

    @property
    def precision(self) -> str:
        """The precision it decodes in, resolved (int8: fp32, the linears quantized)."""
        return self.ready.precision

    @property
    def engine(self) -> Engine:
        return self.ready.engine

    @property
    def arch(self) -> str:
        return self.recipe.model.arch

    def decode_config(self, beam: int | None = None, nbest: int = 1,
                      lenpen: float | None = None, max_tokens: int | None = None
                      ) -> DecodeConfig:
        """The recipe's decoding settings (`decode.beam` unless `beam`) with these changes,
        checked."""
        beam = self.recipe.decode.beam if beam is None else beam
        if isinstance(beam, bool) or not isinstance(beam, int) or beam < 1:
            raise ValueError(f"beam must be a positive integer, got {beam!r}")
        if isinstance(nbest, bool) or not isinstance(nbest, int) or not 1 <= nbest <= beam:
            raise ValueError(f"nbest must be an integer from 1 to the beam size ({beam}), "
                             f"got {nbest!r}")
        if lenpen is not None and (isinstance(lenpen, bool)
                                   or not isinstance(lenpen, (int, float))):
            raise ValueError(f"lenpen must be a number, got {lenpen!r}")
        return decode_options(self.recipe.decode, beam=beam, lenpen=lenpen,
                              max_tokens=max_tokens)

    @overload
    def translate(self, texts: str, beam: int | None = ..., nbest: int = ...,
                  return_scores: bool = ..., lenpen: float | None = ...,
                  return_alignments: bool = ...) -> Output: ...

    @overload
    def translate(self, texts: Sequence[str], beam: int | None = ..., nbest: int = ...,
                  return_scores: bool = ..., lenpen: float | None = ...,
                  return_alignments: bool = ...) -> list[Output]: ...

    def translate(self, texts, beam=None, nbest=1, return_scores=False, lenpen=None,
                  return_alignments=False):
        """Translate one sentence or a list of them (output i for input i), at the recipe's
        beam (`decode.beam`: 5 for Multi30k, 4 for WMT14) unless `beam` says otherwise.

        Each output is the best translation's text; with nbest > 1 a list of the `nbest` best,
        best first; with return_scores or return_alignments, `Translation`s (text, score =
        log-probability over the length penalty, logprob, tokens, and with return_alignments
        `alignment`: (source word, output word) links from 0, words as whitespace splits the
        texts, read from the attention as `translate.alignment.Reading()` says) instead of
        strings. An empty input gives ''.

        Raises TypeError for texts that are not a string or an ordered collection of strings,
        or a return_scores or return_alignments that is not a bool; ValueError for a text
        holding a line break or a lone surrogate, and for beam, nbest or lenpen out of range.
        """
        single = isinstance(texts, str)
        sentences = [sentence(texts, "texts")] if single else sentence_list(
            texts, "texts", "a string or a list of strings")
        for name, flag in (("return_scores", return_scores),
                           ("return_alignments", return_alignments)):
            if not isinstance(flag, bool):
                raise TypeError(f"{name} must be True or False, not {type(flag).__name__}")
        cfg = self.decode_config(beam, nbest, lenpen)
        with self.lock:
            found = decode_sentences(self.ready, sentences, cfg, nbest=nbest,
                                     with_scores=return_scores,
                                     alignments=Reading() if return_alignments else None)
        outputs = []
        for hyps in found:
            empty = Translation("", alignment=[] if return_alignments else None)
            hyps = hyps + [empty] * (nbest - len(hyps))  # an empty input: one ''
            best = hyps if return_scores or return_alignments else [h.text for h in hyps]
            outputs.append(best if nbest > 1 else best[0])
        return outputs[0] if single else outputs

    def attention(self, text: str, target: str | None = None) -> AttentionMaps:
        """One sentence's translation and the weights of every attention module.

        The translation is the greedy one, or `target` (say, a beam candidate) fed to the
        decoder. `weights[name]` is (heads, queries, keys); `roles[name]` its role (encoder
        self-attention, decoder self-attention, cross-attention, or the RNN's additive
        alignment) and layer; `src_pieces`, `tgt_in_pieces` and `out_pieces` label the axes.
        A text or target that is not a string is a TypeError; one that is empty, holds a line
        break or a lone surrogate, or is too long a ValueError.
        """
        text = sentence(text, "text")
        target = None if target is None else sentence(target, "target")
        with self.lock:
            return attention_maps(self.model, self.tokenizer, text, self.recipe.decode,
                                  self.device, target)

    def score(self, hypotheses: Sequence[str], references: Sequence[str]) -> Scores:
        """Detokenized cased sacreBLEU and chrF (and legacy lowercased BLEU) of the lines: two
        lists of strings, one line each, as many of each and at least one (else a TypeError or
        ValueError naming the argument)."""
        hypotheses = sentence_list(hypotheses, "hypotheses", "a list of strings")
        references = sentence_list(references, "references", "a list of strings")
        return score(hypotheses, references, self.recipe.data.tgt_lang)

    def __repr__(self) -> str:
        return (f"Translator({self.arch}, step {self.step}, {self.device}, {self.precision}, "
                f"{self.engine.name} engine)")


def sentence(text: Any, name: str) -> str:
    """`text` if it is one line of Unicode text; else a TypeError or ValueError naming `name`."""
    if not isinstance(text, str):
        raise TypeError(f"{name} is {type(text).__name__}, not str")
    if any(c in text.strip() for c in "\r\n"):
        raise ValueError(f"{name} holds a line break: give one sentence per item")
    why = unicode_error(text)
    if why:
        raise ValueError(f"{name} {why}, which is not text: fix its decoding, or drop the "
                         f"character")
    return text


def sentence_list(texts: Any, name: str, takes: str) -> list[str]:
    """The sentences of an ordered collection (a list, a tuple, a generator), each checked by
    `sentence`; a string, bytes, a mapping or an unordered collection is refused by `name`."""
    unordered = isinstance(texts, (Set, MappingView))  # a set, a dict's keys, values, items
    if (isinstance(texts, (str, bytes, bytearray, memoryview, Mapping)) or unordered
            or not isinstance(texts, Iterable)):
        why = " (unordered: output i answers input i, so give a list)" if unordered else ""
        raise TypeError(f"{name} must be {takes}, not {type(texts).__name__}{why}")
    return [sentence(text, f"{name}[{i}]") for i, text in enumerate(texts)]
