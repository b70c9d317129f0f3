"""The encoded-corpus cache cannot lie: a file rewritten in place while it is encoded is refused
and never cached (the restored file then encodes as a clean run does), and a cached array
damaged in place, at its size, is caught when the entry is opened and encoded again."""

import logging
from pathlib import Path

import numpy as np
import pytest

from test_corpus import data, tokenizer  # noqa: F401 (fixtures: a copy of the sample, a model)
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
