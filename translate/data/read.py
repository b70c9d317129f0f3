"""Read: find a split in a local folder or on the hub, and stream its rows a chunk at a time.

A dataset is a hub name (``bentrevett/multi30k``, ``wmt14`` with subset ``de-en``) or a local
folder holding, per split, a JSON Lines / JSON / Parquet / CSV / TSV file (``train.jsonl``) or
plain parallel text (``train.en`` + ``train.de``). Columns are flat (``en``, ``de``) or nested
(``translation: {en, de}``). Tables and the hub are read through Hugging Face `datasets`.
"""

from __future__ import annotations

import csv
import hashlib
import itertools
import socket
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Iterator, Optional

from translate.config import DataConfig
from translate.data import DataError
from translate.data.rows import Chunk, pair_of, parse_chunk
from translate.utils import first_line

TABLE_FORMATS = {".jsonl": "jsonl", ".json": "json", ".parquet": "parquet", ".csv": "csv",
                 ".tsv": "csv"}




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
    dataset = cfg.dataset
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
            src_part = list(itertools.islice(src, size))
            tgt_part = list(itertools.islice(tgt, size))
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
        first = (f"the hub does not answer ({_HUB_DOWN[0]}) and the dataset is not in the local "
                 f"cache")
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


MAX_LINE_BYTES = 1 << 20  # a sentence, a line of links: far less; /dev/zero: no end


def iter_lines(stream: BinaryIO, name: str) -> Iterator[str]:
    """Lines of a binary stream as text, one at a time, naming the line of any invalid byte and
    any line longer than MAX_LINE_BYTES (a binary file, a device with no line ends), which is
    refused before more of it is read."""
    for number, raw in enumerate(iter(lambda: stream.readline(MAX_LINE_BYTES + 1), b""), 1):
        if len(raw) > MAX_LINE_BYTES:
            raise DataError(f"{name}: line {number} is longer than {MAX_LINE_BYTES:,} bytes; "
                            f"is it a text file of sentences, one a line?")
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
