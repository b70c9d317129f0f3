"""Data paths written relative to a folder (a run's, a saved recipe's) and read back from it.

Tests: tests/test_loading.py (a run's data path read relative to its folder),
tests/project/test_new_user.py.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any


def is_relative(dataset: Any) -> bool:
    """Whether `dataset` reads as a relative path (a hub name does too, but exists nowhere)."""
    return isinstance(dataset, str) and not (Path(dataset).is_absolute() or dataset.startswith("~"))


def readable(lexical: str, start: Path, target: Path) -> str:
    """`lexical`, the path from `start` to `target` as written (through any symlinks, so
    ../../shared/data stays that), when the file system takes it there too; else the path
    between their real locations (a `..` after a symlinked folder goes elsewhere)."""
    if os.path.realpath(os.path.join(os.path.abspath(start), lexical)) == \
            os.path.realpath(target):
        return lexical
    return os.path.relpath(target.resolve(), start.resolve())


def path_from(dataset: Any, folder: Path) -> Any:
    """A relative data path that exists from `folder`, as a path from the working directory;
    anything else (a hub name, an absolute path, a path that exists only from the working
    directory, as in recipes saved before data paths were stored relative) as it is."""
    if not is_relative(dataset):
        return dataset
    there = Path(folder) / dataset
    if not there.exists():
        return dataset
    return readable(os.path.relpath(os.path.abspath(there)), Path("."), there)
