"""Small helpers: console logging, install hints, seeding and random states, stop signals, atomic
file writes. The device, the precision and what the machine offers are `translate.hardware`'s."""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import random
import signal
import sys
import threading
from pathlib import Path
from typing import IO, Iterator

import torch


def first_line(error: BaseException) -> str:
    """An exception's first message line (or its type name): for one-line user errors."""
    text = str(error)
    return text.splitlines()[0] if text.strip() else type(error).__name__


class ConsoleHandler(logging.Handler):
    """Log records as plain lines on stderr (warnings marked), written above any progress bar.

    stderr is looked up at each record, so a redirected or captured stream gets the lines.
    """

    def emit(self, record: logging.LogRecord) -> None:
        from tqdm import tqdm

        try:
            message = record.getMessage()
            if record.levelno >= logging.WARNING:
                message = f"{record.levelname.lower()}: {message}"
            elif record.levelno < logging.INFO:
                message = f"{record.name}: {message}"
            tqdm.write(message, file=sys.stderr)
            sys.stderr.flush()
        except Exception:
            self.handleError(record)


# each optional extra of setup.cfg and the packages it brings
EXTRAS = {"serve": "starlette uvicorn httpx", "export": "ctranslate2 transformers protobuf",
          "plots": "matplotlib", "tensorboard": "tensorboard"}


def install_hint(extra: str) -> str:
    """The command that installs an optional extra, wherever translate was installed from (the
    distribution is installed from a clone; it is not on PyPI)."""
    return f"pip install {EXTRAS[extra]} (in a clone: pip install -e '.[{extra}]')"


def log_to_console(verbose: bool = False) -> None:
    """What the package logs goes to stderr, one plain line a record (debug lines with
    `verbose`); other libraries' warnings keep Python's default, their chatter below it is
    dropped. Under torchrun the ranks after the first log warnings and errors only: rank 0
    reports what all of them do."""
    for noisy in ("datasets", "fsspec", "filelock", "urllib3", "huggingface_hub", "matplotlib",
                  "sacrebleu", "asyncio"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    logger = logging.getLogger("translate")
    for handler in [h for h in logger.handlers if isinstance(h, ConsoleHandler)]:
        logger.removeHandler(handler)
    logger.addHandler(ConsoleHandler())
    if os.environ.get("RANK", "0") not in ("", "0"):
        logger.setLevel(logging.WARNING)
    else:
        logger.setLevel(logging.DEBUG if verbose else logging.INFO)


def seed_everything(seed: int) -> None:
    random.seed(seed)
    torch.manual_seed(seed)


def rng_state(device: torch.device) -> dict:
    """The random generators' states (torch's CPU one, `device`'s on a GPU, Python's), as a
    checkpoint can hold them.

    Only the training device's CUDA generator is saved, so that a CPU run never opens CUDA and a
    run resumes on a machine with fewer GPUs. NumPy's generator is not saved: nothing in
    training draws from it.
    """
    state = {"torch": torch.get_rng_state(), "python": random.getstate()}
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def set_rng_state(state: dict, device: torch.device) -> None:
    """Restore what `rng_state()` returned; a CUDA state only when resuming on CUDA."""
    torch.set_rng_state(state["torch"])
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    if "cuda" not in state or device.type != "cuda":
        return
    cuda = state["cuda"]
    if isinstance(cuda, (list, tuple)):  # older checkpoints held every GPU's state, by index
        index = torch.cuda.current_device() if device.index is None else device.index
        if index >= len(cuda):
            return
        cuda = cuda[index]
    torch.cuda.set_rng_state(cuda, device)


@contextlib.contextmanager
def stop_signals(announce: bool = True):
    """Within the block, SIGINT and SIGTERM only append their number to the yielded list, so the
    loop can save a checkpoint and stop cleanly (saying so when `announce`); the old handlers
    come back afterwards."""
    received: list[int] = []
    if threading.current_thread() is not threading.main_thread():  # signals need the main thread
        yield received
        return

    def handler(signum, frame):
        received.append(signum)
        if announce:
            print(f"{signal.Signals(signum).name} received: saving a checkpoint after this step",
                  file=sys.stderr, flush=True)

    previous = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield received
    finally:
        for s, old in previous.items():
            signal.signal(s, old)


# What a write meets when the disk, the user's quota or the file-size limit (`ulimit -f`) is
# reached, or the file system is read-only: nothing the block does can go on.
NO_ROOM = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS})


class WriteError(OSError):
    """A file that could not be written for want of room (NO_ROOM), the old one kept: the
    message names the file, the reason (its `strerror`) and that nothing of it changed."""

    def __init__(self, number: int, reason: str, message: str):
        super().__init__(number, reason)
        self.message = message

    def __str__(self) -> str:
        return self.message


@contextlib.contextmanager
def atomic_write(path: str | Path, mode: str = "wb") -> Iterator[IO]:
    """A file that becomes `path` only whole: written beside it under a temporary name, then
    flushed, fsynced and renamed over it (the rename fsynced too) when the block ends without an
    error; removed when it does not. A crash, a full disk or an error half-way leaves the old
    `path`, if any, as it was; a full disk, a quota or a file-size limit met by the block's
    writes or the commit is a WriteError saying so. Text modes write UTF-8."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    existed = path.exists()
    try:
        with open(tmp, mode, encoding=None if "b" in mode else "utf-8") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        _fsync_folder(path.parent)  # makes the rename itself survive a power cut
    except OSError as e:
        if e.errno not in NO_ROOM or isinstance(e, WriteError):
            raise
        kept = f"{path} is unchanged" if existed else "nothing was written"
        raise WriteError(e.errno, e.strerror, f"could not write {path} ({e.strerror}); "
                                              f"{kept}") from None
    finally:
        if os.path.lexists(tmp):
            tmp.unlink()


def _fsync_folder(folder: Path) -> None:
    if hasattr(os, "O_DIRECTORY"):  # POSIX; elsewhere the rename is all there is
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
