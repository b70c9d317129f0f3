"""How long a test waits for another process: a count of units of work, each as long as this
machine takes now to start the toolkit once, never fewer seconds than the test's floor.

A limit in seconds fails on a machine that is slow or busy (other jobs on the cores made these
tests run 7x slower); a limit in work grows with the machine's pace, and still catches a process
that hangs.
"""

from __future__ import annotations

import subprocess
import sys
import time

START = [sys.executable, "-c", "import translate.cli"]  # an interpreter, torch, the toolkit
FRESH_FOR = 60.0  # seconds a timing stands for the machine's pace

_timed: list[tuple[float, float]] = []  # (when, seconds) of the last timing


def start_seconds() -> float:
    """Wall seconds one start of the toolkit takes on this machine now (timed again when the
    last timing is over a minute old)."""
    start = time.monotonic()
    if not _timed or start - _timed[-1][0] > FRESH_FOR:
        subprocess.run(START, check=True, capture_output=True)
        end = time.monotonic()
        _timed.append((end, end - start))
    return _timed[-1][1]


def within(starts: float, floor: float) -> float:
    """Seconds for work as long as `starts` starts of the toolkit, and at least `floor`."""
    return max(floor, starts * start_seconds())
