"""Parallel data: read splits a chunk at a time (Hugging Face `datasets` for tables and the hub),
hold encoded sentences flat, batch by tokens. `translate.corpus` keeps encoded corpora on disk.

A dataset is a hub name (``bentrevett/multi30k``, ``wmt14`` with subset ``de-en``) or a local folder
holding, per split, a JSON Lines / JSON / Parquet / CSV / TSV file (``train.jsonl``) or plain parallel
text (``train.en`` + ``train.de``). Columns are flat (``en``, ``de``) or nested
(``translation: {en, de}``).
"""

from __future__ import annotations

import csv
import hashlib
import itertools
import logging
import os
import socket
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Iterator, Optional, Sequence

import numpy as np
import torch

from translate.config import DataConfig
from translate.encoding import (Chunk, CleanStats, DataError, clean_text_pairs,  # noqa: F401
                                pair_of, parse_chunk)
from translate.tokenizer import Tokenizer
from translate.tokens import BOS, PAD
from translate.utils import first_line

log = logging.getLogger(__name__)

TABLE_FORMATS = {".jsonl": "jsonl", ".json": "json", ".parquet": "parquet", ".csv": "csv",
                 ".tsv": "csv"}


# ---------------------------------------------------------------------------------------------
# Loading raw text, a chunk at a time


def resolve_dataset(cfg: DataConfig) -> str:
    """The dataset to read: TRANSLATE_DATA (if set) wins over the recipe's `data.dataset`."""
    return os.environ.get("TRANSLATE_DATA") or cfg.dataset


@dataclass(frozen=True)
class SplitSource:
    """Where one split's rows come from: local files of one format, or a hub dataset."""

    kind: str  # "jsonl", "text" (two parallel files), a `datasets` builder, or "hub"
    files: tuple[Path, ...] = ()
    dataset: str = ""  # hub name
    subset: Optional[str] = None
    name: str = ""  # the split's name in the dataset

    @property
    def where(self) -> str:
        return str(self.files[0]) if self.files else f"{self.dataset} [{self.name}]"


def find_split(cfg: DataConfig, split: str) -> SplitSource:
    """Find a split, named as in `cfg.splits`, in the local folder or on the hub."""
    dataset = resolve_dataset(cfg)
    name = cfg.splits.get(split, split)
    path = Path(dataset).expanduser()
    if not (path.exists() or dataset.startswith((".", "/", "~"))):
        return SplitSource("hub", dataset=dataset, subset=cfg.subset, name=name)
    if not path.is_dir():
        raise DataError(f"data folder not found: {dataset}")
    for stem in dict.fromkeys([split, name]):
        for suffix, builder in TABLE_FORMATS.items():
            if (path / f"{stem}{suffix}").is_file():
                return SplitSource(builder, (path / f"{stem}{suffix}",), name=name)
        pair = (path / f"{stem}.{cfg.src_lang}", path / f"{stem}.{cfg.tgt_lang}")
        if all(file.is_file() for file in pair):
            return SplitSource("text", pair, name=name)
    found = sorted(p.name for p in path.iterdir())
    raise DataError(f"no file for split '{split}' in {path} (looked for {split}/{name} as "
                    f".jsonl/.json/.parquet/.csv/.tsv or .{cfg.src_lang}+.{cfg.tgt_lang}); "
                    f"the folder has: {found}")


def read_chunks(source: SplitSource, cfg: DataConfig, size: int = 10_000) -> Iterator[Chunk]:
    """The split's rows in order, `size` at a time, streamed: never the whole split in memory."""
    if source.kind == "jsonl":
        with open(source.files[0], "rb") as f:
            for n, lines in enumerate(iter(lambda: list(itertools.islice(f, size)), [])):
                yield Chunk(source.where, 1 + n * size, lines=lines)
    elif source.kind == "text":
        yield from _text_chunks(*source.files, size)
    else:
        yield from _table_chunks(source, cfg, size)


def _text_chunks(src_file: Path, tgt_file: Path, size: int) -> Iterator[Chunk]:
    with open(src_file, "rb") as src_f, open(tgt_file, "rb") as tgt_f:
        src, tgt = iter_lines(src_f, str(src_file)), iter_lines(tgt_f, str(tgt_file))
        row = 1
        while True:
            src_part, tgt_part = list(itertools.islice(src, size)), list(itertools.islice(tgt, size))
            if len(src_part) != len(tgt_part):
                n_src = row - 1 + len(src_part) + sum(1 for _ in src)
                n_tgt = row - 1 + len(tgt_part) + sum(1 for _ in tgt)
                raise DataError(f"parallel files differ in length: {src_file} has {n_src} "
                                f"lines, {tgt_file} has {n_tgt}")
            if not src_part:
                return
            yield Chunk(str(src_file), row, src=src_part, tgt=tgt_part)
            row += len(src_part)


def _table_chunks(source: SplitSource, cfg: DataConfig, size: int) -> Iterator[Chunk]:
    """Rows of a table file or a hub dataset, streamed through `datasets`."""
    import datasets

    if source.kind == "hub":
        try:
            _offline_unless_hub_answers()
            rows = datasets.load_dataset(source.dataset, source.subset, split=source.name,
                                         streaming=True)
            batches = iter(rows.iter(batch_size=size))
            first = next(batches, None)
        except Exception as e:
            raise _hub_error(source, e) from None
        batches = itertools.chain([first] if first else [], batches)
    else:
        lines = None
        if source.kind != "parquet":  # arrow would fail later, without naming the line
            lines = _check_lines(source.files[0])
        rows = datasets.load_dataset(source.kind, data_files={"split": str(source.files[0])},
                                     split="split", streaming=True,
                                     **_csv_options(source.files[0]))
        batches = rows.iter(batch_size=size)
    row = 1
    try:
        for batch in batches:
            src, tgt = _columns(batch, cfg, source.where)
            yield Chunk(source.where, row, src=src, tgt=tgt)
            row += len(src)
    except DataError:
        raise
    except Exception as e:  # datasets wraps parse errors in several types
        raise DataError(f"{source.where}: could not be read as {source.kind}: "
                        f"{first_line(e)}") from None
    if source.kind == "csv" and row != lines:  # rows + the header line
        quoting = ("TSV has no quoting, so a row is a line" if source.files[0].suffix == ".tsv"
                   else "a quoted field spans lines (a stray '\"'?); a row must be one line")
        raise DataError(f"{source.where}: read {row - 1} rows from {lines - 1} lines after the "
                        f"header: {quoting}")


def _csv_options(path: Path) -> dict:
    """How `datasets` reads a CSV or TSV file: every field as text ('' where empty, never NaN:
    "NA" and "null" are sentences too); a TSV file has no quoting, a CSV file the usual '"'."""
    if path.suffix not in (".csv", ".tsv"):
        return {}
    options = {"keep_default_na": False, "na_filter": False}
    if path.suffix == ".tsv":
        options.update(delimiter="\t", quoting=csv.QUOTE_NONE)
    return options


_HUB_DOWN: list[str] = []  # why the hub did not answer, once this process has found out


def _offline_unless_hub_answers(timeout: float = 3.0) -> None:
    """Put `datasets` in offline mode (its local cache only) when the hub's host does not take a
    connection within `timeout` seconds: it would otherwise retry for half a minute, warning at
    every try, before it gave up."""
    import datasets
    import huggingface_hub.constants as hub

    if hub.HF_HUB_OFFLINE or _HUB_DOWN:
        return
    url = urllib.parse.urlsplit(hub.ENDPOINT)
    try:
        socket.create_connection((url.hostname, url.port or 443), timeout=timeout).close()
    except OSError as e:
        _HUB_DOWN.append(f"{url.hostname}: {e.strerror or first_line(e)}")
        datasets.config.HF_HUB_OFFLINE = hub.HF_HUB_OFFLINE = True


def _hub_error(source: SplitSource, e: Exception) -> DataError:
    first = first_line(e)
    if "split" in first.lower() and "unknown" in first.lower():
        return DataError(f"{source.dataset}: {first}")
    if _HUB_DOWN:
        first = f"the hub does not answer ({_HUB_DOWN[0]}) and the dataset is not in the local cache"
    return DataError(
        f"could not load '{source.dataset}' from the Hugging Face hub ({first}). Offline? Point "
        f"at a local copy with `--data PATH` or the environment variable TRANSLATE_DATA=PATH.")


def _columns(batch: dict, cfg: DataConfig, where: str) -> tuple[list, list]:
    """A batch of table rows' (source, target) columns, flat or under 'translation'."""
    if cfg.src_lang in batch and cfg.tgt_lang in batch:
        return list(batch[cfg.src_lang]), list(batch[cfg.tgt_lang])
    if "translation" in batch:
        pairs = [pair_of(p if isinstance(p, dict) else {}, cfg.src_lang, cfg.tgt_lang, where)
                 for p in batch["translation"]]
        return [p[0] for p in pairs], [p[1] for p in pairs]
    raise DataError(f"{where}: need columns '{cfg.src_lang}' and '{cfg.tgt_lang}' (flat or under "
                    f"'translation'); found {sorted(batch)}")


def load_split(cfg: DataConfig, split: str) -> tuple[list[str], list[str]]:
    """Return the (source, target) sentences of one split, named as in `cfg.splits`."""
    src, tgt = [], []
    for chunk in read_chunks(find_split(cfg, split), cfg):
        s, t = parse_chunk(chunk, cfg.src_lang, cfg.tgt_lang)
        src += s
        tgt += t
    return src, tgt


def split_identity(source: SplitSource) -> dict:
    """What a split's content is, for cache keys: each local file's size and SHA-256 (~0.7 s a
    GB; a file touched but not changed keeps its key); for a hub dataset, its name, subset,
    split and the builder's hash (the revision)."""
    if source.kind != "hub":
        return {"files": [_file_identity(f) for f in source.files]}
    import datasets

    try:
        _offline_unless_hub_answers()
        builder = datasets.load_dataset_builder(source.dataset, source.subset)
    except Exception as e:
        raise _hub_error(source, e) from None
    return {"hub": source.dataset, "subset": source.subset, "split": source.name,
            "hash": builder.hash, "version": str(builder.info.version)}


def _file_identity(path: Path) -> dict:
    with open(path, "rb") as f:
        digest = hashlib.file_digest(f, "sha256").hexdigest()
    return {"name": path.name, "size": path.stat().st_size, "sha256": digest}


def read_lines(path: Path) -> list[str]:
    """Read a UTF-8 text file as lines, naming the file and line of any invalid byte."""
    with open(path, "rb") as f:
        return list(iter_lines(f, str(path)))


def iter_lines(stream: BinaryIO, name: str) -> Iterator[str]:
    """Lines of a binary stream as text, one at a time, naming the line of any invalid byte."""
    for number, raw in enumerate(stream, 1):
        try:
            yield raw.decode("utf-8").rstrip("\n").rstrip("\r")
        except UnicodeDecodeError as e:
            raise DataError(f"{name}: line {number} is not valid UTF-8 ({e.reason} at byte "
                            f"{e.start})") from None


def _check_lines(path: Path) -> int:
    """Read the file through, a line at a time, naming the first line that is not UTF-8 and, in
    a CSV or TSV file, the first row whose fields are more or fewer than the header's (pandas
    would take extra leading fields for an index, or fill missing ones, without a word).
    Return how many lines are not empty."""
    nonempty = 0

    def lines(f) -> Iterator[str]:
        nonlocal nonempty
        for line in iter_lines(f, str(path)):
            nonempty += bool(line)
            yield line

    with open(path, "rb") as f:
        if path.suffix not in (".csv", ".tsv"):
            for _ in lines(f):
                pass
            return nonempty
        rows = csv.reader(lines(f), **({"delimiter": "\t", "quoting": csv.QUOTE_NONE}
                                        if path.suffix == ".tsv" else {}))
        width = None
        for row in rows:
            if not row:
                continue
            width = width or len(row)
            if len(row) != width:
                raise DataError(f"{path}: line {rows.line_num} has {len(row)} fields, the "
                                f"header {width}")
    return nonempty


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


def pad(seqs: Sequence, value: int = PAD) -> torch.Tensor:
    """Right-pad 1-D id sequences (arrays, tensors or lists) into a (B, L) int64 tensor."""
    out = np.full((len(seqs), max((len(s) for s in seqs), default=0)), value, dtype=np.int64)
    for row, seq in zip(out, seqs):
        row[:len(seq)] = seq
    return torch.from_numpy(out)


def collate(src: Sequence, tgt: Sequence) -> Batch:
    tgt_out = pad(tgt)
    bos = torch.full((len(tgt), 1), BOS, dtype=torch.long)
    tgt_in = torch.cat([bos, tgt_out[:, :-1]], dim=1)
    # A target's EOS is dropped from the input; pads stay pads.
    tgt_in = tgt_in.masked_fill(tgt_out == PAD, PAD)
    return Batch(pad(src), tgt_in, tgt_out, int(sum(len(t) for t in tgt)))


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
                  shuffle: bool, seed: int = 0,
                  length_filter: Optional[LengthFilter] = None) -> TokenBatches:
    """Group the pairs (those `length_filter` keeps) by length so each batch holds about
    `max_tokens` padded tokens: a batch costs (its sentences) x (its longest source or target).

    Pairs are ordered by target, then source length; with `shuffle` the order within equal
    lengths and the order of the batches are random (seeded), so every epoch differs. Only the
    length arrays are read, a part at a time: beyond them, a corpus of n pairs costs 4n bytes
    (the order; 8n past 2**31 pairs), and a part of 262,144 pairs at a time.
    """
    src_lengths, tgt_lengths = np.asarray(src_lengths), np.asarray(tgt_lengths)
    rng = np.random.default_rng(seed)
    order, runs = _length_order(src_lengths, tgt_lengths, length_filter)
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


def _length_order(src: np.ndarray, tgt: np.ndarray,
                  length_filter: Optional[LengthFilter]) -> tuple[np.ndarray, np.ndarray]:
    """The kept pairs' indices sorted by (target, source) length, stable, and the runs of equal
    lengths in that order as rows (target length, source length, count).

    A counting sort over the (target, source) pairs of lengths: one pass counts them, a second
    places each part's indices, so no temporary is as long as the corpus."""
    width = int(max(src.max(initial=0), tgt.max(initial=0))) + 1

    def keys(part: slice) -> tuple[np.ndarray, np.ndarray]:
        s, t = src[part].astype(np.int64), tgt[part].astype(np.int64)
        index = np.arange(part.start, part.stop)
        if length_filter is not None:
            kept = length_filter.keeps(s, t)
            s, t, index = s[kept], t[kept], index[kept]
        return t * width + s, index

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


def iterate_batches(pairs: EncodedPairs, max_tokens: int, shuffle: bool,
                    seed: int = 0) -> Iterator[Batch]:
    for idx in token_batches(pairs.src.lengths, pairs.tgt.lengths, max_tokens, shuffle, seed,
                             pairs.length_filter):
        yield collate([pairs.src[i] for i in idx], [pairs.tgt[i] for i in idx])
