"""Gold alignments (translate.analysis.gold): AER as Och and Ney define it, the diagonal
baseline, gold files read in both formats, and the shipped gold set fits its sentences (hostile
gold files: tests/reliability/test_alignment_input.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers.files import read_jsonl
from translate.analysis.gold import Gold, alignment_error, diagonal_links, read_gold

GOLD = Path(__file__).resolve().parents[2] / "gold/multi30k"


def test_aer_precision_and_recall_are_och_and_neys():
    gold = [Gold(frozenset({(0, 0), (1, 1)}), frozenset({(0, 0), (1, 1), (1, 2)})),
            Gold(frozenset({(0, 0)}), frozenset({(0, 0)}))]
    perfect = alignment_error([[(0, 0), (1, 1)], [(0, 0)]], gold)
    assert (perfect.aer, perfect.precision, perfect.recall) == (0.0, 100.0, 100.0)
    # A = {00, 12, 21} + {00}: A&S = 2, A&P = 3, |A| = 4, |S| = 3
    scores = alignment_error([[(0, 0), (1, 2), (2, 1)], [(0, 0)]], gold)
    assert scores.aer == pytest.approx(100 * (1 - 5 / 7))
    assert scores.precision == pytest.approx(75.0) and scores.recall == pytest.approx(200 / 3)
    assert (scores.predicted, scores.sure) == (4, 3)
    with pytest.raises(ValueError, match="2 aligned sentences against 1 gold"):
        alignment_error([[], []], gold[:1])


def test_the_diagonal_baseline_links_each_output_word_to_the_same_relative_place():
    assert diagonal_links(3, 3) == [(0, 0), (1, 1), (2, 2)]
    assert diagonal_links(5, 3) == [(0, 0), (2, 1), (4, 2)]
    assert diagonal_links(2, 1) == [(0, 0)] and diagonal_links(0, 4) == []


def test_gold_files_read_in_both_formats_and_the_shipped_set_fits_its_sentences(tmp_path):
    (tmp_path / "g.pharaoh").write_text("0-0 1p2 1-1\n\n", encoding="utf-8")
    (tmp_path / "g.talp").write_text("1-1 2p3 2-2\n\n", encoding="utf-8")
    for name, fmt in (("g.pharaoh", "pharaoh"), ("g.talp", "talp")):
        first, empty = read_gold(tmp_path / name, fmt, [(2, 3), (1, 1)])
        assert first.sure == {(0, 0), (1, 1)} and first.possible == {(0, 0), (1, 1), (1, 2)}
        assert empty.sure == empty.possible == frozenset()
    for part, pairs in (("dev", 50), ("test", 100)):
        en = (GOLD / f"{part}.en").read_text(encoding="utf-8").splitlines()
        de = (GOLD / f"{part}.de").read_text(encoding="utf-8").splitlines()
        gold = read_gold(GOLD / f"{part}.links", "pharaoh",
                         [(len(e.split()), len(d.split())) for e, d in zip(en, de)])
        assert len(gold) == len(en) == len(de) == pairs
        # every pair has links, and most words a sure one
        assert all(g.sure for g in gold)
        words = sum(len(d.split()) for d in de)
        assert sum(len({j for _, j in g.sure}) for g in gold) > 0.85 * words


def test_the_gold_sets_sentences_are_the_dev_splits_rows_it_names(small_data):
    """The shipped pairs are Multi30k dev rows (`PART.rows`); the sample's validation split is
    its first 100 rows, so the dev part's first rows can be checked here."""
    rows = read_jsonl(small_data / "validation.jsonl")
    en = (GOLD / "dev.en").read_text(encoding="utf-8").splitlines()
    de = (GOLD / "dev.de").read_text(encoding="utf-8").splitlines()
    numbers = [int(n) for n in (GOLD / "dev.rows").read_text().split()]
    assert numbers == list(range(0, 300, 6))
    checked = [i for i, n in enumerate(numbers) if n < len(rows)]
    assert len(checked) >= 10
    for i in checked:
        assert (en[i], de[i]) == (rows[numbers[i]]["en"], rows[numbers[i]]["de"])
