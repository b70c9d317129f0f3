"""Inline markup kept through translation: tags around source words carried, by the word
alignment, to the output words they were translated into.

    "A <b>black</b> dog runs."  ->  translate "A black dog runs."  ->
    "Ein <b>schwarzer</b> Hund rennt."

Markup is XML-like: a pair `<name ...>` ... `</name>` around one or more words (nested pairs
allowed), or a placeholder `<name .../>` between words (one written against a word's end follows
that word); an attribute's quoted value may hold `>` (not `<`, as in XML), and every tag comes
back exactly as it was written. A `<` that starts no such tag is text. Words are what
`str.split()` separates in the text without its tags, as `translate.alignment` counts them.
Markup is refused (MarkupError, naming the tag and where it is) when a pair is unbalanced (a
closing tag without its opening, an opening left open), crosses another (`<b><i>x</b></i>`) or
encloses no word, and so is a line of more than MAX_TAGS tags. Tags are moved whole words at a
time: a tag inside a word marks all of it.

`strip` removes the markup and says which words each tag holds; `restore` puts it back into a
translation: a pair around every output word aligned to a word it held (the first to the last
such word), a placeholder before the first output word aligned to the word it preceded. A tag
whose words are aligned to no output word goes where the diagonal puts them (the same relative
position), so no tag is ever lost; a pair nested in another in the source stays inside it, and
pairs that would cross in the output are narrowed so that the output is well formed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Sequence

from translate.alignment import Link

MAX_TAGS = 1000  # a line's tags: restoring compares each pair with those placed before it
# after the name, attributes: runs of anything but space, quotes, < and >, or quoted values
# (which may hold > but not <, as in XML), a / among them unless it ends the tag; each
# character has one way to match, so a line that only starts a tag is read in linear time
ATTRIBUTES = r"""(?:\s+(?:"[^"<]*"|'[^'<]*'|[^\s<>"'/]|/(?!\s*>))+)*"""
TAG = re.compile(rf"<(/?)([A-Za-z][A-Za-z0-9_.:-]*)({ATTRIBUTES})\s*(/?)>")


class MarkupError(ValueError):
    """Markup that cannot be carried through: the message names the tag and where it is."""


@dataclass(frozen=True)
class Tag:
    """A tag pair (`close` set) around source words `first`..`last`, or a placeholder (`close`
    None) before source word `first` (`first` = the number of words: after the last)."""

    open: str
    close: str | None
    first: int
    last: int
    depth: int = 0  # pairs it is nested in


@dataclass(frozen=True)
class Marked:
    text: str  # the sentence without its markup, words separated by single spaces
    tags: tuple[Tag, ...]


def strip(sentence: str) -> Marked:
    """`sentence` without its markup, and its tags with the words each holds."""
    words: list[str] = []
    current = ""  # the word being read
    tags: list[Tag] = []
    opened: list[tuple[str, str, int, int]] = []  # name, text, first word, position in text
    placeholders: list[tuple[str, int]] = []
    position = 0
    for count, match in enumerate(TAG.finditer(sentence), 1):
        if count > MAX_TAGS:
            raise MarkupError(f"the line holds more than {MAX_TAGS} tags; split it")
        current = _add_text(sentence[position: match.start()], words, current)
        position = match.end()
        here = len(words)  # the word the tag touches: the current one, or the next
        closing, name, _, empty = match.group(1), match.group(2), match.group(3), match.group(4)
        if closing and empty:
            raise MarkupError(f"{match.group(0)} at character {match.start()} both closes and "
                              f"is empty")
        if empty:  # before the next word; at or inside a word's end, after that word
            placeholders.append((match.group(0), here + (1 if current else 0)))
        elif not closing:
            opened.append((name, match.group(0), here, match.start()))
        else:
            if not opened:
                raise MarkupError(f"{match.group(0)} at character {match.start()} closes no "
                                  f"tag")
            open_name, open_text, first, at = opened.pop()
            if open_name != name:
                raise MarkupError(f"{match.group(0)} at character {match.start()} closes "
                                  f"<{open_name}> (opened at character {at}): tags cross")
            last = len(words) - (0 if current else 1)  # the word just read, or the one before
            if last < first:
                raise MarkupError(f"<{name}> at character {at} encloses no word")
            tags.append(Tag(open_text, match.group(0), first, last, len(opened)))
    current = _add_text(sentence[position:], words, current)
    if current:
        words.append(current)
    if opened:
        name, text, _, at = opened[-1]
        raise MarkupError(f"{text} at character {at} is never closed (</{name}>)")
    tags += [Tag(text, None, min(first, len(words)), min(first, len(words)))
             for text, first in placeholders]
    return Marked(" ".join(words), tuple(tags))


def _add_text(text: str, words: list[str], current: str) -> str:
    """Split `text` into `words`, the word being read continued and returned, unfinished."""
    for part in re.split(r"(\s+)", text):
        if not part:
            continue
        if part.isspace():
            if current:
                words.append(current)
            current = ""
        else:
            current += part
    return current


def restore(marked: Marked, output: str, links: Sequence[Link]) -> str:
    """`output` (a translation of `marked.text`) with `marked`'s tags put back around the
    output words `links` (source word, output word) align to the words each tag held."""
    words = output.split()
    n_src, n_out = len(marked.text.split()), len(words)
    if not marked.tags:
        return output
    if not words:  # nothing to wrap: the tags, in the order of the words they held
        return "".join(t.open + (t.close or "")
                       for t in sorted(marked.tags, key=lambda t: (t.first, t.depth)))
    aligned: dict[int, list[int]] = {}
    for i, j in links:
        aligned.setdefault(i, []).append(j)
    before: dict[int, list[str]] = {}
    after: dict[int, list[str]] = {}
    spans: list[tuple[int, int, Tag]] = []
    for tag in sorted(marked.tags, key=lambda t: (t.depth, t.first)):
        if tag.close is None:
            continue
        targets = [j for i in range(tag.first, tag.last + 1) for j in aligned.get(i, [])]
        start, end = (min(targets), max(targets)) if targets else (
            _diagonal(tag.first, n_src, n_out), _diagonal(tag.last, n_src, n_out))
        start, end = _fit(start, end, tag, spans)
        spans.append((start, end, tag))
    for start, end, tag in spans:  # outer pairs first: their opening goes first, closing last
        before.setdefault(start, []).append(tag.open)
        after.setdefault(end, []).insert(0, tag.close)
    for tag in marked.tags:
        if tag.close is None:
            targets = aligned.get(tag.first, [])
            at = min(targets) if targets else (n_out if tag.first >= n_src else
                                               _diagonal(tag.first, n_src, n_out))
            before.setdefault(at, []).insert(0, tag.open)
    pieces = []
    for j, word in enumerate(words):
        pieces.append("".join(before.get(j, [])) + word + "".join(after.get(j, [])))
    return " ".join(pieces) + "".join(before.get(n_out, []))


def _diagonal(i: int, n_src: int, n_out: int) -> int:
    return min(n_out - 1, round(i * (n_out - 1) / max(n_src - 1, 1)))


def _fit(start: int, end: int, tag: Tag, placed: list[tuple[int, int, Tag]]) -> tuple[int, int]:
    """`start`..`end` made to nest with the pairs `placed` so far (outer ones first): inside the
    pair that holds `tag` in the source, and crossing no other."""
    for p_start, p_end, other in placed:
        holds = other.first <= tag.first and tag.last <= other.last and other.depth < tag.depth
        if holds:  # stay inside it
            start, end = max(start, p_start), min(end, p_end)
            if start > end:
                start, end = p_start, p_end
        elif start < p_start <= end < p_end or p_start < start <= p_end < end:  # crossing
            start, end = (start, p_start - 1) if start < p_start else (p_end + 1, end)
    return start, end
