"""Inline markup through translation: tags taken off the words they hold and put back around the
output words aligned to them, nested pairs kept nested, placeholders kept in place, nothing lost
when the alignment finds nothing; `translate decode --markup` end to end."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from translate.cli import main
from translate.markup import Tag, restore, strip


def test_strip_takes_the_tags_off_and_names_the_words_they_hold():
    marked = strip("A <b>black</b> dog <i>runs <u>fast</u></i>.<br/>")
    assert marked.text == "A black dog runs fast."
    assert set(marked.tags) == {Tag("<b>", "</b>", 1, 1), Tag("<i>", "</i>", 3, 4),
                                Tag("<u>", "</u>", 4, 4, depth=1),
                                Tag("<br/>", None, 5, 5)}  # after the last word
    # a tag inside a word marks the whole word; attributes are kept verbatim
    marked = strip('dog<b>s</b> and <a href="x.html">two cats</a>')
    assert marked.text == "dogs and two cats"
    assert set(marked.tags) == {Tag("<b>", "</b>", 0, 0), Tag('<a href="x.html">', "</a>", 2, 3)}
    # a "<" that starts no tag is text
    assert strip("a < b and 3<4").text == "a < b and 3<4" and not strip("a < b").tags


def test_restore_wraps_the_aligned_output_words():
    marked = strip("A <b>black</b> dog <i>runs <u>fast</u></i>.<br/>")
    links = [(0, 0), (1, 1), (2, 2), (3, 3), (4, 4)]
    assert restore(marked, "Ein schwarzer Hund rennt schnell.", links) == \
        "Ein <b>schwarzer</b> Hund <i>rennt <u>schnell.</u></i><br/>"
    # reordered: the pair follows its words wherever the output puts them
    marked = strip("He <b>has</b> seen <i>the dog</i>")
    assert restore(marked, "Er hat den Hund gesehen", [(0, 0), (1, 1), (2, 4), (3, 2), (4, 3)]) \
        == "Er <b>hat</b> <i>den Hund</i> gesehen"


def test_restore_keeps_nesting_and_never_lets_pairs_cross():
    marked = strip("<b>a <i>b</i> c</b> <u>d</u>")
    out = restore(marked, "w x y z", [(0, 1), (1, 3), (2, 2), (3, 0)])
    assert out == "<u>w</u> <b>x y <i>z</i></b>"
    # "b" aligned to nothing: the diagonal puts it inside its parent's words
    out = restore(marked, "w x y z", [(0, 1), (2, 2), (3, 0)])
    assert out == "<u>w</u> <b><i>x</i> y</b> z"
    # two sibling pairs whose aligned words overlap: the second narrowed, not crossing
    marked = strip("<b>a b</b> <i>c d</i>")
    out = restore(marked, "w x y", [(0, 0), (1, 1), (2, 1), (3, 2)])
    assert out == "<b>w x</b> <i>y</i>" and len(strip(out).tags) == 2


def test_unaligned_tags_land_on_the_diagonal_and_an_empty_output_keeps_them():
    marked = strip("a b <b>c</b> d")
    assert restore(marked, "w x y z", []) == "w x <b>y</b> z"
    assert restore(strip("a <x/>b <b>c</b>"), "", []) == "<x/><b></b>"
    assert restore(strip("no tags here"), "keine Tags", []) == "keine Tags"


@pytest.fixture
def source(tmp_path):
    path = tmp_path / "in.en"
    path.write_text("A <b>man</b> is playing a guitar.\n\nTwo <i>dogs</i> run on the "
                    "<b>beach</b>.<br/>\n", encoding="utf-8")
    return path


def test_decode_markup_carries_every_tag_and_changes_nothing_else(trained_run, source, tmp_path):
    out, plain_out, plain = tmp_path / "out.de", tmp_path / "plain.de", tmp_path / "plain.en"
    plain.write_text("".join(strip(line).text + "\n" for line in
                             source.read_text(encoding="utf-8").splitlines()), encoding="utf-8")
    for args in ((str(source), str(out), "--markup"), (str(plain), str(plain_out))):
        result = CliRunner().invoke(main, ["decode", str(trained_run.run_dir), "-i", args[0],
                                           "-o", args[1], "--device", "cpu", "--precision",
                                           "fp32", *args[2:]])
        assert result.exit_code == 0, result.output
    marked = out.read_text(encoding="utf-8").splitlines()
    assert [strip(line).text for line in marked] == \
        [" ".join(line.split()) for line in plain_out.read_text(encoding="utf-8").splitlines()]
    assert [sorted(t.open for t in strip(line).tags) for line in marked] == \
        [["<b>"], [], ["<b>", "<br/>", "<i>"]]
