"""Encode: text to token ids, in worker processes or in memory, held as flat arrays.

Tests: tests/data/test_cache.py, tests/data/test_batch.py.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Iterator, Optional, Sequence

import numpy as np
import sentencepiece as spm

from translate.data.clean import CleanStats, LengthFilter, clean_text_pairs
from translate.data.rows import Chunk, parse_chunk
from translate.tokens import EOS

if TYPE_CHECKING:  # the tokenizer's config imports torch, which the encoding workers never load
    from translate.tokenizer import Tokenizer


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


# ---------------------------------------------------------------------------------------------
# Encoded sentences, held flat


class TokenArray:
    """Sentences of token ids stored flat: one array of every id, and where each sentence starts
    and how long it is, so a corpus of millions of sentences is three arrays, not millions of
    objects. `values` may be memory-mapped from disk (see `translate.data.cache`).

    `array[i]` is sentence i (a view); `lengths` holds every sentence's length.
    """

    def __init__(self, values: np.ndarray, starts: np.ndarray, lengths: np.ndarray):
        self.values = values  # (ids,) uint16 or int32
        self.starts = starts  # (n,) int64: sentence i is values[starts[i]: starts[i] + lengths[i]]
        self.lengths = lengths  # (n,) int32

    @classmethod
    def from_offsets(cls, values: np.ndarray, offsets: np.ndarray) -> "TokenArray":
        """Sentences stored back to back: sentence i is values[offsets[i]:offsets[i + 1]]."""
        return cls(values, offsets[:-1], np.diff(offsets).astype(np.int32))

    @classmethod
    def from_lists(cls, seqs: Sequence[Sequence[int]], dtype=np.int32) -> "TokenArray":
        lengths = np.fromiter(map(len, seqs), dtype=np.int64, count=len(seqs))
        values = np.fromiter(itertools.chain.from_iterable(seqs), dtype=dtype,
                             count=int(lengths.sum()))
        return cls.from_offsets(values, np.concatenate([[0], np.cumsum(lengths)]))

    def __len__(self) -> int:
        return len(self.starts)

    def __getitem__(self, i: int) -> np.ndarray:
        start = int(self.starts[i])
        return self.values[start: start + int(self.lengths[i])]

    def total_length(self, indices: Sequence[int]) -> int:
        """The summed length of sentences `indices`."""
        return int(self.lengths[np.asarray(indices, dtype=np.int64)].sum())

    def __iter__(self) -> Iterator[np.ndarray]:
        return (self[i] for i in range(len(self)))


@dataclass
class EncodedPairs:
    """Token ids of a parallel corpus, both sides ending in EOS. With a `length_filter`, only the
    pairs it keeps are used (batches hold indices into the whole arrays); nothing is copied."""

    src: TokenArray
    tgt: TokenArray
    length_filter: Optional[LengthFilter] = None
    kept: Optional[int] = None  # pairs the filter keeps

    def __len__(self) -> int:
        return len(self.src) if self.kept is None else self.kept

    def indices(self) -> np.ndarray:
        """The usable pairs' indices."""
        if self.length_filter is None:
            return np.arange(len(self.src))
        return np.flatnonzero(self.length_filter.keeps(self.src.lengths, self.tgt.lengths))


def encode_pairs(tokenizer: Tokenizer, src: Sequence[str], tgt: Sequence[str]) -> EncodedPairs:
    """Encode sentences held in memory (a dev or test split); big corpora go through
    `translate.data.cache`, which encodes them once onto disk."""
    return EncodedPairs(TokenArray.from_lists(tokenizer.encode_src(src)),
                        TokenArray.from_lists(tokenizer.encode_tgt(tgt)))


def filter_lengths(pairs: EncodedPairs, max_len: int, max_ratio: float,
                   stats: CleanStats) -> EncodedPairs:
    """Use only training pairs of at most `max_len` pieces and a length ratio up to `max_ratio`;
    count the others in `stats`."""
    rule = LengthFilter(max_len, max_ratio)
    kept = 0
    for part in in_parts(len(pairs.src)):
        src, tgt = pairs.src.lengths[part], pairs.tgt.lengths[part]
        too_long, bad_ratio = rule.too_long(src, tgt), rule.bad_ratio(src, tgt)
        stats.too_long += int(too_long.sum())
        stats.bad_ratio += int(bad_ratio.sum())
        kept += len(src) - int(too_long.sum()) - int(bad_ratio.sum())
    return EncodedPairs(pairs.src, pairs.tgt, rule, kept)


def in_parts(n: int, size: int = 1 << 18) -> Iterator[slice]:
    """Slices covering range(n), `size` at a time: whole-corpus arrays are worked through in
    parts, so temporaries stay small."""
    return (slice(a, min(a + size, n)) for a in range(0, n, size))
