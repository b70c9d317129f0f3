"""Batch: sentences of similar length grouped under a budget of padded tokens, then padded.

One cutter (`cut_batches`) serves every caller: training's epochs and the dev loss
(`token_batches`: pairs ordered by target, then source length) and decoding (`length_batches`:
sources, longest first). `collate` pads a batch's pairs into tensors.

Shapes: B sentences in a batch, S source length, T target length (pieces, padded).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterator, Optional, Sequence

import numpy as np
import torch

from translate.data.clean import LengthFilter
from translate.data.encode import EncodedPairs, in_parts
from translate.tokens import BOS, PAD


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


def cut_batches(size_at: Callable, n: int, max_tokens: int, max_sentences: int = 0) -> list[int]:
    """Where batches start and end (bounds, from 0 to n) when n ordered items are cut greedily,
    each batch costing (its items) x (its largest size) padded tokens, at most `max_tokens`
    (an item over it is a batch alone) and, when `max_sentences` > 0, at most that many items.

    `size_at(places)` gives the sizes of the items at `places` (a position or an array of
    them), so a caller need not hold one size per item."""
    bounds = [0]
    while bounds[-1] < n:  # fill each batch greedily, a batch's worth at a time
        start = bounds[-1]
        most = max(1, max_tokens // max(1, int(size_at(start))))  # that fit at the first's size
        if max_sentences > 0:
            most = min(most, max_sentences)
        window = size_at(np.arange(start, min(n, start + most)))  # each item's size
        cost = np.maximum.accumulate(window) * np.arange(1, len(window) + 1)  # padded tokens
        bounds.append(start + max(1, int(np.searchsorted(cost > max_tokens, True))))
    return bounds


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
    bounds = cut_batches(lambda places: run_sizes[np.searchsorted(run_ends, places, side="right")],
                         len(order), max_tokens)
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

    seen = [np.unique(keys(part)[0], return_counts=True) for part in in_parts(len(src))]
    found = np.concatenate([np.zeros(0, np.int64)] + [key for key, _ in seen])
    values = np.unique(found)  # every (target, source) length pair present, as one key
    counts = np.bincount(np.searchsorted(values, found), minlength=len(values),
                         weights=np.concatenate([np.zeros(0)] + [n for _, n in seen])
                         ).astype(np.int64)
    order = np.empty(int(counts.sum()), np.int32 if len(src) < 2 ** 31 else np.int64)
    fill = np.cumsum(counts) - counts  # where each length pair's next index goes
    for part in in_parts(len(src)):
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


def length_batches(lengths: Sequence[int], max_tokens: int, max_sentences: int = 0
                   ) -> list[list[int]]:
    """Indices sorted by length (longest first), cut so each batch has <= max_tokens tokens
    (padded) and, when max_sentences > 0, at most that many sentences: decoding's batches."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    sizes = np.array([lengths[i] for i in order], dtype=np.int64)
    bounds = cut_batches(sizes.__getitem__, len(order), max_tokens, max_sentences)
    return [order[a:b] for a, b in zip(bounds, bounds[1:])]
