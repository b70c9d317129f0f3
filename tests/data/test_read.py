import json

import numpy as np
import pytest

from translate.config import DataConfig
from translate.data import DataError
from translate.data.clean import clean_text_pairs
from translate.data.encode import flatten
from translate.data.read import load_split
from translate.tokens import EOS

PAIRS = [{"en": "A dog runs.", "de": "Ein Hund rennt."}, {"en": "Two cats.", "de": "Zwei Katzen."}]


def cfg(path, **kw) -> DataConfig:
    return DataConfig(dataset=str(path), **kw)


def test_local_sample_loads_every_split(small_data):
    src, tgt = load_split(cfg(small_data), "train")
    assert len(src) == len(tgt) == 2002 and src[0].startswith("Two young, White males")
    # the recipe maps test_2016_flickr -> "test" (hub name); the local file uses our name
    assert len(load_split(cfg(small_data), "test_2016_flickr")[0]) == 100
    assert len(load_split(cfg(small_data), "dev")[0]) == 100


@pytest.mark.slow
def test_full_multi30k_copy_loads_every_split(multi30k):
    src, tgt = load_split(cfg(multi30k), "train")
    assert len(src) == len(tgt) == 29000 and src[0].startswith("Two young, White males")
    assert len(load_split(cfg(multi30k), "test_2016_flickr")[0]) == 1000
    assert len(load_split(cfg(multi30k), "dev")[0]) == 1014
    keep, stats = clean_text_pairs(src, tgt)
    assert stats.no_letters == 2 and stats.empty == 0 and len(keep) == 28998


def test_flipping_languages_gives_de_en(small_data):
    src, tgt = load_split(cfg(small_data, src_lang="de", tgt_lang="en"), "test_2016_flickr")
    assert src[0].startswith("Ein Mann") and tgt[0].startswith("A man")


@pytest.mark.parametrize("fmt", ["jsonl", "nested", "parquet", "csv", "tsv", "text"])
def test_each_input_format_loads(tmp_path, fmt):
    import datasets

    if fmt == "jsonl":
        (tmp_path / "train.jsonl").write_text("".join(json.dumps(p) + "\n" for p in PAIRS))
    elif fmt == "nested":
        (tmp_path / "train.jsonl").write_text(
            "".join(json.dumps({"translation": p}) + "\n" for p in PAIRS))
    elif fmt == "parquet":
        datasets.Dataset.from_list(PAIRS).to_parquet(str(tmp_path / "train.parquet"))
    elif fmt == "csv":
        datasets.Dataset.from_list(PAIRS).to_csv(str(tmp_path / "train.csv"), index=False)
    elif fmt == "tsv":
        (tmp_path / "train.tsv").write_text("en\tde\n" + "".join(f"{p['en']}\t{p['de']}\n" for p in PAIRS))
    else:
        (tmp_path / "train.en").write_text("".join(p["en"] + "\n" for p in PAIRS))
        (tmp_path / "train.de").write_text("".join(p["de"] + "\n" for p in PAIRS))
    assert load_split(cfg(tmp_path), "train") == ([p["en"] for p in PAIRS], [p["de"] for p in PAIRS])


def test_parallel_files_of_different_length_name_both_counts(tmp_path):
    (tmp_path / "train.en").write_text("a\nb\nc\n")
    (tmp_path / "train.de").write_text("x\ny\n")
    with pytest.raises(DataError, match=r"train\.en has 3 lines, .*train\.de has 2"):
        load_split(cfg(tmp_path), "train")


def test_invalid_utf8_names_file_and_line(tmp_path):
    (tmp_path / "train.en").write_bytes(b"fine\nbad \xff byte\n")
    (tmp_path / "train.de").write_text("gut\nschlecht\n")
    with pytest.raises(DataError, match=r"train\.en: line 2 is not valid UTF-8"):
        load_split(cfg(tmp_path), "train")
    (tmp_path / "dev.jsonl").write_bytes(b'{"en": "a", "de": "b"}\n{"en": "\xff", "de": "c"}\n')
    with pytest.raises(DataError, match=r"dev\.jsonl: line 2 is not valid UTF-8"):
        load_split(cfg(tmp_path), "dev")


def test_missing_folder_split_and_columns(tmp_path):
    with pytest.raises(DataError, match="data folder not found"):
        load_split(cfg(tmp_path / "nope"), "train")
    with pytest.raises(DataError, match="no file for split 'train'"):
        load_split(cfg(tmp_path), "train")
    (tmp_path / "train.jsonl").write_text(json.dumps({"english": "a", "german": "b"}) + "\n")
    with pytest.raises(DataError, match=r"need columns 'en' and 'de'.*english"):
        load_split(cfg(tmp_path), "train")


def test_hub_name_offline_says_how_to_use_a_local_copy():
    with pytest.raises(DataError, match=r"--data PATH.*TRANSLATE_DATA") as e:
        load_split(DataConfig(dataset="bentrevett/multi30k"), "train")
    assert "\n" not in str(e.value)


def test_the_library_reads_the_dataset_it_is_given_not_the_environment(small_data, monkeypatch):
    # TRANSLATE_DATA is the command line's to read (tests/test_cli.py)
    monkeypatch.setenv("TRANSLATE_DATA", str(small_data))
    with pytest.raises(DataError, match="bentrevett/multi30k"):
        load_split(DataConfig(), "test_2016_flickr")


def test_cleaning_drops_empty_and_letterless_pairs_by_rule(small_data):
    src, tgt = load_split(cfg(small_data), "train")
    keep, stats = clean_text_pairs(src, tgt)  # the sample holds Multi30k train's two "@@" lines
    assert stats.no_letters == 2 and stats.empty == 0 and len(keep) == 2000
    assert all(tgt[i] != "@@" for i in keep)
    keep, stats = clean_text_pairs(["a", "", "b", "  "], ["x", "y", "", "z"])
    assert keep == [0] and stats.empty == 3


def test_flatten_appends_eos_to_every_sentence():
    flat, lengths = flatten([[5, 6], [], [7]], np.dtype(np.uint16))
    assert flat.tolist() == [5, 6, EOS, EOS, 7, EOS] and lengths.tolist() == [3, 1, 2]
    assert flat.dtype == np.uint16


def test_a_line_without_end_is_refused_before_it_fills_memory(tmp_path):
    """/dev/zero, or a binary file, as a file of sentences: the first line is over the cap,
    named, after reading no more than the cap."""
    import io

    from translate.data.read import MAX_LINE_BYTES, iter_lines

    with open("/dev/zero", "rb") as zero:
        with pytest.raises(DataError, match=r"/dev/zero: line 1 is longer than 1,048,576 bytes"):
            next(iter_lines(zero, "/dev/zero"))
        assert zero.tell() <= MAX_LINE_BYTES + 1
    lines = io.BytesIO(b"short\n" + b"x" * MAX_LINE_BYTES + b"\nafter\n")
    with pytest.raises(DataError, match="news.en: line 2 is longer"):
        list(iter_lines(lines, "news.en"))
    exact = b"y" * (MAX_LINE_BYTES - 1) + b"\n"
    assert list(iter_lines(io.BytesIO(exact + b"z"), "f")) == ["y" * (MAX_LINE_BYTES - 1), "z"]
