"""Rows of text to token ids: parse, clean and encode one chunk of a corpus at a time.

This is the work that encoding processes share (see `translate.corpus`), so the module imports
neither torch nor the model code: a worker process starts in a fraction of a second.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass, field
from typing import Optional, Sequence

import numpy as np
import sentencepiece as spm

from translate.tokens import EOS


class DataError(ValueError):
    """Data that cannot be used; the message names the file, split or column."""


@dataclass
class Chunk:
    """Consecutive rows of one split, as read: raw JSON Lines, or the two columns of text."""

    where: str  # the file or dataset, for messages
    first_row: int  # 1-based number of the chunk's first row (its line in a JSON Lines file)
    lines: Optional[list[bytes]] = None  # JSON Lines rows, not yet decoded
    src: Optional[list] = None
    tgt: Optional[list] = None


def parse_chunk(chunk: Chunk, src_lang: str, tgt_lang: str) -> tuple[list[str], list[str]]:
    """The (source, target) sentences of a chunk; a row that is not a pair of texts is an error
    naming its file and row."""
    if chunk.lines is None:
        rows = ((chunk.first_row + n, s, t) for n, (s, t) in enumerate(zip(chunk.src, chunk.tgt)))
    else:
        rows = ((chunk.first_row + n, *_json_pair(raw, f"{chunk.where}: line {chunk.first_row + n}",
                                                  src_lang, tgt_lang))
                for n, raw in enumerate(chunk.lines) if raw.strip())  # blank lines are skipped
    src, tgt = [], []
    for number, s, t in rows:
        if type(s) is not str or type(t) is not str:
            lang, value = (src_lang, s) if type(s) is not str else (tgt_lang, t)
            raise DataError(f"{chunk.where}: row {number}: '{lang}' holds "
                            f"{type(value).__name__} {str(value)[:40]!r}, not text")
        src.append(s)
        tgt.append(t)
    return src, tgt


def _json_pair(raw: bytes, where: str, src_lang: str, tgt_lang: str) -> tuple:
    try:
        row = json.loads(raw)
    except UnicodeDecodeError as e:
        raise DataError(f"{where} is not valid UTF-8 ({e.reason} at byte {e.start})") from None
    except ValueError as e:
        raise DataError(f"{where} is not valid JSON ({e})") from None
    if not isinstance(row, dict):
        raise DataError(f"{where} is not a JSON object")
    return pair_of(row, src_lang, tgt_lang, where)


def pair_of(row: dict, src_lang: str, tgt_lang: str, where: str) -> tuple:
    """A row's (source, target): flat columns, or nested under 'translation'."""
    if src_lang in row and tgt_lang in row:
        return row[src_lang], row[tgt_lang]
    nested = row.get("translation")
    if isinstance(nested, dict) and src_lang in nested and tgt_lang in nested:
        return nested[src_lang], nested[tgt_lang]
    raise DataError(f"{where}: need columns '{src_lang}' and '{tgt_lang}' (flat or under "
                    f"'translation'); found {sorted(row)}")


@dataclass
class CleanStats:
    total: int = 0
    empty: int = 0
    no_letters: int = 0
    too_long: int = 0
    bad_ratio: int = 0

    @property
    def kept(self) -> int:
        return self.total - self.empty - self.no_letters - self.too_long - self.bad_ratio

    def add(self, other: "CleanStats") -> None:
        for name in ("total", "empty", "no_letters", "too_long", "bad_ratio"):
            setattr(self, name, getattr(self, name) + getattr(other, name))


def clean_text_pairs(src: Sequence[str], tgt: Sequence[str]) -> tuple[list[int], CleanStats]:
    """Indices of usable training pairs: both sides non-empty and holding a letter or digit.

    The letter rule drops pairs like Multi30k train's German lines that are just ``@@``.
    """
    stats = CleanStats(total=len(src))
    keep = []
    for i, (s, t) in enumerate(zip(src, tgt)):
        if not s.strip() or not t.strip():
            stats.empty += 1
        elif not any(c.isalnum() for c in s) or not any(c.isalnum() for c in t):
            stats.no_letters += 1
        else:
            keep.append(i)
    return keep, stats


def id_dtype(vocab_size: int) -> np.dtype:
    """The narrowest type that holds every id: 2 bytes an id for vocabularies up to 65,536."""
    return np.dtype(np.uint16 if vocab_size <= 2 ** 16 else np.int32)


def flatten(ids: list[list[int]], dtype: np.dtype) -> tuple[np.ndarray, np.ndarray]:
    """SentencePiece's lists of ids, each followed by EOS, as one flat array and the lengths."""
    lengths = np.fromiter(map(len, ids), dtype=np.int64, count=len(ids))
    flat = np.fromiter(itertools.chain.from_iterable(ids), dtype=dtype, count=int(lengths.sum()))
    return np.insert(flat, np.cumsum(lengths), EOS), lengths + 1


@dataclass
class EncodedChunk:
    src_ids: np.ndarray  # (ids,) every kept source sentence's pieces + EOS, one after another
    src_lengths: np.ndarray  # (kept,) int64
    tgt_ids: np.ndarray
    tgt_lengths: np.ndarray
    stats: CleanStats = field(default_factory=CleanStats)


class ChunkEncoder:
    """Parse, clean and encode chunks with one pair of SentencePiece models."""

    def __init__(self, src_model: bytes, tgt_model: bytes, src_lang: str, tgt_lang: str,
                 threads: int = 1):
        self.src = spm.SentencePieceProcessor(model_proto=src_model)
        self.tgt = self.src if tgt_model == src_model else \
            spm.SentencePieceProcessor(model_proto=tgt_model)
        self.langs, self.threads = (src_lang, tgt_lang), threads
        self.dtype = id_dtype(max(self.src.get_piece_size(), self.tgt.get_piece_size()))

    def __call__(self, chunk: Chunk) -> EncodedChunk:
        src, tgt = parse_chunk(chunk, *self.langs)
        keep, stats = clean_text_pairs(src, tgt)
        src_ids, src_lengths = flatten(self.src.encode([src[i] for i in keep],
                                                       num_threads=self.threads), self.dtype)
        tgt_ids, tgt_lengths = flatten(self.tgt.encode([tgt[i] for i in keep],
                                                       num_threads=self.threads), self.dtype)
        return EncodedChunk(src_ids, src_lengths, tgt_ids, tgt_lengths, stats)


_worker: Optional[ChunkEncoder] = None


def start_worker(*args) -> None:
    """Process-pool initializer: this process's encoder (see `encode_in_worker`)."""
    global _worker
    _worker = ChunkEncoder(*args)


def encode_in_worker(chunk: Chunk) -> EncodedChunk:
    return _worker(chunk)
