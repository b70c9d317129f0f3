"""Encoded sentences and their batches: a corpus held as flat arrays of token ids
(`TokenArray`, `EncodedPairs`), the length rules for training pairs, and batches of about
`max_tokens` padded tokens made from pairs of similar length (`token_batches`, `collate`).

Shapes: B sentences in a batch, S source length, T target length (pieces, padded).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Iterator, Optional, Sequence

import numpy as np
import torch

from translate.encoding import CleanStats
from translate.tokenizer import Tokenizer
from translate.tokens import BOS, PAD


# ---------------------------------------------------------------------------------------------
# Encoded sentences


class TokenArray:
    """Sentences of token ids stored flat: one array of every id, and where each sentence starts
    and how long it is, so a corpus of millions of sentences is three arrays, not millions of
    objects. `values` may be memory-mapped from disk (see `translate.corpus`).

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


@dataclass(frozen=True)
class LengthFilter:
    """The length rules for training pairs: at most `max_len` pieces a side, and a length ratio
    of at most `max_ratio` (pairs of up to 8 pieces pass the ratio rule)."""

    max_len: int
    max_ratio: float

    def too_long(self, src: np.ndarray, tgt: np.ndarray) -> np.ndarray:
        return (src > self.max_len) | (tgt > self.max_len)

    def bad_ratio(self, src: np.ndarray, tgt: np.ndarray) -> np.ndarray:
        """Pairs the ratio rule drops that the length rule does not already drop."""
        return ~self.too_long(src, tgt) & self._uneven(src, tgt)

    def keeps(self, src: np.ndarray, tgt: np.ndarray) -> np.ndarray:
        return ~(self.too_long(src, tgt) | self._uneven(src, tgt))

    def _uneven(self, src: np.ndarray, tgt: np.ndarray) -> np.ndarray:
        longer, shorter = np.maximum(src, tgt), np.minimum(src, tgt)
        return (longer > self.max_ratio * shorter) & (longer > 8)


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
    `translate.corpus`, which encodes them once onto disk."""
    return EncodedPairs(TokenArray.from_lists(tokenizer.encode_src(src)),
                        TokenArray.from_lists(tokenizer.encode_tgt(tgt)))


def filter_lengths(pairs: EncodedPairs, max_len: int, max_ratio: float,
                   stats: CleanStats) -> EncodedPairs:
    """Use only training pairs of at most `max_len` pieces and a length ratio up to `max_ratio`;
    count the others in `stats`."""
    rule = LengthFilter(max_len, max_ratio)
    kept = 0
    for part in _chunked(len(pairs.src)):
        src, tgt = pairs.src.lengths[part], pairs.tgt.lengths[part]
        too_long, bad_ratio = rule.too_long(src, tgt), rule.bad_ratio(src, tgt)
        stats.too_long += int(too_long.sum())
        stats.bad_ratio += int(bad_ratio.sum())
        kept += len(src) - int(too_long.sum()) - int(bad_ratio.sum())
    return EncodedPairs(pairs.src, pairs.tgt, rule, kept)


def _chunked(n: int, size: int = 1 << 18) -> Iterator[slice]:
    """Slices covering range(n), `size` at a time: whole-corpus arrays are worked through in
    parts, so temporaries stay small."""
    return (slice(a, min(a + size, n)) for a in range(0, n, size))


# ---------------------------------------------------------------------------------------------
# Batching


@dataclass
class Batch:
    src: torch.Tensor  # (B, S) source ids, EOS-terminated, PAD on the right
    tgt_in: torch.Tensor  # (B, T) BOS + target pieces
    tgt_out: torch.Tensor  # (B, T) target pieces + EOS
    num_tgt_tokens: int  # non-pad tokens in tgt_out

    def to(self, device: torch.device) -> "Batch":
        """The batch on `device`; to a GPU from pinned memory, so the copies run asynchronously."""
        tensors = (self.src, self.tgt_in, self.tgt_out)
        if device.type == "cuda" and self.src.device.type == "cpu":
            tensors = tuple(t.pin_memory() for t in tensors)
        return Batch(*(t.to(device, non_blocking=True) for t in tensors), self.num_tgt_tokens)


def round_up(length, multiple: int):
    """`length` (a number or an array) rounded up to a multiple of `multiple`."""
    return (length + multiple - 1) // multiple * multiple


def pad(seqs: Sequence, value: int = PAD, multiple: int = 1) -> torch.Tensor:
    """Right-pad 1-D id sequences (arrays, tensors or lists) into a (B, L) int64 tensor, L the
    longest length rounded up to a multiple of `multiple`."""
    longest = max((len(s) for s in seqs), default=0)
    out = np.full((len(seqs), round_up(longest, multiple)), value, dtype=np.int64)
    for row, seq in zip(out, seqs):
        row[:len(seq)] = seq
    return torch.from_numpy(out)


def collate(src: Sequence, tgt: Sequence, multiple: int = 1) -> Batch:
    """A batch of id sequences, each side padded to its longest, rounded up to `multiple`."""
    tgt_out = pad(tgt, multiple=multiple)
    bos = torch.full((len(tgt), 1), BOS, dtype=torch.long)
    tgt_in = torch.cat([bos, tgt_out[:, :-1]], dim=1)
    # A target's EOS is dropped from the input; pads stay pads.
    tgt_in = tgt_in.masked_fill(tgt_out == PAD, PAD)
    return Batch(pad(src, multiple=multiple), tgt_in, tgt_out, int(sum(len(t) for t in tgt)))


class TokenBatches(Sequence):
    """An epoch's batches: `batches[k]` is the k-th batch's pair indices. Stored as one sorted
    order and the batches' bounds in it, so millions of pairs cost a few arrays, not lists."""

    def __init__(self, order: np.ndarray, bounds: np.ndarray, sequence: np.ndarray):
        self.order = order  # (n,) pair indices, by length
        self.bounds = bounds  # (batches + 1,) batch b is order[bounds[b]:bounds[b + 1]]
        self.sequence = sequence  # (batches,) which batch comes k-th

    def __len__(self) -> int:
        return len(self.sequence)

    def __getitem__(self, k):
        if isinstance(k, slice):
            return [self[i] for i in range(*k.indices(len(self)))]
        b = int(self.sequence[k])
        return self.order[self.bounds[b]: self.bounds[b + 1]]


def token_batches(src_lengths: np.ndarray, tgt_lengths: np.ndarray, max_tokens: int,
                  shuffle: bool, seed: int = 0, length_filter: Optional[LengthFilter] = None,
                  multiple: int = 1) -> TokenBatches:
    """Group the pairs (those `length_filter` keeps) by length so each batch holds about
    `max_tokens` padded tokens: a batch costs (its sentences) x (its longest source or target).
    With `multiple` > 1 lengths count rounded up to a multiple of it, as `collate` pads them:
    pairs are ordered and batched by their rounded lengths, so batches take fewer shapes.

    Pairs are ordered by target, then source length; with `shuffle` the order within equal
    lengths and the order of the batches are random (seeded), so every epoch differs. Only the
    length arrays are read, a part at a time: beyond them, a corpus of n pairs costs 4n bytes
    (the order; 8n past 2**31 pairs), and a part of 262,144 pairs at a time.
    """
    src_lengths, tgt_lengths = np.asarray(src_lengths), np.asarray(tgt_lengths)
    rng = np.random.default_rng(seed)
    order, runs = _length_order(src_lengths, tgt_lengths, length_filter, multiple)
    run_ends = np.cumsum(runs[:, 2])
    starts = run_ends - runs[:, 2]
    if shuffle:  # ties in random order: each run of equal (target, source) lengths is shuffled
        for start, count in zip(starts.tolist(), runs[:, 2].tolist()):
            if count > 1:
                rng.shuffle(order[start: start + count])
    run_sizes = np.maximum(runs[:, 0], runs[:, 1])  # a run's pairs all cost this much a row
    bounds = [0]
    while bounds[-1] < len(order):  # fill each batch greedily, a batch's worth at a time
        start = bounds[-1]
        first = run_sizes[np.searchsorted(run_ends, start, side="right")]
        places = np.arange(start, min(len(order), start + max(1, max_tokens // max(1, first))))
        window = run_sizes[np.searchsorted(run_ends, places, side="right")]  # each pair's size
        cost = np.maximum.accumulate(window) * np.arange(1, len(window) + 1)  # padded tokens
        bounds.append(start + max(1, int(np.searchsorted(cost > max_tokens, True))))
    sequence = np.arange(len(bounds) - 1)
    return TokenBatches(order, np.array(bounds), rng.permutation(sequence) if shuffle else sequence)


def _length_order(src: np.ndarray, tgt: np.ndarray, length_filter: Optional[LengthFilter],
                  multiple: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """The kept pairs' indices sorted by (target, source) length rounded up to `multiple`,
    stable, and the runs of equal lengths in that order as rows (target length, source length,
    count).

    A counting sort over the (target, source) pairs of lengths: one pass counts them, a second
    places each part's indices, so no temporary is as long as the corpus."""
    width = round_up(int(max(src.max(initial=0), tgt.max(initial=0))), multiple) + 1

    def keys(part: slice) -> tuple[np.ndarray, np.ndarray]:
        s, t = src[part].astype(np.int64), tgt[part].astype(np.int64)
        index = np.arange(part.start, part.stop)
        if length_filter is not None:
            kept = length_filter.keeps(s, t)
            s, t, index = s[kept], t[kept], index[kept]
        return round_up(t, multiple) * width + round_up(s, multiple), index

    seen = [np.unique(keys(part)[0], return_counts=True) for part in _chunked(len(src))]
    found = np.concatenate([np.zeros(0, np.int64)] + [key for key, _ in seen])
    values = np.unique(found)  # every (target, source) length pair present, as one key
    counts = np.bincount(np.searchsorted(values, found), minlength=len(values),
                         weights=np.concatenate([np.zeros(0)] + [n for _, n in seen])
                         ).astype(np.int64)
    order = np.empty(int(counts.sum()), np.int32 if len(src) < 2 ** 31 else np.int64)
    fill = np.cumsum(counts) - counts  # where each length pair's next index goes
    for part in _chunked(len(src)):
        key, index = keys(part)
        rank = np.searchsorted(values, key)
        by_key = np.argsort(rank, kind="stable")
        rank, index = rank[by_key], index[by_key]
        within = np.arange(len(rank)) - np.searchsorted(rank, rank)  # place among equal keys
        order[fill[rank] + within] = index
        fill += np.bincount(rank, minlength=len(values))
    runs = np.stack([values // width, values % width, counts], axis=1)
    return order, runs


def iterate_batches(pairs: EncodedPairs, max_tokens: int, shuffle: bool, seed: int = 0,
                    multiple: int = 1) -> Iterator[Batch]:
    for idx in token_batches(pairs.src.lengths, pairs.tgt.lengths, max_tokens, shuffle, seed,
                             pairs.length_filter, multiple):
        yield collate([pairs.src[i] for i in idx], [pairs.tgt[i] for i in idx], multiple)
