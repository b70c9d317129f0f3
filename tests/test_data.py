import json

import numpy as np
import pytest

from translate.config import DataConfig, TokenizerConfig
from translate.data import (CleanStats, DataError, EncodedPairs, TokenArray, clean_text_pairs,
                            collate, encode_pairs, filter_lengths, load_split, pad, token_batches)
from translate.encoding import flatten
from translate.tokenizer import Tokenizer
from translate.tokens import BOS, EOS, PAD
from conftest import read_jsonl

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


def test_environment_variable_points_at_local_copy(small_data, monkeypatch):
    monkeypatch.setenv("TRANSLATE_DATA", str(small_data))
    assert len(load_split(DataConfig(), "test_2016_flickr")[0]) == 100


def test_cleaning_drops_empty_and_letterless_pairs_by_rule(small_data):
    src, tgt = load_split(cfg(small_data), "train")
    keep, stats = clean_text_pairs(src, tgt)  # the sample holds Multi30k train's two "@@" lines
    assert stats.no_letters == 2 and stats.empty == 0 and len(keep) == 2000
    assert all(tgt[i] != "@@" for i in keep)
    keep, stats = clean_text_pairs(["a", "", "b", "  "], ["x", "y", "", "z"])
    assert keep == [0] and stats.empty == 3


def greedy_batches(src: list[int], tgt: list[int], max_tokens: int) -> list[list[int]]:
    """The batching rule written plainly: sort by (target, source) length, then fill each batch
    while (sentences) x (longest side) stays within the budget."""
    batches, current, longest = [], [], 0
    for i in sorted(range(len(src)), key=lambda i: (tgt[i], src[i], i)):
        size = max(src[i], tgt[i])
        if current and max(longest, size) * (len(current) + 1) > max_tokens:
            batches.append(current)
            current, longest = [], 0
        current.append(i)
        longest = max(longest, size)
    return batches + ([current] if current else [])


def test_batches_follow_the_rule_and_cover_every_pair(small_data):
    rows = read_jsonl(small_data / "train.jsonl", 500)
    en, de = [r["en"] for r in rows], [r["de"] for r in rows]
    tok = Tokenizer.train(en, de, TokenizerConfig(vocab_size=500))
    pairs = encode_pairs(tok, en, de)
    src, tgt = pairs.src.lengths.tolist(), pairs.tgt.lengths.tolist()
    assert [list(b) for b in token_batches(src, tgt, 400, shuffle=False)] == \
        greedy_batches(src, tgt, 400)
    shuffled = token_batches(pairs.src.lengths, pairs.tgt.lengths, 400, True, 1)
    assert sorted(i for b in shuffled for i in b) == list(range(500))
    assert all(len(b) * max(max(src[i], tgt[i]) for i in b) <= 400 for b in shuffled if len(b) > 1)
    again = token_batches(pairs.src.lengths, pairs.tgt.lengths, 400, True, 1)
    other = token_batches(pairs.src.lengths, pairs.tgt.lengths, 400, True, 2)
    assert [b.tolist() for b in shuffled] == [b.tolist() for b in again]
    assert [b.tolist() for b in shuffled] != [b.tolist() for b in other]
    assert shuffled[2:4][1].tolist() == shuffled[3].tolist()  # slices: a step's batches
    b = collate([pairs.src[i] for i in shuffled[0]], [pairs.tgt[i] for i in shuffled[0]])
    assert (b.tgt_in[:, 0] == BOS).all()
    assert ((b.tgt_out == EOS).sum(1) == 1).all()
    assert b.num_tgt_tokens == int((b.tgt_out != PAD).sum())
    torch_in = b.tgt_in[:, 1:]
    assert ((torch_in == b.tgt_out[:, :-1]) | (b.tgt_out[:, :-1] == EOS)).all()


def test_a_sentence_over_the_budget_gets_a_batch_of_its_own():
    batches = token_batches([5, 50, 6], [5, 60, 6], 40, shuffle=False)
    assert [b.tolist() for b in batches] == [[0, 2], [1]]
    assert len(token_batches(np.zeros(0, np.int32), np.zeros(0, np.int32), 40, True)) == 0


def test_token_array_holds_sentences_flat():
    seqs = [[5, 6, 3], [3], [7, 8, 9, 10, 3], [11, 3]]
    array = TokenArray.from_lists(seqs)
    assert array.values.dtype == np.int32 and array.values.size == 11
    assert array.lengths.tolist() == [3, 1, 5, 2] and array.starts.tolist() == [0, 3, 4, 9]
    assert [s.tolist() for s in array] == seqs and len(array) == 4
    assert pad([array[2], array[1]]).tolist() == [[7, 8, 9, 10, 3], [3, PAD, PAD, PAD, PAD]]


def test_length_filter_counts_and_keeps_as_the_rules_say():
    src = [[1] * 3, [1] * 120, [1] * 4, [1] * 30, [1] * 2, [1] * 9]
    tgt = [[1] * 3, [1] * 4, [1] * 101, [1] * 9, [1] * 7, [1] * 30]
    stats = CleanStats(total=6)
    kept = filter_lengths(EncodedPairs(TokenArray.from_lists(src), TokenArray.from_lists(tgt)),
                          100, 3.0, stats)
    # too long: pairs 1 and 2; ratio over 3 with more than 8 pieces: pair 3 (30 vs 9) and pair 5
    # (9 vs 30); pair 4 (2 vs 7) is short enough to keep
    assert (stats.too_long, stats.bad_ratio, stats.kept) == (2, 2, 2) and len(kept) == 2
    assert kept.indices().tolist() == [0, 4]
    batches = token_batches(kept.src.lengths, kept.tgt.lengths, 1000, True, 1, kept.length_filter)
    assert sorted(i for b in batches for i in b) == [0, 4]  # batches draw from the kept pairs only


def test_flatten_appends_eos_to_every_sentence():
    flat, lengths = flatten([[5, 6], [], [7]], np.dtype(np.uint16))
    assert flat.tolist() == [5, 6, EOS, EOS, 7, EOS] and lengths.tolist() == [3, 1, 2]
    assert flat.dtype == np.uint16
