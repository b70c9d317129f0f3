"""A run folder holds one run, written by one process at a time.

`run.json` names the run: a random id, when it started, and fingerprints of its recipe. Every
checkpoint the run writes carries the id, so `--resume` takes only the run's own checkpoints
(one copied in from another run is refused, by name). A fresh `translate train` into a folder
that already holds a run is refused unless told to overwrite it, so that no two runs mix their
logs and checkpoints. `recipe.yaml` is written once, when the run starts; a resumed run reads
its recipe from its checkpoint.

While a run trains, it holds an exclusive lock on `RUN_DIR/.lock` (`fcntl.flock`): a second
`translate train` on the folder is refused with the holder's process id. The kernel drops the
lock when the holder exits or is killed, so a crashed run never leaves a stale lock behind.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import time
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import yaml

from translate.config import Recipe, data_relative_to
from translate.utils import atomic_write

RUN_FILE = "run.json"
LOCK_FILE = ".lock"
# What `translate train` writes into a run folder (and `--overwrite` removes).
RUN_PATTERNS = (RUN_FILE, "recipe.yaml", "metrics.jsonl", "train.log", "spm.model", "spm.*.model",
                "*.pt", "*.hyp.*", ".*.tmp*")


class RunFolderError(ValueError):
    """A run folder that holds another run, is in use, or does not hold a run."""


def run_files(run_dir: Path) -> list[Path]:
    """The files (and TensorBoard folder) in `run_dir` that a training run writes."""
    found = {p for pattern in RUN_PATTERNS for p in run_dir.glob(pattern) if p.is_file()}
    if (run_dir / "tensorboard").is_dir():
        found.add(run_dir / "tensorboard")
    return sorted(found)


def recipe_text(recipe: Recipe, run_dir: Path) -> str:
    """The recipe as `recipe.yaml` holds it: YAML, a local data folder relative to the run."""
    recipe = data_relative_to(recipe, run_dir)
    return yaml.safe_dump(recipe.to_dict(), sort_keys=False, allow_unicode=True)


def start_run(recipe: Recipe, run_dir: Path, overwrite: bool = False) -> str:
    """Claim `run_dir` for a new run: refuse a folder that holds one (or with `overwrite`,
    remove that run's files first), then write run.json and recipe.yaml. Returns the run id."""
    previous = run_files(run_dir)
    if previous and not overwrite:
        shown = ", ".join(p.name for p in previous[:4]) + (", ..." if len(previous) > 4 else "")
        raise RunFolderError(f"{run_dir} already holds a run ({shown}): give a new --run-dir, "
                             f"continue it with --resume {run_dir}, or start over in it with "
                             f"--overwrite (which deletes those files)")
    for path in previous:
        shutil.rmtree(path) if path.is_dir() else path.unlink()
    text = recipe_text(recipe, run_dir)
    identity = {"run_id": uuid.uuid4().hex, "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                "recipe_sha256": hashlib.sha256(text.encode()).hexdigest()}
    for name, content in (("recipe.yaml", text), (RUN_FILE, json.dumps(identity, indent=2) + "\n")):
        with atomic_write(run_dir / name, "w") as f:
            f.write(content)
    return identity["run_id"]


def run_id(run_dir: Path) -> str | None:
    """The id in the folder's run.json; None for a folder trained before run.json existed."""
    path = run_dir / RUN_FILE
    if not path.exists():
        return None
    try:
        identity = json.loads(path.read_text(encoding="utf-8"))
        return str(identity["run_id"])
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise RunFolderError(f"{path} cannot be read ({type(e).__name__}); it names the run "
                             f"its checkpoints belong to") from None


def check_own_checkpoint(path: Path, data: dict, own_id: str | None) -> None:
    """A checkpoint in a run folder must be that run's: refuse one that another run wrote."""
    theirs = data.get("run_id")
    if own_id is None or theirs == own_id:
        return
    where = f"run {theirs}" if theirs else "a run from before run ids"
    raise RunFolderError(f"{path} belongs to another run ({where}, not {own_id} of "
                         f"{path.parent / RUN_FILE}); move it out of the folder to resume")


@contextmanager
def locked(run_dir: Path) -> Iterator[None]:
    """Hold the run folder's lock while the block runs; refuse if another process holds it."""
    try:
        import fcntl
    except ImportError:  # not POSIX: no lock
        yield
        return
    path = run_dir / LOCK_FILE
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 4096, 0).decode("utf-8", "replace").strip() or "another process"
            raise RunFolderError(f"{run_dir} is in use: {holder} is training in it; wait for "
                                 f"it to finish or stop it") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"process {os.getpid()} on {socket.gethostname()} since "
                      f"{time.strftime('%Y-%m-%d %H:%M:%S')}\n".encode(), 0)
        try:
            yield
        finally:
            os.ftruncate(fd, 0)  # no holder to name any more
    finally:
        os.close(fd)  # releases the lock
