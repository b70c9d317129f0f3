"""Cache: a train split encoded once onto disk, then memory-mapped by every run that uses it.

An entry is a folder ``<cache>/corpora/<key>/`` holding, for each side (``src``, ``tgt``), every
kept sentence's ids back to back (``.ids``: uint16 for vocabularies up to 65,536, else int32),
where each sentence starts (``.offsets``, int64) and its length (``.lengths``), and
``manifest.json`` with the counts, the cleaning statistics and a CRC-32 of each array. The key
covers the split's content (each file's size and SHA-256, or a hub dataset's revision), the
SentencePiece models and this layout: a corpus file that changes gets a new entry, never a mix of
old and new.

An entry cannot lie about its text or its arrays. The files are hashed again once encoded: one
rewritten while it was read would file new text under the old bytes' key, so that entry is
discarded and the run refused. Each array's CRC-32 is checked whenever an entry is opened (about
3 GB/s: a fraction of a second for WMT14), and an entry that fails it is encoded again.

Encoding streams the split a chunk at a time through `num_proc` worker processes, so memory does
not grow with the corpus. An entry is written into a temporary folder and renamed into place
whole: a full disk or a killed process leaves nothing that a later run would trust.

`sample_pairs` streams the split through the text rules the same way, a chunk at a time, for
SentencePiece to train on before there are ids to cache.
"""

from __future__ import annotations

import collections
import concurrent.futures
import errno
import hashlib
import json
import logging
import multiprocessing
import os
import random
import shutil
import socket
import zlib
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Iterator, Optional

import numpy as np

from translate.config import DataConfig
from translate.data import DataError
from translate.data.clean import CleanStats, clean_text_pairs
from translate.data.encode import (ChunkEncoder, EncodedChunk, EncodedPairs, TokenArray,
                                   encode_in_worker, start_worker)
from translate.data.read import SplitSource, find_split, read_chunks, split_identity
from translate.data.rows import parse_chunk
from translate.files import describe, open_regular, read_regular
from translate.tokenizer import Tokenizer
from translate.utils import first_line

log = logging.getLogger(__name__)

LAYOUT = "corpus-2"  # in the key: entries written in another layout are never read
SIDES = ("src", "tgt")
CHUNK_PAIRS = 10_000  # pairs read, and encoded by one worker, at a time


@dataclass
class Corpus:
    pairs: EncodedPairs  # every pair the text rules kept, memory-mapped
    stats: CleanStats  # what the text rules dropped
    key: str  # names the split's content and the tokenizer: a run records it to resume


def cache_root(cfg: DataConfig) -> Path:
    return Path(cfg.cache_dir or os.environ.get("TRANSLATE_CACHE", "~/.cache/translate")
                ).expanduser()


def encoded_corpus(cfg: DataConfig, split: str, tokenizer: Tokenizer, num_proc: int = 0,
                   progress: bool = False) -> Corpus:
    """The split, cleaned and encoded: from the cache when an entry for this content and
    tokenizer exists, else encoded now (in `num_proc` processes; 0: one per CPU) and cached."""
    source = find_split(cfg, split)
    identity = {"layout": LAYOUT, "split": split_identity(source), "langs": [cfg.src_lang,
                cfg.tgt_lang], "models": [_sha256(tokenizer.src_model),
                                          _sha256(tokenizer.tgt_model)]}
    key = _sha256(json.dumps(identity, sort_keys=True).encode())[:32]
    folder = cache_root(cfg) / "corpora" / key
    corpus = open_corpus(folder, key)
    if corpus is None:
        log.info("encoding %s into %s", source.where, folder)
        build_corpus(folder, source, cfg, tokenizer, num_proc or _cpus(), progress, identity)
        corpus = open_corpus(folder, key)
        if corpus is None:
            raise DataError(f"the encoded corpus just written to {folder} cannot be read back")
    return corpus


def open_corpus(folder: Path, key: str) -> Optional[Corpus]:
    """The entry in `folder`, memory-mapped; None when there is none or it does not hold together
    (then it is removed, to be rebuilt)."""
    manifest = folder / "manifest.json"
    if not folder.is_dir() or folder.is_symlink():
        return None
    try:  # every file opened only if it is a regular one: a FIFO or a link would block or lead out
        info = json.loads(read_regular(manifest, what="cache manifest").decode("utf-8"))
        for name, expected in info["checksums"].items():
            if _checksum(folder / name) != expected:
                raise ValueError(f"{name} does not match its checksum")
        sides = [_open_side(folder, side, info) for side in SIDES]
        return Corpus(EncodedPairs(*sides), CleanStats(**info["stats"]), key)
    except (OSError, ValueError, KeyError, TypeError, RecursionError) as e:
        log.warning("ignoring damaged encoded corpus %s (%s); encoding again", folder,
                    first_line(e))
        shutil.rmtree(folder, ignore_errors=True)
        return None


def _open_side(folder: Path, side: str, info: dict) -> TokenArray:
    n, ids = info["pairs"], info["ids"][side]
    values = _map(folder / f"{side}.ids", np.dtype(info["id_dtype"]), ids)
    offsets = _map(folder / f"{side}.offsets", np.dtype(np.int64), n + 1)
    lengths = _map(folder / f"{side}.lengths", np.dtype(info["length_dtype"]), n)
    if int(offsets[0]) != 0 or int(offsets[-1]) != ids:
        raise ValueError(f"{side}.offsets do not span {side}.ids")
    return TokenArray(values, offsets[:-1], lengths)


def _map(path: Path, dtype: np.dtype, count: int) -> np.ndarray:
    """`count` values of `dtype` in `path`, memory-mapped read-only; it must be a regular file
    of that size."""
    with open_regular(path, count * dtype.itemsize, what="cached array") as f:
        return np.memmap(f, dtype, "r", shape=(count,)) if count else np.zeros(0, dtype)


def build_corpus(folder: Path, source: SplitSource, cfg: DataConfig, tokenizer: Tokenizer,
                 num_proc: int, progress: bool, identity: dict) -> None:
    """Encode the split into a temporary folder beside `folder`, then rename it into place."""
    if os.path.lexists(folder) and (folder.is_symlink() or not folder.is_dir()):
        raise DataError(f"{folder} is {describe(folder)}, where the cache keeps this corpus's "
                        f"entry: remove it, or point data.cache_dir or TRANSLATE_CACHE elsewhere")
    _remove_stale(folder.parent)
    tmp = folder.parent / f"{folder.name}.tmp-{socket.gethostname()}-{os.getpid()}"
    try:
        tmp.mkdir(parents=True)
        stats, counts = _write_sides(tmp, source, cfg, tokenizer, num_proc, progress)
        _check_unchanged(source, identity)
        lengths_dtype = _narrow_lengths(tmp)
        checksums = {f"{side}.{part}": _checksum(tmp / f"{side}.{part}")
                     for side in SIDES for part in ("ids", "offsets", "lengths")}
        info = {"identity": identity, "pairs": counts["pairs"], "ids": counts["ids"],
                "id_dtype": counts["id_dtype"], "length_dtype": lengths_dtype,
                "stats": asdict(stats), "checksums": checksums}
        (tmp / "manifest.json").write_text(json.dumps(info, indent=1), encoding="utf-8")
        try:
            tmp.rename(folder)
        except OSError:  # another process put the same entry in place first: use that one
            if not (folder / "manifest.json").is_file():
                raise
    except OSError as e:
        raise DataError(_write_refusal(e, folder.parent)) from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _write_refusal(error: OSError, where: Path) -> str:
    """What to do when the cache cannot be written, by the reason it gives."""
    said = f"could not write the encoded corpus to {where} ({error.strerror or first_line(error)})"
    if error.errno in (errno.ENOSPC, errno.EDQUOT):
        return f"{said}; free some space there, or point data.cache_dir or TRANSLATE_CACHE at " \
               f"a disk with room"
    if error.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return f"{said}; point data.cache_dir or TRANSLATE_CACHE at a folder you can write"
    blocked = next((p for p in (where, where.parent) if os.path.lexists(p) and
                    (p.is_symlink() or not p.is_dir())), None)
    if blocked is not None:
        return f"{said}: {blocked} is {describe(blocked)}, not a folder; remove it, or point " \
               f"data.cache_dir or TRANSLATE_CACHE elsewhere"
    return f"{said}; point data.cache_dir or TRANSLATE_CACHE at another folder"


def _check_unchanged(source: SplitSource, identity: dict) -> None:
    """Refuse an encoding whose files changed while they were read: its entry would hold new
    text under the old bytes' key, and every later run on the old bytes would train on it."""
    if source.kind == "hub":
        return
    for before, after in zip(identity["split"]["files"], split_identity(source)["files"]):
        if before != after:
            raise DataError(f"{source.where}: {before['name']} changed while it was being "
                            f"encoded; nothing was cached. Run again once the file is stable")


def _checksum(path: Path) -> str:
    """The CRC-32 of a file's bytes, as 8 hex digits."""
    crc = 0
    with open_regular(path, what="cached array") as f:
        while chunk := f.read(1 << 24):
            crc = zlib.crc32(chunk, crc)
    return f"{crc:08x}"


def _write_sides(tmp: Path, source: SplitSource, cfg: DataConfig, tokenizer: Tokenizer,
                 num_proc: int, progress: bool) -> tuple[CleanStats, dict]:
    from tqdm.auto import tqdm

    stats, ids, pairs = CleanStats(), {side: 0 for side in SIDES}, 0
    files = {(side, part): open(tmp / f"{side}.{part}", "wb")
             for side in SIDES for part in ("ids", "offsets", "lengths")}
    bar = tqdm(desc=f"encoding {source.where}", unit=" pairs", unit_scale=True,
               disable=not progress, dynamic_ncols=True)
    try:
        for side in SIDES:
            files[side, "offsets"].write(np.zeros(1, np.int64).data)
        args = (tokenizer.src_model, tokenizer.tgt_model, cfg.src_lang, cfg.tgt_lang)
        for chunk in _encode_chunks(read_chunks(source, cfg, CHUNK_PAIRS), args, num_proc):
            for side in SIDES:
                values, lengths = getattr(chunk, f"{side}_ids"), getattr(chunk, f"{side}_lengths")
                files[side, "ids"].write(values.data)  # raises with the errno on a full disk
                files[side, "offsets"].write((ids[side] + np.cumsum(lengths)).data)
                files[side, "lengths"].write(lengths.astype(np.int32).data)
                ids[side] += len(values)
            pairs += len(chunk.src_lengths)
            stats.add(chunk.stats)
            bar.update(chunk.stats.total)
        dtype = chunk.src_ids.dtype.name if pairs else "uint16"
    finally:
        bar.close()
        for f in files.values():
            f.close()
    return stats, {"pairs": pairs, "ids": ids, "id_dtype": dtype}


def _encode_chunks(chunks: Iterator, args: tuple, num_proc: int) -> Iterator[EncodedChunk]:
    """Each chunk encoded, in order: in this process when there is one chunk or one CPU, else
    by `num_proc` worker processes with at most two chunks each in flight."""
    first = next(chunks, None)
    second = next(chunks, None)
    if second is None or num_proc <= 1:
        encode = ChunkEncoder(*args, threads=max(1, num_proc))
        yield from map(encode, _prepend([first, second], chunks))
        return
    context = multiprocessing.get_context("spawn")  # workers import numpy and SentencePiece only
    with concurrent.futures.ProcessPoolExecutor(num_proc, context, start_worker, args) as pool:
        pending = collections.deque()
        try:
            for chunk in _prepend([first, second], chunks):
                pending.append(pool.submit(encode_in_worker, chunk))
                if len(pending) >= 2 * num_proc:
                    yield pending.popleft().result()
            while pending:
                yield pending.popleft().result()
        finally:
            for future in pending:
                future.cancel()


def _prepend(items: list, rest: Iterator) -> Iterator:
    yield from (item for item in items if item is not None)
    yield from rest


def _narrow_lengths(folder: Path) -> str:
    """Store the lengths as uint16 when every one fits (half the memory they take to batch)."""
    lengths = {side: np.fromfile(folder / f"{side}.lengths", np.int32) for side in SIDES}
    if any(len(a) and int(a.max()) >= 2 ** 16 for a in lengths.values()):
        return "int32"
    for side, array in lengths.items():
        (folder / f"{side}.lengths").write_bytes(array.astype(np.uint16).data)
    return "uint16"


def _remove_stale(root: Path) -> None:
    """Remove temporary folders that processes of this machine, no longer running, left."""
    host = socket.gethostname()
    for tmp in root.glob(f"*.tmp-{host}-*") if root.is_dir() else ():
        pid = tmp.name.rsplit("-", 1)[-1]
        if pid.isascii() and pid.isdigit() and not _running(int(pid)):
            shutil.rmtree(tmp, ignore_errors=True)


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)  # a PermissionError means it runs, as another user
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _cpus() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


def sample_pairs(cfg: DataConfig, split: str, size: int, seed: int = 1,
                 progress: bool = False) -> tuple[list[str], list[str], CleanStats]:
    """Up to `size` pairs the text rules keep, drawn uniformly from the split as it streams by
    (reservoir sampling, seeded): what SentencePiece trains on. A split of at most `size` usable
    pairs comes back whole, in order."""
    from tqdm.auto import tqdm

    rng = random.Random(seed)
    src, tgt, stats, seen = [], [], CleanStats(), 0
    source = find_split(cfg, split)
    with tqdm(desc=f"reading {source.where} for SentencePiece", unit=" pairs", unit_scale=True,
              disable=not progress, leave=False, dynamic_ncols=True) as bar:
        for chunk in read_chunks(source, cfg, CHUNK_PAIRS):
            s, t = parse_chunk(chunk, cfg.src_lang, cfg.tgt_lang)
            bar.update(len(s))
            keep, chunk_stats = clean_text_pairs(s, t)
            stats.add(chunk_stats)
            for i in keep:
                if seen < size:
                    src.append(s[i])
                    tgt.append(t[i])
                elif (j := rng.randrange(seen + 1)) < size:
                    src[j], tgt[j] = s[i], t[i]
                seen += 1
    return src, tgt, stats
