"""Clean: the text rules a training pair passes before encoding, the length rules after.

Tests: tests/data/test_read.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np


@dataclass
class CleanStats:
    total: int = 0
    empty: int = 0
    no_letters: int = 0
    too_long: int = 0
    bad_ratio: int = 0

    @property
    def kept(self) -> int:
        return self.total - self.empty - self.no_letters - self.too_long - self.bad_ratio

    def add(self, other: "CleanStats") -> None:
        for name in ("total", "empty", "no_letters", "too_long", "bad_ratio"):
            setattr(self, name, getattr(self, name) + getattr(other, name))


def clean_text_pairs(src: Sequence[str], tgt: Sequence[str]) -> tuple[list[int], CleanStats]:
    """Indices of usable training pairs: both sides non-empty and holding a letter or digit.

    The letter rule drops pairs like Multi30k train's German lines that are just ``@@``.
    """
    stats = CleanStats(total=len(src))
    keep = []
    for i, (s, t) in enumerate(zip(src, tgt)):
        if not s.strip() or not t.strip():
            stats.empty += 1
        elif not any(c.isalnum() for c in s) or not any(c.isalnum() for c in t):
            stats.no_letters += 1
        else:
            keep.append(i)
    return keep, stats


@dataclass(frozen=True)
class LengthFilter:
    """The length rules for training pairs: at most `max_len` pieces a side, and a length ratio
    of at most `max_ratio` (pairs of up to 8 pieces pass the ratio rule). Applied to encoded
    pairs by `translate.data.encode.filter_lengths`, and by the batcher."""

    max_len: int
    max_ratio: float

    def too_long(self, src: np.ndarray, tgt: np.ndarray) -> np.ndarray:
        return (src > self.max_len) | (tgt > self.max_len)

    def bad_ratio(self, src: np.ndarray, tgt: np.ndarray) -> np.ndarray:
        """Pairs the ratio rule drops that the length rule does not already drop."""
        return ~self.too_long(src, tgt) & self._uneven(src, tgt)

    def keeps(self, src: np.ndarray, tgt: np.ndarray) -> np.ndarray:
        return ~(self.too_long(src, tgt) | self._uneven(src, tgt))

    def _uneven(self, src: np.ndarray, tgt: np.ndarray) -> np.ndarray:
        longer, shorter = np.maximum(src, tgt), np.minimum(src, tgt)
        return (longer > self.max_ratio * shorter) & (longer > 8)
