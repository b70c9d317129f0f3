"""Word alignments from attention: pieces merged to words, links read from the strongest
attention (the gold files and AER: tests/analysis/test_gold.py); end to end, a model trained
on the toy reverse task aligns its words as the task says, and decoding returns valid links on
every surface, equal across engines."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from helpers.files import read_jsonl
from translate.alignment import (Reading, Words, align, output_words, pharaoh, text_words,
                                 word_count, word_index, word_links)
from translate.analysis.gold import Gold, alignment_error, diagonal_links
from translate.api import Translator
from translate.config import decode_options
from translate.inference import decode_sentences
from translate.ready import Ready
from translate.toy import toy_batch, train_toy
from translate.tokens import EOS, PAD

GOLD = Path(__file__).resolve().parents[1] / "gold/multi30k"


@pytest.mark.parametrize("pieces, index, count", [
    (["▁Ein", "▁Hund", "."], [0, 1, 1], 2),
    (["▁", "(", "▁a", ")"], [0, 0, 1, 1], 2),  # a space piece alone starts the next word
    (["▁", "▁Hund", "s"], [0, 0, 0], 1),  # two spaces make one gap
    (["Hu", "nd", "▁"], [0, 0, 1], 1),  # a trailing space begins no word
    ([], [], 0),
])
def test_pieces_merge_to_the_words_whitespace_makes(pieces, index, count):
    assert word_index(pieces) == index and word_count(pieces) == count


ODD = ["\x7f", "\u200b", "\ufeff", "\x1f", "\x85", "\xad"]  # dropped, spaces, or kept


@pytest.mark.parametrize("odd", ODD)
def test_source_pieces_belong_to_the_words_str_split_makes(tokenizer, odd):
    """Whatever SentencePiece's normalization makes of a character (drops it, makes it a space,
    keeps it), each piece belongs to the word of `str.split()` it was made of: a word's pieces
    are its own encoding's, and a word gets none only when its own encoding has none."""
    sp = tokenizer.src
    for line, plain in ((f"A dog{odd}s runs on grass.", ["runs", "on", "grass."]),
                        (f"A {odd} dog runs home.", ["A", "dog", "runs", "home."]),
                        (f"{odd}Two men sit on benches.", ["men", "sit", "on", "benches."]),
                        (f"A girl eats an apple{odd}", ["A", "girl", "eats", "an"]),
                        (f"A do{odd}g", ["A"])):
        ids = sp.encode(line)
        (words,) = text_words(sp, [line], [ids])
        split = line.split()
        assert words.count == len(split) and len(words.of_piece) == len(ids)
        assert words.linkable() == {k for k, word in enumerate(split) if sp.encode(word)}, line
        for word in plain:  # a word away from the odd character: exactly its own pieces
            k = split.index(word)
            assert [i for i, of in zip(ids, words.of_piece) if k in of] == sp.encode(word), \
                (line, word)


def test_the_gold_sets_pieces_make_its_words_as_their_marks_say(tokenizer):
    """On ordinary text, words by `str.split()` are the words SentencePiece's marks make."""
    for part in ("dev", "test"):
        for lang, sp in (("en", tokenizer.src), ("de", tokenizer.tgt)):
            lines = (GOLD / f"{part}.{lang}").read_text(encoding="utf-8").splitlines()
            ids = sp.encode(lines)
            for line, seq, words in zip(lines, ids, text_words(sp, lines, ids)):
                pieces = [sp.id_to_piece(i) for i in seq]
                assert words.count == word_count(pieces) == len(line.split())
                assert words.of_piece == tuple((w,) for w in word_index(pieces))
                cut = text_words(sp, [line], [seq[:3]])[0]  # a cut input: the words it reaches
                assert cut.of_piece == words.of_piece[:3]


def test_output_pieces_belong_to_the_words_of_the_translation_as_written():
    """A piece holding a character `str.split()` splits at adds to two words; one that adds
    nothing to the text (an unknown piece, dropped) or only a space goes with the next word."""
    pieces = ["▁A", "▁do\x85g", "<unk>", "s", "▁", "▁run"]

    def decode(seqs):
        return ["".join(pieces[i] for i in seq if pieces[i] != "<unk>").replace("▁", " ")[1:]
                for seq in seqs]

    (words,) = output_words(decode, [list(range(len(pieces)))])
    assert decode([range(len(pieces))])[0].split() == ["A", "do", "gs", "run"]
    assert words == Words(((0,), (1, 2), (2,), (2,), (3,), (3,)), 4)
    assert output_words(decode, [[4]]) == [Words(((),), 0)]  # a space alone: no word


def test_each_output_piece_links_to_the_word_it_attends_most_and_eos_leaves_it_unaligned():
    src = ["▁a", "▁big", "ger", "▁dog", "</s>"]  # 3 words, EOS last
    out = ["▁ein", "▁größ", "erer", "▁Hund"]  # 3 words
    w = torch.zeros(len(out) + 1, len(src))  # (T, S), T = output pieces + 1
    for row, col in enumerate([0, 2, 1, 4, 3]):  # "Hund" (row 3) looks at EOS
        w[row, col] = 1.0
    assert word_links(w, src, out, False, "output") == [(0, 0), (1, 1)]
    # shifted: piece t is read from row t + 1 ("Hund" from the last row, on "dog")
    assert word_links(w, src, out, True, "output") == [(1, 0), (1, 1), (2, 2)]
    with pytest.raises(ValueError, match=r"expected \(5, 5\)"):
        word_links(w[:-1], src, out, False, "output")


def test_each_source_word_links_to_the_output_word_whose_pieces_attend_to_it_most():
    src = ["▁a", "▁big", "ger", "▁dog", "</s>"]
    out = ["▁ein", "▁größ", "erer", "▁Hund"]
    w = torch.tensor([[0.7, 0.1, 0.0, 0.1, 0.1],  # ein
                      [0.1, 0.2, 0.6, 0.0, 0.1],  # größ: "ger", a piece of "bigger"
                      [0.0, 0.5, 0.1, 0.3, 0.1],  # erer
                      [0.1, 0.0, 0.1, 0.2, 0.6],  # Hund: mostly on EOS
                      [0.0, 0.0, 0.0, 0.0, 1.0]])  # EOS's row, never read unshifted
    # "a" -> ein (0.7); "bigger" -> größerer (0.6 through "ger"); "dog" -> the largest of its
    # column: erer's 0.3 (Hund gave it 0.2): each source word gets exactly one link
    assert word_links(w, src, out, False, "source") == [(0, 0), (1, 1), (2, 1)]
    assert word_links(torch.ones(1, 1), src[-1:], [], False, "source") == []  # nothing to link
    with pytest.raises(ValueError, match="each must be one of source, output, not 'both'"):
        Reading(each="both")


@pytest.fixture(scope="module")
def reverser():
    """The toy reverse task trained until 90% of its answer positions attend to the right
    source symbol (a few seconds)."""
    run = train_toy("reverse", steps=2000, check_every=50, until=0.9, seed=0)
    assert run.accuracy >= 0.9
    return run.model


def test_a_model_trained_to_reverse_aligns_each_word_to_its_mirror(reverser):
    """End to end: teacher-forced attention, read as links, against the task's own gold (each
    output word the mirror of a source word) and against the diagonal, which is wrong here."""
    batch = toy_batch("reverse", 64, torch.Generator().manual_seed(7))
    sources = [[t for t in row.tolist() if t != PAD] for row in batch.src]  # EOS last
    outputs = [[t for t in row.tolist() if t not in (PAD, EOS)] for row in batch.tgt_out]
    src_words = [Words(tuple((i,) for i in range(len(s) - 1)), len(s) - 1)  # a word a symbol
                 for s in sources]
    out_words = [Words(tuple((j,) for j in range(len(o))), len(o)) for o in outputs]
    mirror = [Gold(frozenset((len(o) - 1 - j, j) for j in range(len(o))),
                   frozenset((len(o) - 1 - j, j) for j in range(len(o)))) for o in outputs]
    for each in ("source", "output"):  # either way of reading finds the mirror
        links = align(reverser, sources, outputs, src_words, out_words,
                      Reading(-1, None, False, each))
        assert alignment_error(links, mirror).aer < 15, each
    diagonal = [diagonal_links(len(o), len(o)) for o in outputs]
    assert alignment_error(diagonal, mirror).aer > 80
    # shifted, each word is read where the model attends to the next one's source: wrong here
    shifted = align(reverser, sources, outputs, src_words, out_words, Reading(-1, None, True))
    assert alignment_error(shifted, mirror).aer > 50


@pytest.fixture(scope="module")
def test_sources(small_data) -> list[str]:
    return [row["en"] for row in read_jsonl(small_data / "test_2016_flickr.jsonl", 24)] + [""]


def valid(links, source: str, output: str) -> bool:
    n_src, n_out = len(source.split()), len(output.split())
    return all(0 <= i < n_src and 0 <= j < n_out for i, j in links) and links == sorted(set(links))


@pytest.mark.parametrize("beam, nbest", [(1, 1), (4, 3)])
def test_decoding_returns_valid_links_for_every_hypothesis_equal_across_engines(
        trained_run, test_sources, beam, nbest):
    loaded = {engine: Ready.load(trained_run.run_dir, "cpu", "fp32", engine)
              for engine in ("fast", "plain", "textbook")}
    cfg = decode_options(loaded["fast"].recipe.decode, beam=beam)
    found = {engine: decode_sentences(ready, test_sources, cfg, nbest=nbest,
                                      with_scores=beam > 1, alignments=Reading())
             for engine, ready in loaded.items()}
    for source, hyps in zip(test_sources, found["fast"]):
        assert len(hyps) == (nbest if source else 1)
        for h in hyps:
            assert valid(h.alignment, source, h.text), (source, h.text, h.alignment)
    assert sum(bool(h.alignment) for hyps in found["fast"] for h in hyps) > len(test_sources) // 2
    as_links = {engine: [[(h.text, h.alignment) for h in hyps] for hyps in out]
                for engine, out in found.items()}
    assert as_links["fast"] == as_links["plain"] == as_links["textbook"]
    # without the option nothing is computed
    plain = decode_sentences(loaded["fast"], test_sources[:3], cfg, nbest=nbest)
    assert all(h.alignment is None for hyps in plain for h in hyps)


def test_the_api_returns_alignments_and_the_rnn_aligns_from_its_attention(trained_rnn_run,
                                                                          test_sources):
    translator = Translator.load(trained_rnn_run.run_dir, device="cpu", precision="fp32")
    out = translator.translate(test_sources, beam=3, return_alignments=True)
    assert len(out) == len(test_sources) and out[-1].text == "" and out[-1].alignment == []
    for source, t in zip(test_sources, out):
        assert valid(t.alignment, source, t.text)
    assert sum(bool(t.alignment) for t in out) > len(test_sources) // 2
    one = translator.translate(test_sources[0], beam=3, return_alignments=True)
    assert (one.text, one.alignment) == (out[0].text, out[0].alignment)  # alone as in a batch
    assert pharaoh(out[0].alignment) == " ".join(f"{i}-{j}" for i, j in out[0].alignment)
    with pytest.raises(TypeError, match="return_alignments must be True or False, not str"):
        translator.translate("A dog.", return_alignments="yes")
