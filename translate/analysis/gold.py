"""Gold word alignments and the scores against them, for `translate align-score`.

    read_gold_lines    a gold file's lines, read as safely as any user file
    read_gold          a gold file's sure and possible links (Pharaoh or talp)
    alignment_error    AER, precision and recall of links against gold (Och and Ney, 2003)
    diagonal_links     the baseline that knows no words

Links are translate.alignment's `Link`: (source word, output word), both from 0.
Tests: tests/analysis/test_gold.py, tests/reliability/test_alignment_input.py.
"""

from __future__ import annotations

import io
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

from translate.alignment import Link
from translate.data.read import iter_lines
from translate.files import open_regular


@dataclass
class Gold:
    """One sentence pair's gold links: `sure` ones, and `possible` ones (sure included)."""

    sure: frozenset[Link]
    possible: frozenset[Link]


GOLD_FORMATS = ("pharaoh", "talp")
MAX_GOLD_BYTES = 64 << 20  # a gold file of a million pairs is a fraction of this
FROM_ONE_LINKS = 5  # links enough, none with a word 0, to say a pharaoh file counts from 1


def read_gold_lines(path: str | Path, what: str) -> list[str]:
    """The lines of a gold file `what` names ("gold sentence file"): a regular file, through a
    link if need be, of at most MAX_GOLD_BYTES, in UTF-8; anything else (a FIFO, a device, a
    byte that is not UTF-8) is refused naming the file (and the line), before it is read."""
    with open_regular(Path(path), follow=True, what=what) as f:
        size = os.fstat(f.fileno()).st_size
        data = f.read(MAX_GOLD_BYTES + 1) if size <= MAX_GOLD_BYTES else b""
    if size > MAX_GOLD_BYTES or len(data) > MAX_GOLD_BYTES:
        raise ValueError(f"{path} holds {max(size, len(data)):,} bytes, more than a {what} may "
                         f"({MAX_GOLD_BYTES:,}); is it the right file?")
    return list(iter_lines(io.BytesIO(data), str(path)))


def read_gold(path: str | Path, fmt: str = "pharaoh",
              words: Optional[Sequence[tuple[int, int]]] = None) -> list[Gold]:
    """A gold alignment file (`read_gold_lines`): one line per sentence pair, links `i-j`
    (sure) and `ipj` (possible), source word first; pharaoh counts from 0, talp from 1. A
    pharaoh file of FROM_ONE_LINKS links or more none of which names word 0 of a sentence
    counts from 1, and is refused. With `words` (the source and target word counts of each
    pair), the lines must match the pairs one for one and every index must fall inside its
    sentence; anything else is a ValueError naming the line."""
    if fmt not in GOLD_FORMATS:
        raise ValueError(f"gold format {fmt!r}: use one of {', '.join(GOLD_FORMATS)}")
    base = 1 if fmt == "talp" else 0
    lines = read_gold_lines(path, "gold alignment file")
    if words is not None and len(lines) != len(words):
        raise ValueError(f"{path}: {len(lines)} lines of links for {len(words)} sentence pairs")
    parsed = [[(item, *_parse_link(item, base, f"{path}:{number}")) for item in line.split()]
              for number, line in enumerate(lines, 1)]
    found = [link for links in parsed for _, link, _ in links]
    if fmt == "pharaoh" and len(found) >= FROM_ONE_LINKS and min(i for i, _ in found) > 0 \
            and min(j for _, j in found) > 0:
        raise ValueError(f"{path}: none of its {len(found)} links names a sentence's word 0: "
                         f"its indices look counted from 1; if so, pass --format talp")
    gold = []
    for number, links in enumerate(parsed, 1):
        sure, possible = set(), set()
        for item, link, is_sure in links:
            if words is not None:
                n_src, n_tgt = words[number - 1]
                if not (link[0] < n_src and link[1] < n_tgt):
                    raise ValueError(f"{path}:{number}: link {item} is outside the pair's "
                                     f"{n_src} source and {n_tgt} target words (indices from "
                                     f"{base} to {n_src - 1 + base} and {n_tgt - 1 + base})")
            (sure if is_sure else possible).add(link)
        gold.append(Gold(frozenset(sure), frozenset(sure | possible)))
    return gold


def _parse_link(item: str, base: int, where: str) -> tuple[Link, bool]:
    """`i-j` (sure) or `ipj` (possible) as a 0-based link and whether it is sure."""
    for mark, sure in (("-", True), ("p", False)):
        left, found, right = item.partition(mark)
        if found and left.isdigit() and right.isdigit() and left.isascii() and right.isascii():
            i, j = int(left) - base, int(right) - base
            if i < 0 or j < 0:
                raise ValueError(f"{where}: link {item} counts from {base}")
            return (i, j), sure
    raise ValueError(f"{where}: {item!r} is not a link (i-j for sure, ipj for possible)")


@dataclass(frozen=True)
class AlignmentScores:
    """AER (lower is better), precision against the possible links and recall of the sure
    ones, in percent, and how many links were predicted and how many are sure."""

    aer: float
    precision: float
    recall: float
    predicted: int
    sure: int


def alignment_error(links: Sequence[Sequence[Link]], gold: Sequence[Gold]) -> AlignmentScores:
    """AER = 1 - (|A & S| + |A & P|) / (|A| + |S|) over every sentence pair (A predicted, S
    sure, P possible with the sure links in it), with precision |A & P| / |A| and recall
    |A & S| / |S|."""
    if len(links) != len(gold):
        raise ValueError(f"{len(links)} aligned sentences against {len(gold)} gold ones")
    a = s = a_s = a_p = 0
    for predicted, g in zip(links, gold):
        predicted = set(predicted)
        a, s = a + len(predicted), s + len(g.sure)
        a_s, a_p = a_s + len(predicted & g.sure), a_p + len(predicted & g.possible)
    aer = 1 - (a_s + a_p) / (a + s) if a + s else 0.0
    return AlignmentScores(100 * aer, 100 * a_p / a if a else 0.0, 100 * a_s / s if s else 0.0,
                           a, s)


def diagonal_links(n_src: int, n_out: int) -> list[Link]:
    """The baseline that knows no words: output word j linked to the source word at the same
    relative position."""
    if not n_src or not n_out:
        return []
    return [(round(j * (n_src - 1) / max(n_out - 1, 1)), j) for j in range(n_out)]
