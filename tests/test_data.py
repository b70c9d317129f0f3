import json

import pytest
import torch

from translate.config import DataConfig, TokenizerConfig
from translate.data import (CleanStats, DataError, EncodedPairs, TokenArray, clean_text_pairs,
                            collate, encode_pairs, filter_lengths, load_split, token_batches)
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


def test_encoding_is_cached_and_batches_respect_the_budget(small_data, tmp_path):
    rows = read_jsonl(small_data / "train.jsonl", 500)
    en, de = [r["en"] for r in rows], [r["de"] for r in rows]
    tok = Tokenizer.train(en, de, TokenizerConfig(vocab_size=500))
    first = encode_pairs(tok, en, de, str(tmp_path))
    assert len(list((tmp_path / "encoded").iterdir())) == 1
    second = encode_pairs(tok, en, de, str(tmp_path))
    assert all((a == b).all() for a, b in zip(first.tgt, second.tgt))
    lengths = [max(len(s), len(t)) for s, t in zip(first.src, first.tgt)]
    batches = token_batches([len(s) for s in first.src], [len(t) for t in first.tgt], 400, True, 1)
    assert sorted(i for b in batches for i in b) == list(range(500))
    assert all(len(b) * max(lengths[i] for i in b) <= 400 for b in batches if len(b) > 1)
    b = collate([first.src[i] for i in batches[0]], [first.tgt[i] for i in batches[0]])
    assert (b.tgt_in[:, 0] == BOS).all()
    assert ((b.tgt_out == EOS).sum(1) == 1).all()
    assert b.num_tgt_tokens == int((b.tgt_out != PAD).sum())
    torch_in = b.tgt_in[:, 1:]
    assert ((torch_in == b.tgt_out[:, :-1]) | (b.tgt_out[:, :-1] == EOS)).all()


def test_token_array_holds_sentences_flat_and_selects_them():
    seqs = [[5, 6, 3], [3], [7, 8, 9, 10, 3], [11, 3]]
    array = TokenArray.from_lists(seqs)
    assert array.values.dtype == torch.int32 and array.values.numel() == 11 and array.is_whole()
    assert array.lengths.tolist() == [3, 1, 5, 2] and len(array) == 4
    assert [s.tolist() for s in array] == seqs
    picked = array.select(torch.tensor([3, 0, 2]))
    assert [s.tolist() for s in picked] == [seqs[3], seqs[0], seqs[2]] and picked.is_whole()
    assert len(array.select(torch.tensor([], dtype=torch.int64))) == 0
    assert not TokenArray(array.values, array.lengths).is_whole()  # lengths are not offsets


def test_length_filter_counts_and_keeps_as_the_rules_say():
    src = [[1] * 3, [1] * 120, [1] * 4, [1] * 30, [1] * 2, [1] * 9]
    tgt = [[1] * 3, [1] * 4, [1] * 101, [1] * 9, [1] * 7, [1] * 30]
    stats = CleanStats(total=6)
    kept = filter_lengths(EncodedPairs(TokenArray.from_lists(src), TokenArray.from_lists(tgt)),
                          100, 3.0, stats)
    # too long: pairs 1 and 2; ratio over 3 with more than 8 pieces: pair 3 (30 vs 9) and pair 5
    # (9 vs 30); pair 4 (2 vs 7) is short enough to keep
    assert (stats.too_long, stats.bad_ratio, stats.kept) == (2, 2, 2)
    assert kept.src.lengths.tolist() == [3, 2] and kept.tgt.lengths.tolist() == [3, 7]


def test_a_cache_entry_that_does_not_hold_together_is_rebuilt(small_data, tmp_path):
    rows = read_jsonl(small_data / "train.jsonl", 50)
    en, de = [r["en"] for r in rows], [r["de"] for r in rows]
    tok = Tokenizer.train(en, de, TokenizerConfig(vocab_size=200))
    first = encode_pairs(tok, en, de, str(tmp_path))
    (entry,) = (tmp_path / "encoded").iterdir()
    saved = torch.load(entry, weights_only=True)
    saved["src"] = (saved["src"][0], saved["src"][1].flip(0))  # offsets that fall
    torch.save(saved, entry)
    again = encode_pairs(tok, en, de, str(tmp_path))
    assert [s.tolist() for s in again.src] == [s.tolist() for s in first.src]


def test_encoding_in_chunks_equals_encoding_at_once():
    texts = [f"{'a ' * (i % 7)}b" for i in range(23)]

    def encode(batch):
        return [[len(w) + 3 for w in t.split()] + [EOS] for t in batch]

    whole = TokenArray.from_lists(encode(texts))
    for chunk in (1, 5, 23, 100):
        chunked = TokenArray.encode(encode, texts, chunk)
        assert torch.equal(chunked.values, whole.values) and torch.equal(chunked.offsets,
                                                                         whole.offsets)
    assert len(TokenArray.encode(encode, [], 5)) == 0
