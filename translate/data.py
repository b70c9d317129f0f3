"""Parallel data: load through Hugging Face `datasets`, clean, encode (cached), batch by tokens.

A dataset is a hub name (``bentrevett/multi30k``, ``wmt14`` with subset ``de-en``) or a local folder
holding, per split, a JSON Lines / JSON / Parquet / CSV / TSV file (``train.jsonl``) or plain parallel
text (``train.en`` + ``train.de``). Columns are flat (``en``, ``de``) or nested
(``translation: {en, de}``).
"""

from __future__ import annotations

import hashlib
import itertools
import logging
import os
import random
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Callable, Iterator, Sequence

import torch

from translate.config import DataConfig
from translate.tokenizer import Tokenizer
from translate.tokens import BOS, PAD
from translate.utils import first_line

log = logging.getLogger(__name__)

TABLE_FORMATS = {".jsonl": "json", ".json": "json", ".parquet": "parquet", ".csv": "csv",
                 ".tsv": "csv"}


class DataError(ValueError):
    """Data that cannot be used; the message names the file, split or column."""


# ---------------------------------------------------------------------------------------------
# Loading raw text


def resolve_dataset(cfg: DataConfig) -> str:
    """The dataset to read: TRANSLATE_DATA (if set) wins over the recipe's `data.dataset`."""
    return os.environ.get("TRANSLATE_DATA") or cfg.dataset


def load_split(cfg: DataConfig, split: str) -> tuple[list[str], list[str]]:
    """Return the (source, target) sentences of one split, named as in `cfg.splits`."""
    dataset = resolve_dataset(cfg)
    name = cfg.splits.get(split, split)
    path = Path(dataset).expanduser()
    if path.exists() or dataset.startswith((".", "/", "~")):
        if not path.is_dir():
            raise DataError(f"data folder not found: {dataset}")
        rows = _load_local(path, split, name, cfg)
    else:
        rows = _load_hub(dataset, cfg.subset, name)
    return _columns(rows, cfg, f"{dataset} [{name}]")


def _load_local(folder: Path, split: str, name: str, cfg: DataConfig):
    import datasets

    for stem in dict.fromkeys([split, name]):
        for suffix, builder in TABLE_FORMATS.items():
            file = folder / f"{stem}{suffix}"
            if file.is_file():
                kwargs = {"delimiter": "\t"} if suffix == ".tsv" else {}
                _check_utf8(file)  # arrow would fail later, without naming the line
                try:
                    return datasets.load_dataset(builder, data_files={"split": str(file)},
                                                 split="split", **kwargs)
                except Exception as e:  # datasets wraps parse errors in several types
                    raise DataError(f"{file}: could not be read as {builder}: "
                                    f"{first_line(e)}") from None
        src_file, tgt_file = folder / f"{stem}.{cfg.src_lang}", folder / f"{stem}.{cfg.tgt_lang}"
        if src_file.is_file() and tgt_file.is_file():
            return read_parallel_text(src_file, tgt_file, cfg.src_lang, cfg.tgt_lang)
    found = sorted(p.name for p in folder.iterdir())
    raise DataError(f"no file for split '{split}' in {folder} (looked for {split}/{name} as "
                    f".jsonl/.json/.parquet/.csv/.tsv or .{cfg.src_lang}+.{cfg.tgt_lang}); "
                    f"the folder has: {found}")


def _load_hub(dataset: str, subset: str | None, name: str):
    import datasets

    try:
        return datasets.load_dataset(dataset, subset, split=name)
    except Exception as e:
        first = first_line(e)
        if "split" in first.lower() and "unknown" in first.lower():
            raise DataError(f"{dataset}: {first}") from None
        raise DataError(
            f"could not load '{dataset}' from the Hugging Face hub ({first}). Offline? Point at a "
            f"local copy with `--data PATH` or the environment variable TRANSLATE_DATA=PATH.") from None


def read_lines(path: Path) -> list[str]:
    """Read a UTF-8 text file as lines, naming the file and line of any invalid byte."""
    data = path.read_bytes()
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    out = []
    for number, line in enumerate(lines, 1):
        try:
            out.append(line.decode("utf-8").rstrip("\r"))
        except UnicodeDecodeError as e:
            raise DataError(f"{path}: line {number} is not valid UTF-8 ({e.reason} at byte "
                            f"{e.start})") from None
    return out


def iter_lines(stream: BinaryIO, name: str) -> Iterator[str]:
    """Lines of a binary stream as text, one at a time, naming the line of any invalid byte."""
    for number, raw in enumerate(stream, 1):
        try:
            yield raw.decode("utf-8").rstrip("\n").rstrip("\r")
        except UnicodeDecodeError as e:
            raise DataError(f"{name}: line {number} is not valid UTF-8 ({e.reason} at byte "
                            f"{e.start})") from None


def _check_utf8(path: Path) -> None:
    if path.suffix in (".jsonl", ".json", ".csv", ".tsv"):
        try:
            path.read_bytes().decode("utf-8")
        except UnicodeDecodeError:
            read_lines(path)  # finds and names the line


def read_parallel_text(src_file: Path, tgt_file: Path, src_lang: str, tgt_lang: str):
    import datasets

    src, tgt = read_lines(src_file), read_lines(tgt_file)
    if len(src) != len(tgt):
        raise DataError(f"parallel files differ in length: {src_file} has {len(src)} lines, "
                        f"{tgt_file} has {len(tgt)}")
    return datasets.Dataset.from_dict({src_lang: src, tgt_lang: tgt})


def _columns(rows, cfg: DataConfig, where: str) -> tuple[list[str], list[str]]:
    columns = rows.column_names
    if cfg.src_lang in columns and cfg.tgt_lang in columns:
        return list(rows[cfg.src_lang]), list(rows[cfg.tgt_lang])
    if "translation" in columns:
        pairs = rows["translation"]
        if pairs and cfg.src_lang in pairs[0] and cfg.tgt_lang in pairs[0]:
            return [p[cfg.src_lang] for p in pairs], [p[cfg.tgt_lang] for p in pairs]
    raise DataError(f"{where}: need columns '{cfg.src_lang}' and '{cfg.tgt_lang}' (flat or under "
                    f"'translation'); found {columns}")


# ---------------------------------------------------------------------------------------------
# Cleaning and encoding


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


CACHE_FORMAT = b"token-array-1"  # in the cache key: entries in another layout are never read


class TokenArray:
    """Sentences of token ids stored flat: one int32 array of every id and the offsets where each
    sentence starts, so a corpus of millions of sentences is two tensors, not millions of them.

    `array[i]` is sentence i (a view); `lengths` holds every sentence's length.
    """

    def __init__(self, values: torch.Tensor, offsets: torch.Tensor):
        self.values = values  # (total ids,) int32
        self.offsets = offsets  # (n + 1,) int64: sentence i is values[offsets[i]:offsets[i + 1]]

    @classmethod
    def from_lists(cls, seqs: Sequence[Sequence[int]]) -> "TokenArray":
        lengths = torch.tensor([len(s) for s in seqs], dtype=torch.int64)
        values = torch.tensor(list(itertools.chain.from_iterable(seqs)), dtype=torch.int32)
        return cls(values, torch.cat([torch.zeros(1, dtype=torch.int64), lengths.cumsum(0)]))

    @classmethod
    def encode(cls, encode: Callable[[Sequence[str]], list[list[int]]], texts: Sequence[str],
               chunk: int = 50_000) -> "TokenArray":
        """`encode(texts)` stored flat, `chunk` sentences at a time: the lists SentencePiece
        returns never hold more than one chunk."""
        parts = [cls.from_lists(encode(texts[i: i + chunk])) for i in range(0, len(texts), chunk)]
        if not parts:
            return cls.from_lists([])
        lengths = torch.cat([part.lengths for part in parts])
        return cls(torch.cat([part.values for part in parts]),
                   torch.cat([torch.zeros(1, dtype=torch.int64), lengths.cumsum(0)]))

    @property
    def lengths(self) -> torch.Tensor:
        return self.offsets[1:] - self.offsets[:-1]  # (n,)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, i: int) -> torch.Tensor:
        return self.values[self.offsets[i]: self.offsets[i + 1]]

    def total_length(self, indices: Sequence[int]) -> int:
        """The summed length of sentences `indices`."""
        idx = torch.as_tensor(indices, dtype=torch.int64)
        return int((self.offsets[idx + 1] - self.offsets[idx]).sum())

    def __iter__(self) -> Iterator[torch.Tensor]:
        return (self[i] for i in range(len(self)))

    def is_whole(self) -> bool:
        """Offsets that start at 0, never fall and end at the last id: what a reader can trust."""
        o = self.offsets
        return (self.values.dtype == torch.int32 and o.dtype == torch.int64 and o.dim() == 1
                and len(o) > 0 and int(o[0]) == 0 and int(o[-1]) == len(self.values)
                and bool((o[1:] >= o[:-1]).all()))

    def select(self, keep: torch.Tensor) -> "TokenArray":
        """The sentences at indices `keep` (in that order), as a new flat array."""
        lengths = self.lengths[keep]
        offsets = torch.cat([torch.zeros(1, dtype=torch.int64), lengths.cumsum(0)])
        # each kept id's position in `values`: its sentence's start plus its place in the sentence
        within = torch.arange(int(offsets[-1])) - torch.repeat_interleave(offsets[:-1], lengths)
        starts = torch.repeat_interleave(self.offsets[:-1][keep], lengths)
        return TokenArray(self.values[starts + within], offsets)


@dataclass
class EncodedPairs:
    """Token ids of a parallel corpus, both sides ending in EOS."""

    src: TokenArray
    tgt: TokenArray

    def __len__(self) -> int:
        return len(self.src)


def encode_pairs(tokenizer: Tokenizer, src: Sequence[str], tgt: Sequence[str],
                 cache_dir: str | None = None) -> EncodedPairs:
    """Encode with SentencePiece, reusing an earlier run's result when text and model match."""
    digest = hashlib.sha256(CACHE_FORMAT)
    for part in (tokenizer.src_model, tokenizer.tgt_model, "\n".join(src).encode(),
                 b"\x00", "\n".join(tgt).encode()):
        digest.update(part if isinstance(part, bytes) else part.encode())
    root = Path(cache_dir or os.environ.get("TRANSLATE_CACHE", "~/.cache/translate")).expanduser()
    file = root / "encoded" / f"{digest.hexdigest()[:32]}.pt"
    if file.is_file():
        try:
            cached = torch.load(file, weights_only=True)
            pairs = EncodedPairs(TokenArray(*cached["src"]), TokenArray(*cached["tgt"]))
            if pairs.src.is_whole() and pairs.tgt.is_whole() and len(pairs.src) == len(src):
                return pairs
            raise ValueError("inconsistent arrays")
        except Exception:  # a damaged cache entry is rebuilt, never trusted
            log.warning("ignoring unreadable cache file %s", file)
    encoded = EncodedPairs(TokenArray.encode(tokenizer.encode_src, src),
                           TokenArray.encode(tokenizer.encode_tgt, tgt))
    try:
        file.parent.mkdir(parents=True, exist_ok=True)
        tmp = file.with_suffix(f".tmp{os.getpid()}")
        torch.save({side: (array.values, array.offsets)
                    for side, array in (("src", encoded.src), ("tgt", encoded.tgt))}, tmp)
        os.replace(tmp, file)
    except OSError as e:
        log.warning("could not write the encoded-data cache (%s); continuing without it", e)
    return encoded


def filter_lengths(pairs: EncodedPairs, max_len: int, max_ratio: float,
                   stats: CleanStats) -> EncodedPairs:
    """Drop training pairs longer than `max_len` pieces or with a length ratio over `max_ratio`."""
    s, t = pairs.src.lengths, pairs.tgt.lengths  # (n,) each
    too_long = (s > max_len) | (t > max_len)
    longer, shorter = torch.maximum(s, t), torch.minimum(s, t)
    bad_ratio = ~too_long & (longer > max_ratio * shorter) & (longer > 8)
    stats.too_long += int(too_long.sum())
    stats.bad_ratio += int(bad_ratio.sum())
    keep = torch.nonzero(~(too_long | bad_ratio)).flatten()
    return EncodedPairs(pairs.src.select(keep), pairs.tgt.select(keep))


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


def pad(seqs: Sequence[torch.Tensor], value: int = PAD) -> torch.Tensor:
    """Right-pad 1-D tensors into a (B, L) int64 tensor."""
    return torch.nn.utils.rnn.pad_sequence([s.long() for s in seqs], batch_first=True,
                                           padding_value=value)


def collate(src: Sequence[torch.Tensor], tgt: Sequence[torch.Tensor]) -> Batch:
    tgt_out = pad(tgt)
    bos = torch.full((len(tgt), 1), BOS, dtype=torch.long)
    tgt_in = torch.cat([bos, tgt_out[:, :-1]], dim=1)
    # A target's EOS is dropped from the input; pads stay pads.
    tgt_in = tgt_in.masked_fill(tgt_out == PAD, PAD)
    return Batch(pad(src), tgt_in, tgt_out, int(sum(len(t) for t in tgt)))


def token_batches(src_lengths: Sequence[int], tgt_lengths: Sequence[int], max_tokens: int,
                  shuffle: bool, seed: int = 0) -> list[list[int]]:
    """Group indices of similar length so each batch holds about `max_tokens` padded tokens.

    Each batch's cost is (number of sentences) x (longest source or target); with `shuffle` the
    order within equal lengths and the order of batches are random (seeded), so every epoch differs.
    """
    rng = random.Random(seed)
    order = list(range(len(src_lengths)))
    noise = [rng.random() for _ in order] if shuffle else [0.0] * len(order)
    order.sort(key=lambda i: (tgt_lengths[i], src_lengths[i], noise[i]))
    batches, current, longest = [], [], 0
    for i in order:
        size = max(src_lengths[i], tgt_lengths[i])
        if current and max(longest, size) * (len(current) + 1) > max_tokens:
            batches.append(current)
            current, longest = [], 0
        current.append(i)
        longest = max(longest, size)
    if current:
        batches.append(current)
    if shuffle:
        rng.shuffle(batches)
    return batches


def iterate_batches(pairs: EncodedPairs, max_tokens: int, shuffle: bool,
                    seed: int = 0) -> Iterator[Batch]:
    lengths_src, lengths_tgt = pairs.src.lengths.tolist(), pairs.tgt.lengths.tolist()
    for idx in token_batches(lengths_src, lengths_tgt, max_tokens, shuffle, seed):
        yield collate([pairs.src[i] for i in idx], [pairs.tgt[i] for i in idx])
