"""The tests' data: the committed Multi30k sample (tests/data/multi30k, see its README.md),
the full copy outside the repository (for tests marked slow), and reading a .jsonl split."""

from __future__ import annotations

import json
import os
import resource
import signal
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
SAMPLE = TESTS / "data" / "multi30k"  # committed: see its README.md
MULTI30K = Path(os.environ.get("MULTI30K", TESTS.parents[1] / "shared/data/multi30k"))


def read_jsonl(path: Path, n: int | None = None) -> list[dict]:
    """The rows of a .jsonl file, the first `n` of them when `n` is given."""
    rows = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            rows.append(json.loads(line))
            if n is not None and len(rows) >= n:
                break
    return rows


def ignore_sigxfsz_and_limit_files(size: int):
    """For a child process: a write past `size` bytes fails with EFBIG, as on a full disk."""
    def limit():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (size, resource.RLIM_INFINITY))
    return limit
