"""The encoded corpus on disk: built once, mapped after, rebuilt when its text changes, never
trusted half-written."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from translate.config import DataConfig
from translate.data import DataError
from translate.data import cache as cache_module
from translate.data.cache import encoded_corpus, sample_pairs
from translate.data.clean import clean_text_pairs
from translate.data.encode import encode_pairs
from translate.data.read import load_split
from helpers.files import read_jsonl


def config(folder: Path, cache: Path, **kw) -> DataConfig:
    return DataConfig(dataset=str(folder), cache_dir=str(cache), **kw)


def entries(cache: Path) -> list[str]:
    folder = cache / "corpora"
    return sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []


def as_lists(pairs) -> list[tuple[list[int], list[int]]]:
    return [(s.tolist(), t.tolist()) for s, t in zip(pairs.src, pairs.tgt)]


def test_encoded_once_then_mapped_without_reading_text(data, tmp_path, tokenizer, monkeypatch):
    cfg = config(data, tmp_path / "cache")
    built = encoded_corpus(cfg, "train", tokenizer, num_proc=1)
    src, tgt = load_split(cfg, "train")
    keep, stats = clean_text_pairs(src, tgt)
    expected = encode_pairs(tokenizer, [src[i] for i in keep], [tgt[i] for i in keep])
    assert as_lists(built.pairs) == as_lists(expected)
    assert built.stats == stats and (stats.total, stats.kept) == (2002, 2000)
    assert isinstance(built.pairs.src.values, np.memmap) and built.pairs.src.values.dtype == np.uint16

    def no_text(*args, **kwargs):
        raise AssertionError("the text was read again")

    monkeypatch.setattr(cache_module, "read_chunks", no_text)
    mapped = encoded_corpus(cfg, "train", tokenizer)
    assert mapped.key == built.key and as_lists(mapped.pairs) == as_lists(built.pairs)
    assert entries(tmp_path / "cache") == [built.key]


def test_worker_processes_write_the_same_bytes_as_one_process(data, tmp_path, tokenizer,
                                                               monkeypatch):
    monkeypatch.setattr(cache_module, "CHUNK_PAIRS", 300)  # 7 chunks, so the workers share them
    one = encoded_corpus(config(data, tmp_path / "one"), "train", tokenizer, num_proc=1)
    two = encoded_corpus(config(data, tmp_path / "two"), "train", tokenizer, num_proc=2)
    for name in ("src.ids", "src.offsets", "src.lengths", "tgt.ids", "tgt.offsets", "tgt.lengths"):
        assert (tmp_path / "one/corpora" / one.key / name).read_bytes() == \
            (tmp_path / "two/corpora" / two.key / name).read_bytes(), name
    assert one.stats == two.stats


def test_a_changed_file_gets_a_new_entry_a_touched_one_does_not(data, tmp_path, tokenizer):
    cfg = config(data, tmp_path / "cache")
    first = encoded_corpus(cfg, "train", tokenizer)
    os.utime(data / "train.jsonl", (1, 1))  # same bytes, another time
    assert encoded_corpus(cfg, "train", tokenizer).key == first.key
    text = (data / "train.jsonl").read_text(encoding="utf-8")
    (data / "train.jsonl").write_text(text.replace("Two young", "Two old", 1), encoding="utf-8")
    changed = encoded_corpus(cfg, "train", tokenizer)
    assert changed.key != first.key and len(entries(tmp_path / "cache")) == 2
    assert changed.pairs.src[0].tolist() != first.pairs.src[0].tolist()
    assert changed.pairs.src[1].tolist() == first.pairs.src[1].tolist()


def test_a_damaged_entry_is_encoded_again(data, tmp_path, tokenizer, caplog):
    cfg = config(data, tmp_path / "cache")
    first = encoded_corpus(cfg, "train", tokenizer)
    expected = as_lists(first.pairs)
    ids = tmp_path / "cache/corpora" / first.key / "tgt.ids"
    ids.write_bytes(ids.read_bytes()[:-6])  # a file cut short
    again = encoded_corpus(cfg, "train", tokenizer)
    assert "damaged encoded corpus" in caplog.text
    assert as_lists(again.pairs) == expected


FULL_DISK = """
import resource, signal, sys
from translate.config import DataConfig
from translate.data import DataError
from translate.data.cache import encoded_corpus
from translate.tokenizer import Tokenizer
model = open(sys.argv[2], "rb").read()
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails, as on a full disk
resource.setrlimit(resource.RLIMIT_FSIZE, (20_000, 20_000))
try:
    encoded_corpus(DataConfig(dataset=sys.argv[1], cache_dir=sys.argv[3]), "train",
                   Tokenizer(model, model), num_proc=1)
except DataError as e:
    print(e)
"""


def test_a_full_disk_leaves_no_entry_behind(data, tmp_path, tokenizer):
    model = tmp_path / "spm.model"
    model.write_bytes(tokenizer.src_model)
    cache = tmp_path / "cache"
    out = subprocess.run([sys.executable, "-c", FULL_DISK, str(data), str(model), str(cache)],
                         capture_output=True, text=True, timeout=120)
    assert "could not write the encoded corpus" in out.stdout and "File too large" in out.stdout
    assert entries(cache) == []  # neither an entry nor its temporary folder
    assert len(encoded_corpus(config(data, cache), "train", tokenizer).pairs) == 2000


def test_the_encoding_workers_start_without_torch():
    """A worker process imports `translate.data.encode` (and the steps before it it needs): no
    torch and no model code, so it starts in a fraction of a second."""
    code = ("import sys, translate.data.encode; "
            "print(sorted(m for m in sys.modules if m in ('torch', 'translate.config')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, check=True)
    assert out.stdout.strip() == "[]"


def test_a_dead_process_temporary_folder_is_removed(data, tmp_path, tokenizer):
    import socket

    stale = tmp_path / "cache/corpora" / f"abc.tmp-{socket.gethostname()}-999999999"
    stale.mkdir(parents=True)
    (stale / "src.ids").write_bytes(b"half")
    corpus = encoded_corpus(config(data, tmp_path / "cache"), "train", tokenizer)
    assert entries(tmp_path / "cache") == [corpus.key]


def test_a_bad_row_names_its_line_and_leaves_nothing(data, tmp_path, tokenizer):
    lines = (data / "train.jsonl").read_text(encoding="utf-8").splitlines()
    lines[1500] = json.dumps({"en": None, "de": "Ein Hund."})
    (data / "train.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"train\.jsonl: row 1501: 'en' holds NoneType"):
        encoded_corpus(config(data, tmp_path / "cache"), "train", tokenizer)
    lines[1500] = '{"en": "A dog.", "de": '
    (data / "train.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"train\.jsonl: line 1501 is not valid JSON"):
        encoded_corpus(config(data, tmp_path / "cache"), "train", tokenizer, num_proc=2)
    assert entries(tmp_path / "cache") == []


def test_parallel_text_and_tables_encode_alike(data, tmp_path, tokenizer):
    rows = read_jsonl(data / "train.jsonl")
    text = tmp_path / "text"
    text.mkdir()
    for lang in ("en", "de"):
        (text / f"train.{lang}").write_text("".join(r[lang] + "\n" for r in rows), encoding="utf-8")
    from_jsonl = encoded_corpus(config(data, tmp_path / "cache"), "train", tokenizer)
    from_text = encoded_corpus(config(text, tmp_path / "cache"), "train", tokenizer)
    assert from_text.key != from_jsonl.key
    assert as_lists(from_text.pairs) == as_lists(from_jsonl.pairs)


def test_a_hub_corpus_is_streamed_and_keyed_by_its_revision(tmp_path, tokenizer, monkeypatch):
    import datasets

    rows = {"translation": [{"en": f"A dog number {i}.", "de": f"Ein Hund Nummer {i}."}
                            for i in range(50)]}
    calls = []

    def load_dataset(name, subset, split, streaming=False):
        calls.append((name, subset, split, streaming))
        return datasets.Dataset.from_dict(rows).to_iterable_dataset()

    class Builder:
        hash, info = "rev1", datasets.DatasetInfo(version="1.0.0")

    monkeypatch.setattr(datasets, "load_dataset", load_dataset)
    monkeypatch.setattr(datasets, "load_dataset_builder", lambda name, subset: Builder)
    cfg = DataConfig(dataset="wmt14", subset="de-en", cache_dir=str(tmp_path / "cache"))
    corpus = encoded_corpus(cfg, "train", tokenizer)
    assert calls == [("wmt14", "de-en", "train", True)] and len(corpus.pairs) == 50
    assert corpus.pairs.tgt[7].tolist() == tokenizer.encode_tgt(["Ein Hund Nummer 7."])[0]
    Builder.hash = "rev2"  # another revision of the dataset: encoded again
    assert encoded_corpus(cfg, "train", tokenizer).key != corpus.key


def test_the_tokenizer_sample_is_uniform_seeded_and_whole_when_small(data, tmp_path):
    cfg = config(data, tmp_path / "cache")
    src, tgt, stats = sample_pairs(cfg, "train", 5000)
    all_src, all_tgt = load_split(cfg, "train")
    keep, _ = clean_text_pairs(all_src, all_tgt)
    assert src == [all_src[i] for i in keep] and tgt == [all_tgt[i] for i in keep]
    assert stats.total == 2002 and stats.kept == 2000
    small, _, _ = sample_pairs(cfg, "train", 100, seed=1)
    assert small == sample_pairs(cfg, "train", 100, seed=1)[0] != sample_pairs(cfg, "train", 100,
                                                                              seed=2)[0]
    assert len(small) == 100 and set(small) <= set(src)
    positions = sorted(src.index(s) for s in small)
    assert positions[-1] > 1000  # drawn from the whole split, not its head


def test_a_recipe_can_name_an_existing_sentencepiece_model(small_data, tmp_path, tokenizer):
    from helpers.training import RECIPES
    from translate.config import load_recipe
    from translate.training import prepare_data
    from translate.training.prepare import given_tokenizer

    model = tmp_path / "spm.model"
    model.write_bytes(tokenizer.src_model)
    recipe = load_recipe(RECIPES / "transformer.yaml",
                         [f"data.dataset={small_data}", f"tokenizer.model={model}"])
    run = tmp_path / "run"
    run.mkdir()
    data = prepare_data(recipe, run)
    assert data.tokenizer.src_model == tokenizer.src_model  # used, not trained
    assert (run / "spm.model").read_bytes() == tokenizer.src_model and len(data.train) == 2000
    (tmp_path / "junk.model").write_bytes(b"not a model")
    with pytest.raises(DataError, match="junk.model is not a SentencePiece model"):
        given_tokenizer(str(tmp_path / "junk.model"), joint=True)
    with pytest.raises(DataError, match="cannot read"):
        given_tokenizer(str(tmp_path / "missing.model"), joint=True)
    with pytest.raises(DataError, match="tokenizer.joint: true"):
        given_tokenizer(str(model), joint=False)
