"""Rows, as reading yields them a chunk at a time, parsed into (source, target) texts.

Tests: tests/data/test_read.py, tests/reliability/test_fuzz_corpus.py.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Optional

from translate.data import DataError


@dataclass
class Chunk:
    """Consecutive rows of one split, as read: raw JSON Lines, or the two columns of text."""

    where: str  # the file or dataset, for messages
    first_row: int  # 1-based number of the chunk's first row (its line in a JSON Lines file)
    lines: Optional[list[bytes]] = None  # JSON Lines rows, not yet decoded
    src: Optional[list] = None
    tgt: Optional[list] = None


def parse_chunk(chunk: Chunk, src_lang: str, tgt_lang: str) -> tuple[list[str], list[str]]:
    """The (source, target) sentences of a chunk; a row that is not a pair of texts is an error
    naming its file and row."""
    if chunk.lines is None:
        rows = ((chunk.first_row + n, s, t) for n, (s, t) in enumerate(zip(chunk.src, chunk.tgt)))
    else:
        rows = ((chunk.first_row + n, *_json_pair(raw, f"{chunk.where}: line {chunk.first_row + n}",
                                                  src_lang, tgt_lang))
                for n, raw in enumerate(chunk.lines) if raw.strip())  # blank lines are skipped
    src, tgt = [], []
    for number, s, t in rows:
        if type(s) is not str or type(t) is not str:
            lang, value = (src_lang, s) if type(s) is not str else (tgt_lang, t)
            raise DataError(f"{chunk.where}: row {number}: '{lang}' holds "
                            f"{type(value).__name__} {str(value)[:40]!r}, not text")
        src.append(s)
        tgt.append(t)
    return src, tgt


def _json_pair(raw: bytes, where: str, src_lang: str, tgt_lang: str) -> tuple:
    try:
        row = json.loads(raw)
    except UnicodeDecodeError as e:
        raise DataError(f"{where} is not valid UTF-8 ({e.reason} at byte {e.start})") from None
    except ValueError as e:
        raise DataError(f"{where} is not valid JSON ({e})") from None
    if not isinstance(row, dict):
        raise DataError(f"{where} is not a JSON object")
    return pair_of(row, src_lang, tgt_lang, where)


def pair_of(row: dict, src_lang: str, tgt_lang: str, where: str) -> tuple:
    """A row's (source, target): flat columns, or nested under 'translation'."""
    if src_lang in row and tgt_lang in row:
        return row[src_lang], row[tgt_lang]
    nested = row.get("translation")
    if isinstance(nested, dict) and src_lang in nested and tgt_lang in nested:
        return nested[src_lang], nested[tgt_lang]
    raise DataError(f"{where}: need columns '{src_lang}' and '{tgt_lang}' (flat or under "
                    f"'translation'); found {sorted(row)}")
