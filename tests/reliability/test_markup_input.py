"""Markup against hostile input: unbalanced, crossing and empty pairs are refused naming the tag
and where it stands; what only looks like a tag is text and comes back as text; deep nesting and
a line of too many tags is refused; a quoted attribute value may hold `>` and comes back as it
was written; a line that only starts a tag is read in linear time; `translate decode --markup`
refuses a bad line by number and writes nothing."""

from __future__ import annotations

import time

import pytest
from click.testing import CliRunner

from translate.cli import main
from translate.markup import MarkupError, restore, strip


@pytest.mark.parametrize("line, message", [
    ("a </b> b", "</b> at character 2 closes no tag"),
    ("<b>a b", "<b> at character 0 is never closed (</b>)"),
    ("<b>a <i>b</b> c</i>", "</b> at character 9 closes <i> (opened at character 5): tags cross"),
    ("<b></b> a", "<b> at character 0 encloses no word"),
    ("a <b>  </b>", "<b> at character 2 encloses no word"),
    ("<b>a</b></b>", "</b> at character 8 closes no tag"),
    ("< b>x</b >", "</b > at character 5 closes no tag"),  # "< b>" is text, "</b >" a tag
])
def test_broken_markup_is_refused_by_tag_and_place(line, message):
    with pytest.raises(MarkupError, match=message.replace("(", r"\(").replace(")", r"\)")):
        strip(line)


@pytest.mark.parametrize("line", ["a < b", "<>", "<1>a</1>", "x<-y", "&lt;b&gt;", "<b", "b>",
                                  "a <!-- b --> c", "<b/ >a", "3 <2 and 4> 1"])
def test_what_only_looks_like_a_tag_is_text_and_comes_back_as_text(line):
    marked = strip(line)
    assert marked.text == line and not marked.tags
    assert restore(marked, "w x", [(0, 0)]) == "w x"


def test_deep_nesting_is_read_without_recursion_and_too_many_tags_are_refused():
    deep = "<b>" * 500 + "word" + "</b>" * 500  # 1,000 tags: the most a line may hold
    marked = strip(deep)
    assert marked.text == "word" and len(marked.tags) == 500
    assert restore(marked, "Wort", [(0, 0)]) == "<b>" * 500 + "Wort" + "</b>" * 500
    siblings = " ".join(f"<b>w{i}</b>" for i in range(250))
    marked = strip(siblings)
    assert len(marked.tags) == 250
    assert restore(marked, marked.text, [(i, i) for i in range(250)]) == siblings
    with pytest.raises(MarkupError, match="the line holds more than 1000 tags; split it"):
        strip(" ".join(f"<b>w{i}</b>" for i in range(20_000)))  # 40,000 tags


def test_decode_refuses_a_line_of_broken_markup_by_number_and_writes_nothing(trained_run,
                                                                             tmp_path):
    source, out = tmp_path / "in.en", tmp_path / "out.de"
    source.write_text("A <b>dog</b>.\nA cat </i> sleeps.\n", encoding="utf-8")
    result = CliRunner().invoke(main, ["decode", str(trained_run.run_dir), "-i", str(source),
                                       "-o", str(out), "--markup", "--device", "cpu"])
    assert result.exit_code == 1
    assert result.output == (f"Error: {source}, line 2: </i> at character 6 closes no tag\n")
    assert not out.exists()


@pytest.mark.parametrize("line, opens", [
    ('A <a title="x>y">dog</a> runs.', ['<a title="x>y">']),
    ("<i data-x='1 > 0' lang=en>two cats</i> sleep<br class=\"a>b\"/>",
     ["<i data-x='1 > 0' lang=en>", '<br class="a>b"/>']),
    ('<a href="x/">a b</a><img src="p.png" alt=">"/>',
     ['<a href="x/">', '<img src="p.png" alt=">"/>']),
])
def test_a_quoted_attribute_value_may_hold_a_greater_than_sign_and_round_trips(line, opens):
    marked = strip(line)
    assert sorted(t.open for t in marked.tags) == sorted(opens)
    assert ">" not in marked.text.replace("> 0", "")  # no piece of a tag left in the text
    n = len(marked.text.split())
    assert restore(marked, marked.text, [(i, i) for i in range(n)]) == line


def test_a_less_than_sign_in_a_quoted_value_or_an_unclosed_quote_makes_no_tag():
    """As in XML, a value may not hold `<`; a quote never closed is text, not a tag that
    swallows the line."""
    assert not strip('<a title="x<y">dog').tags
    with pytest.raises(MarkupError, match="</a> at character 15 closes no tag"):
        strip('<a title="x>dog</a> runs')


def test_a_line_that_only_starts_a_tag_is_read_in_linear_time():
    """`<a` and a long run of spaces (or attributes) with no `>`: text, read at once (the old
    pattern took cubic time, minutes for a few thousand spaces)."""
    for line in ("<a" + " " * 3000, "<a" + " x" * 100_000, "<a " + "/ " * 100_000):
        start = time.perf_counter()
        assert strip(line).tags == ()
        assert time.perf_counter() - start < 2, line[:10]
