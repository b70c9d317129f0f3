"""The encoded-corpus cache cannot lie: a file rewritten in place while it is encoded is refused
and never cached (the restored file then encodes as a clean run does), and a cached array
damaged in place, at its size, is caught when the entry is opened and encoded again."""

import logging
from pathlib import Path

import numpy as np
import pytest

from helpers.cli import without_blocking
from translate.config import DataConfig
from translate.data import DataError
from translate.data import cache as cache_module
from translate.data.cache import encoded_corpus


def entries(cache: Path) -> list[Path]:
    folder = cache / "corpora"
    return sorted(folder.iterdir()) if folder.is_dir() else []


def as_lists(pairs) -> list:
    return [(s.tolist(), t.tolist()) for s, t in zip(pairs.src, pairs.tgt)]


@pytest.mark.parametrize("rewrite", ["same size", "shorter", "appended"])
def test_a_file_rewritten_while_encoded_is_refused_and_never_cached(data, tmp_path, tokenizer,
                                                                    monkeypatch, rewrite):
    clean = encoded_corpus(DataConfig(dataset=str(data), cache_dir=str(tmp_path / "clean")),
                           "train", tokenizer, num_proc=1)
    train = data / "train.jsonl"
    original = train.read_bytes()
    real = cache_module.read_chunks

    def read_then_rewrite(*args):
        for i, chunk in enumerate(real(*args)):
            yield chunk
            if i == 0:  # the first rows are read: someone rewrites the file in place
                if rewrite == "same size":
                    changed = original.replace(b"a", b"e")
                elif rewrite == "shorter":  # whole lines, so every row still parses
                    changed = b"".join(original.splitlines(keepends=True)[:1500])
                else:
                    changed = original + b"".join(original.splitlines(keepends=True)[:400])
                with open(train, "r+b") as f:
                    f.write(changed)
                    f.truncate()

    monkeypatch.setattr(cache_module, "CHUNK_PAIRS", 300)
    monkeypatch.setattr(cache_module, "read_chunks", read_then_rewrite)
    cache = tmp_path / "cache"
    cfg = DataConfig(dataset=str(data), cache_dir=str(cache))
    with pytest.raises(DataError, match="train.jsonl changed while it was being encoded; "
                                        "nothing was cached"):
        encoded_corpus(cfg, "train", tokenizer, num_proc=1)
    assert entries(cache) == []
    train.write_bytes(original)  # restored: the next run encodes it as a clean run does
    monkeypatch.setattr(cache_module, "read_chunks", real)
    again = encoded_corpus(cfg, "train", tokenizer, num_proc=1)
    assert again.key == clean.key and len(again.pairs) == len(clean.pairs) == 2000
    assert again.stats == clean.stats and as_lists(again.pairs) == as_lists(clean.pairs)


@pytest.mark.parametrize("array", ["src.ids", "tgt.ids", "src.offsets", "tgt.lengths"])
def test_a_cached_array_flipped_in_place_is_caught_and_encoded_again(data, tmp_path, tokenizer,
                                                                     caplog, array):
    cfg = DataConfig(dataset=str(data), cache_dir=str(tmp_path / "cache"))
    clean = as_lists(encoded_corpus(cfg, "train", tokenizer, num_proc=1).pairs)
    (entry,) = entries(tmp_path / "cache")
    path = entry / array
    size = path.stat().st_size
    raw = bytearray(path.read_bytes())
    raw[len(raw) // 2] ^= 0x01  # one bit, the size unchanged
    path.write_bytes(bytes(raw))
    with caplog.at_level(logging.WARNING, logger="translate"):
        again = encoded_corpus(cfg, "train", tokenizer, num_proc=1)
    assert f"{array} does not match its checksum" in caplog.text and "encoding again" in caplog.text
    assert path.stat().st_size == size and as_lists(again.pairs) == clean
    assert isinstance(again.pairs.src.values, np.memmap)


@pytest.mark.parametrize("name, make", [
    ("src.ids", "fifo"), ("tgt.offsets", "fifo"), ("manifest.json", "fifo"),
    ("src.ids", "link to /dev/zero"), ("tgt.lengths", "link to /dev/zero"),
    ("manifest.json", "link to /dev/zero"), ("src.lengths", "link loop"),
    ("tgt.ids", "link to a copy of itself"), ("manifest.json", "folder"),
])
def test_a_special_file_in_a_cache_entry_never_blocks_and_is_encoded_again(
        data, tmp_path, tokenizer, caplog, name, make):
    """Every file of an entry is opened only if it is a regular file, without following a link:
    a FIFO, a device or a link where one should be is a damaged entry, rebuilt at once."""
    import os

    cfg = DataConfig(dataset=str(data), cache_dir=str(tmp_path / "cache"))
    clean = as_lists(encoded_corpus(cfg, "train", tokenizer, num_proc=1).pairs)
    (entry,) = entries(tmp_path / "cache")
    path = entry / name
    kept = tmp_path / "kept"
    os.replace(path, kept)
    if make == "fifo":
        os.mkfifo(path)
    elif make == "link to /dev/zero":
        path.symlink_to("/dev/zero")
    elif make == "link loop":
        path.symlink_to(path)
    elif make == "folder":
        path.mkdir()
    else:
        path.symlink_to(kept)  # right bytes, but a link: it could lead anywhere
    with caplog.at_level(logging.WARNING, logger="translate"):
        again = without_blocking(lambda: encoded_corpus(cfg, "train", tokenizer, num_proc=1))
    assert "ignoring damaged encoded corpus" in caplog.text and name in caplog.text
    assert as_lists(again.pairs) == clean
    assert kept.exists() and (entry / name).is_file() and not (entry / name).is_symlink()


@pytest.mark.parametrize("make, says", [
    ("file", "is a regular file, where the cache keeps this corpus's entry"),
    ("link loop", "is a symbolic link to"),
    ("dangling link", "which does not exist"),
])
def test_a_stray_file_where_an_entry_goes_is_named_not_blamed_on_space(data, tmp_path, tokenizer,
                                                                        make, says):
    cfg = DataConfig(dataset=str(data), cache_dir=str(tmp_path / "cache"))
    encoded_corpus(cfg, "train", tokenizer, num_proc=1)
    (entry,) = entries(tmp_path / "cache")
    import shutil

    shutil.rmtree(entry)
    if make == "file":
        entry.write_text("someone's notes\n")
    elif make == "link loop":
        entry.symlink_to(entry)
    else:
        entry.symlink_to(tmp_path / "nowhere")
    with pytest.raises(DataError, match=f"{entry}.*{says}") as refusal:
        encoded_corpus(cfg, "train", tokenizer, num_proc=1)
    assert "free some space" not in str(refusal.value)
    assert make != "file" or entry.read_text() == "someone's notes\n"


@pytest.mark.parametrize("errno_name, says", [
    ("EACCES", "at a folder you can write"), ("EROFS", "at a folder you can write"),
    ("ENOSPC", "free some space there"), ("EDQUOT", "free some space there"),
    ("EIO", "at another folder"),
])
def test_a_cache_that_cannot_be_written_gets_the_hint_its_reason_calls_for(
        data, tmp_path, tokenizer, monkeypatch, errno_name, says):
    """A read-only cache is not a full disk: each reason gets its own hint (the reasons are
    raised here, since a test running as root writes into read-only folders anyway)."""
    import errno as errnos

    code = getattr(errnos, errno_name)

    def refuse(*args, **kwargs):
        raise OSError(code, f"{errno_name} here")

    monkeypatch.setattr(cache_module, "_write_sides", refuse)
    cfg = DataConfig(dataset=str(data), cache_dir=str(tmp_path / "cache"))
    with pytest.raises(DataError, match=says) as refusal:
        encoded_corpus(cfg, "train", tokenizer, num_proc=1)
    assert f"({errno_name} here)" in str(refusal.value)
    if errno_name != "ENOSPC" and errno_name != "EDQUOT":
        assert "free some space" not in str(refusal.value)
    assert entries(tmp_path / "cache") == []
