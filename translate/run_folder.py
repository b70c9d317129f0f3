"""A run folder holds one run, written by one process at a time.

`run.json` names the run: a random id, when it started, and fingerprints of its recipe. Every
checkpoint the run writes carries the id, so `--resume` takes only the run's own checkpoints
(one copied in from another run is refused, by name). A fresh `translate train` into a folder
that already holds a run is refused unless told to overwrite it, so that no two runs mix their
logs and checkpoints. `recipe.yaml` is written once, when the run starts; a resumed run reads
its recipe from its checkpoint.
A recipe saved in a run folder (recipe.yaml, a checkpoint) names a local data folder relative to
the run (`config.data_relative_to`), and reads it back from there (`config.data_from`), so that
a run finds its data from any working directory.

`--overwrite` starts over only in a folder whose run.json names a run, and deletes only what
that run wrote (`owned_files`): its fixed files, the checkpoints that carry its id, the test
translations its recipe names. Anything else in the folder stays, and a new run is refused,
before anything is deleted, where it would write under a name that holds another run's
checkpoint or anything but a regular file (a link, a FIFO, a device): the new run's writes
would replace the one or go through the other (`check_names_free`).

While a run trains, it holds an exclusive lock on `RUN_DIR/.lock` (`fcntl.flock`): a second
`translate train` on the folder is refused with the holder's process id. The kernel drops the
lock when the holder exits or is killed, so a crashed run never leaves a stale lock behind. A
`.lock` that is a symbolic link or not a regular file is refused, never opened through.

Tests: tests/test_run_folder.py.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import socket
import stat
import time
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import yaml

from translate.checkpoint import CheckpointError, read_checkpoint, step_number
from translate.config import Recipe, data_relative_to
from translate.files import describe, read_regular
from translate.locate import RUN_FILE, RUN_PATTERNS
from translate.utils import atomic_write, first_line

LOCK_FILE = ".lock"
# A folder holding any of RUN_PATTERNS holds a run, and a new run there needs --overwrite.
# The files of these names are a run's own whatever they hold (checkpoints: when they carry the
# run's id; the test translations: those its recipe names).
OWN_NAMES = (RUN_FILE, "recipe.yaml", "metrics.jsonl", "train.log", "spm.model")
OWN_PATTERNS = ("spm.*.model", ".*.tmp*")
CHECKPOINT_NAMES = ("best.pt", "last.pt")  # and step_<N>.pt


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


def owned_files(run_dir: Path) -> list[Path]:
    """The files the run named by the folder's run.json wrote; a RunFolderError where no
    run.json names one (then nothing in the folder can be told to be a run's)."""
    own = run_id(run_dir)
    if own is None:
        raise RunFolderError(f"{run_dir} has no {RUN_FILE} naming the run its files belong to; "
                             f"--overwrite deletes only a run's own files: move the files away "
                             f"or give a new --run-dir")
    found = {run_dir / name for name in OWN_NAMES}
    found |= {p for pattern in OWN_PATTERNS for p in run_dir.glob(pattern)}
    found |= {p for p in checkpoint_paths(run_dir) if _carries_id(p, own)}
    found |= {run_dir / f"{split}.hyp.{lang}" for split, lang in _test_outputs(run_dir)}
    if (run_dir / "tensorboard").is_dir():
        found.add(run_dir / "tensorboard")
    return sorted(p for p in found if p.is_dir() or (p.is_file() and not p.is_symlink()))


def checkpoint_paths(run_dir: Path) -> list[Path]:
    """The names under which a run writes checkpoints that are taken in `run_dir` (by
    anything: a file, a link, a FIFO)."""
    steps = [p for p in run_dir.glob("step_*.pt") if step_number(p) >= 0]
    return [p for p in (*(run_dir / n for n in CHECKPOINT_NAMES), *steps) if os.path.lexists(p)]


def check_names_free(run_dir: Path, recipe: Recipe) -> None:
    """Refuse a new run where a name it writes holds something that is not a regular file (its
    writes would go through a link, or block on a FIFO) or another run's checkpoint (it would
    be replaced): `--overwrite` leaves those alone, so the run would meet them."""
    check_plain_files(run_dir, recipe)
    own = run_id(run_dir)
    for path in checkpoint_paths(run_dir):
        if path.is_symlink() or not path.is_file():
            raise RunFolderError(f"{path} is {describe(path)}, where the run writes its "
                                 f"checkpoints: move it away, or give another --run-dir")
        if own is None or not _carries_id(path, own):
            raise RunFolderError(f"{path} is not this folder's run's checkpoint (another run's, "
                                 f"or no run's), and a new run would write over it: move it "
                                 f"away, or give another --run-dir")


def check_plain_files(run_dir: Path, recipe: Recipe) -> None:
    """Refuse a run (new or resumed) where a file it reads or appends to (its log, its metrics,
    its test translations) is a link or not a regular file: a write would go through the link,
    a read of a FIFO would block."""
    tests = [f"{split}.hyp.{recipe.data.tgt_lang}" for split in recipe.data.test_splits]
    for name in (*OWN_NAMES, LOCK_FILE, *tests):
        path = run_dir / name
        if os.path.lexists(path) and (path.is_symlink() or not path.is_file()):
            raise RunFolderError(f"{path} is {describe(path)}; the run writes its own {name} "
                                 f"there: move it away, or give another --run-dir")


def _carries_id(path: Path, own: str) -> bool:
    """Whether the checkpoint at `path` says it is run `own`'s (its small pickled part read)."""
    if not path.is_file() or path.is_symlink():
        return False
    try:
        data = read_checkpoint(path, verify=False, check_name=False, follow=False)
        return data.get("run_id") == own
    except CheckpointError:
        return False


def _test_outputs(run_dir: Path) -> list[tuple[str, str]]:
    """(split, language) of the test translations the run's recipe.yaml names."""
    try:
        text = read_regular(run_dir / "recipe.yaml", what="recipe").decode("utf-8")
        data = yaml.safe_load(text)["data"]
        return [(str(split), str(data["tgt_lang"])) for split in data["test_splits"]]
    except (OSError, ValueError, yaml.YAMLError, KeyError, TypeError, RecursionError):
        return []


def start_run(recipe: Recipe, run_dir: Path, overwrite: bool = False) -> str:
    """Claim `run_dir` for a new run: refuse a folder that holds one (or with `overwrite`,
    remove that run's own files first), then write run.json and recipe.yaml. Returns the run
    id."""
    previous = run_files(run_dir)
    if previous and not overwrite:
        shown = ", ".join(p.name for p in previous[:4]) + (", ..." if len(previous) > 4 else "")
        raise RunFolderError(f"{run_dir} already holds a run ({shown}): give a new --run-dir, "
                             f"continue it with --resume {run_dir}, or start over in it with "
                             f"--overwrite (which deletes that run's files)")
    owned = owned_files(run_dir) if previous else []
    check_names_free(run_dir, recipe)  # before anything is deleted
    for path in owned:
        shutil.rmtree(path) if path.is_dir() else path.unlink()
    text = recipe_text(recipe, run_dir)
    with atomic_write(run_dir / "recipe.yaml", "w") as f:
        f.write(text)
    return write_run_id(run_dir, uuid.uuid4().hex, recipe)


def restate_recipe(run_dir: Path, recipe: Recipe, own: str) -> None:
    """Write `recipe` as the run's recipe.yaml, and run.json sealing it, for a new run whose
    recipe was settled after the folder was claimed (`train.size: auto`)."""
    with atomic_write(run_dir / "recipe.yaml", "w") as f:
        f.write(recipe_text(recipe, run_dir))
    write_run_id(run_dir, own, recipe)


def write_run_id(run_dir: Path, own: str, recipe: Recipe, adopted: bool = False) -> str:
    """Write run.json naming run `own` (with `adopted`, for a folder resumed with --adopt,
    which says so); returns `own`."""
    identity = {"run_id": own, "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                "recipe_sha256": hashlib.sha256(recipe_text(recipe, run_dir).encode()).hexdigest()}
    if adopted:
        identity = {"run_id": own, "adopted": identity["started"]}
    with atomic_write(run_dir / RUN_FILE, "w") as f:
        f.write(json.dumps(identity, indent=2) + "\n")
    return own


def run_id(run_dir: Path) -> str | None:
    """The id in the folder's run.json; None where there is none (a folder trained before
    run.json existed, or one whose run.json was deleted)."""
    path = run_dir / RUN_FILE
    if not os.path.lexists(path):
        return None
    try:
        identity = json.loads(read_regular(path, what="run.json"))
        value = identity["run_id"]
        if not (isinstance(value, str) and re.fullmatch(r"[0-9a-f]{32}", value)):
            raise ValueError(f"its run_id is {value!r}, not 32 hex digits")
        return value
    except (OSError, ValueError, KeyError, TypeError, RecursionError) as e:
        raise RunFolderError(f"{path} cannot be read ({first_line(e)}); it names the run its "
                             f"checkpoints belong to") from None


def check_own_checkpoint(path: Path, data: dict, own_id: str | None,
                         todo: str = "move it out of the folder to resume") -> None:
    """A checkpoint in a run folder must be that run's: refuse one that another run wrote."""
    theirs = data.get("run_id")
    if own_id is None or theirs == own_id:
        return
    where = f"run {theirs}" if theirs else "a run from before run ids"
    raise RunFolderError(f"{path} belongs to another run ({where}, not {own_id} of "
                         f"{path.parent / RUN_FILE}); {todo}")


@contextmanager
def locked(run_dir: Path) -> Iterator[None]:
    """Hold the run folder's lock while the block runs; refuse if another process holds it."""
    try:
        import fcntl
    except ImportError:  # not POSIX: no lock
        yield
        return
    path = run_dir / LOCK_FILE
    try:  # never through a link: a .lock pointing elsewhere would truncate that file
        fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o644)
    except OSError as e:
        if path.is_symlink():
            raise RunFolderError(f"{path} is a symbolic link; remove it (the run keeps its lock "
                                 f"in a file of its own)") from None
        raise RunFolderError(f"{path} cannot be opened as the run's lock file "
                             f"({e.strerror or e})") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise RunFolderError(f"{path} is not a regular file; remove it (the run keeps its "
                                 f"lock in a file of its own)")
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
