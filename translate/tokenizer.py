"""SentencePiece tokenizers: train on the training split, save standard `.model` files, encode.

Special ids are fixed for every model: pad=0, unk=1, bos=2, eos=3. The `.model` files are the
ones the `spm_encode` / `spm_decode` command-line tools read.
"""

from __future__ import annotations

import io
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np
import sentencepiece as spm

from translate.config import TokenizerConfig
from translate.tokens import BOS, EOS, PAD, SPECIAL_IDS, UNK  # noqa: F401 (re-exported)


def unicode_error(text: str) -> str | None:
    """What keeps `text` from being UTF-8 ("holds a lone surrogate (U+D800) at character 3"),
    or None: a surrogate left by bytes decoded with errors="surrogateescape", or a JSON escape."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        return f"holds a lone surrogate (U+{ord(text[e.start]):04X}) at character {e.start}"
    return None


def encode(model: spm.SentencePieceProcessor, texts: Iterable[str]) -> list[list[int]]:
    """`model.encode(texts)`; a text that is not UTF-8 is a ValueError naming it, not
    SentencePiece's TypeError."""
    texts = list(texts)
    try:
        return model.encode(texts)
    except TypeError:
        bad = next(((i, why) for i, text in enumerate(texts) if isinstance(text, str)
                    and (why := unicode_error(text))), None)
        if bad is None:
            raise
        raise ValueError(f"sentence {bad[0] + 1} {bad[1]}, which is not text: fix its "
                         f"decoding, or drop the character") from None


def train_sentencepiece(sentences: Sequence[str], cfg: TokenizerConfig, seed: int = 1) -> bytes:
    """Train one SentencePiece model on `sentences` and return the serialized `.model` bytes."""
    sentences = [s for s in sentences if s.strip()]
    if len(sentences) > cfg.max_sentences:
        sentences = random.Random(seed).sample(sentences, cfg.max_sentences)
    if not sentences:
        raise ValueError("no sentences to train SentencePiece on")
    if cfg.vocab_size <= len(SPECIAL_IDS):
        raise ValueError(f"tokenizer.vocab_size ({cfg.vocab_size}) must be more than the "
                         f"{len(SPECIAL_IDS)} special pieces")
    model = io.BytesIO()
    try:
        _train(sentences, cfg, model)
    except RuntimeError as e:  # SentencePiece's checks: "INTERNAL: src/trainer_interface.cc..."
        text = " ".join(str(e).split())  # "INTERNAL: src/x.cc(827) [check] Explanation."
        reason = text.rsplit("] ", 1)[-1] if "] " in text else text
        raise ValueError(f"SentencePiece cannot train a {cfg.model_type} model of "
                         f"{cfg.vocab_size} pieces on this data ({reason}); change "
                         f"tokenizer.vocab_size or tokenizer.model_type") from None
    return model.getvalue()


def _train(sentences: list[str], cfg: TokenizerConfig, model: io.BytesIO) -> None:
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(sentences),
        model_writer=model,
        model_type=cfg.model_type,
        vocab_size=cfg.vocab_size,
        character_coverage=cfg.character_coverage,
        pad_id=PAD, unk_id=UNK, bos_id=BOS, eos_id=EOS,
        input_sentence_size=cfg.max_sentences,
        shuffle_input_sentence=True,
        hard_vocab_limit=False,  # tiny corpora (tests) may not support the full vocabulary
        minloglevel=2,
        num_threads=2,
    )


@dataclass
class Tokenizer:
    """Source and target SentencePiece models (the same object when the vocabulary is joint)."""

    src_model: bytes
    tgt_model: bytes

    def __post_init__(self) -> None:
        self.src = spm.SentencePieceProcessor(model_proto=self.src_model)
        self.tgt = spm.SentencePieceProcessor(model_proto=self.tgt_model) \
            if self.tgt_model != self.src_model else self.src

    @property
    def joint(self) -> bool:
        return self.src is self.tgt

    @property
    def src_vocab_size(self) -> int:
        return self.src.get_piece_size()

    @property
    def tgt_vocab_size(self) -> int:
        return self.tgt.get_piece_size()

    @classmethod
    def train(cls, src_texts: Sequence[str], tgt_texts: Sequence[str], cfg: TokenizerConfig,
              seed: int = 1) -> "Tokenizer":
        if cfg.joint:
            model = train_sentencepiece(list(src_texts) + list(tgt_texts), cfg, seed)
            return cls(model, model)
        return cls(train_sentencepiece(src_texts, cfg, seed), train_sentencepiece(tgt_texts, cfg, seed))

    def encode_src(self, texts: Iterable[str]) -> list[list[int]]:
        """Source pieces + EOS."""
        return [ids + [EOS] for ids in encode(self.src, texts)]

    def encode_tgt(self, texts: Iterable[str]) -> list[list[int]]:
        """Target pieces + EOS (the decoder input prepends BOS)."""
        return [ids + [EOS] for ids in encode(self.tgt, texts)]

    def decode_tgt(self, ids: Sequence[Sequence[int]]) -> list[str]:
        return self.tgt.decode([[i for i in seq if i > EOS] for seq in ids])

    def save(self, directory: Path, src_lang: str, tgt_lang: str) -> list[Path]:
        """Write the `.model` file(s) into `directory` and return their paths."""
        if self.joint:
            paths = {directory / "spm.model": self.src_model}
        else:
            paths = {directory / f"spm.{src_lang}.model": self.src_model,
                     directory / f"spm.{tgt_lang}.model": self.tgt_model}
        for path, data in paths.items():
            path.write_bytes(data)
        return list(paths)


class SubwordSampler:
    """Subword regularization (Kudo, 2018; for BPE models BPE-dropout, Provilkov et al., 2020):
    a training pair is segmented afresh each time it is batched, by sampling among the
    segmentations its SentencePiece model allows.

    Pairs arrive as the one best ids the corpus holds; their text is decoded from them and
    encoded again by sampling. A sentence keeps its one best ids when they hold an unknown piece
    (its text cannot be recovered) or when the drawn segmentation is longer than `max_len`.
    SentencePiece draws from a generator it seeds itself: the draws differ from run to run.

    Args:
        tokenizer: the run's tokenizer.
        alpha: unigram: the sampling distribution's smoothing (smaller: more varied);
            BPE: the probability of dropping each merge.
        nbest: unigram: draw from the N best segmentations; 0: from all of them.
        max_len: the longest segmentation used, in pieces with EOS.
    """

    def __init__(self, tokenizer: Tokenizer, alpha: float, nbest: int = 0, max_len: int = 1 << 20):
        self.tokenizer, self.alpha, self.nbest, self.max_len = tokenizer, alpha, nbest, max_len

    def __call__(self, src: Sequence[np.ndarray], tgt: Sequence[np.ndarray]
                 ) -> tuple[list[list[int]], list[list[int]]]:
        """EOS-ended one best ids of a batch's pairs -> ids drawn afresh, EOS-ended."""
        return self._draw(self.tokenizer.src, src), self._draw(self.tokenizer.tgt, tgt)

    def length_ratio(self, src: Sequence[np.ndarray], tgt: Sequence[np.ndarray]) -> float:
        """Pieces drawn per piece of the one best, over these pairs' two sides: sampled batches
        hold this factor more tokens than `train.max_tokens`, and pad more besides
        (benchmarks/padding.py --sampling-alphas)."""
        drawn_src, drawn_tgt = self(src, tgt)
        drawn = sum(map(len, drawn_src)) + sum(map(len, drawn_tgt))
        return drawn / max(sum(map(len, src)) + sum(map(len, tgt)), 1)

    def _draw(self, model: spm.SentencePieceProcessor, seqs: Sequence[np.ndarray]
              ) -> list[list[int]]:
        one_best = [np.asarray(seq).tolist() for seq in seqs]
        texts = model.decode([ids[:-1] for ids in one_best])  # EOS off
        sampled = model.encode(texts, enable_sampling=True, alpha=self.alpha,
                               nbest_size=self.nbest or -1)
        return [best if UNK in best or len(ids) + 1 > self.max_len else ids + [EOS]
                for best, ids in zip(one_best, sampled)]
