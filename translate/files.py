"""Files the toolkit finds for itself (in a run folder, a cache entry, an exported model) and
files the user names: opened only when they are what they should be, compared by identity.

A read never blocks and never leaves the folder it was meant for: `open_regular` opens without
following a final symbolic link (unless told to) and without waiting on a FIFO's writer, then
checks on the open descriptor that it is a regular file of the expected size. A FIFO, a device
such as /dev/zero, a socket or a link where an array or a checkpoint should be is refused by
name before a byte is read.

`read_trusted` reads a file the toolkit trusts only once it is checked: opened as above, its size
capped, and where a SHA-256 was recorded with it, that digest streamed from the file and matched
before its bytes are read into memory (an exported model's config, weights and SentencePiece
models).

`same_file` and `kind_of` serve the checks that keep a command from writing over what it reads:
two paths are the same file when their device and inode are (hard links and symbolic links
included), and standard input and output are files too (`translate decode -o x < x`).

Tests: tests/reliability/test_named_files.py, tests/reliability/test_export_input.py,
tests/test_locate.py.
"""

from __future__ import annotations

import errno
import hashlib
import os
import shutil
import stat
from pathlib import Path
from typing import BinaryIO, Callable, Optional

NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
NONBLOCK = getattr(os, "O_NONBLOCK", 0)
FICLONE = 0x40049409  # Linux's ioctl that clones a file's blocks copy-on-write


class UnsafeFileError(OSError):
    """A file that is not a regular file of the expected size, or a link where none may be;
    the message names the file and what it is."""

    def __str__(self) -> str:
        return self.strerror


def kind_of(mode: int) -> str:
    """What a file of stat mode `mode` is, in words ("a FIFO", "a character device", ...)."""
    kinds = ((stat.S_ISREG, "a regular file"), (stat.S_ISDIR, "a folder"),
             (stat.S_ISLNK, "a symbolic link"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
             (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
             (stat.S_ISSOCK, "a socket"))
    return next((words for test, words in kinds if test(mode)), "not a regular file")


def describe(path: str | Path) -> str:
    """What `path` is, without following a final link: "a symbolic link to X (a loop)", "a
    FIFO (named pipe)", "missing"..."""
    path = Path(path)
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return "missing"
    except OSError as e:
        return f"unreadable ({e.strerror})"
    if not stat.S_ISLNK(mode):
        return kind_of(mode)
    target = os.readlink(path)
    try:
        path.stat()
    except OSError as e:
        why = "a loop" if e.errno == errno.ELOOP else "which does not exist"
        return f"a symbolic link to {target} ({why})"
    return f"a symbolic link to {target}"


def open_regular(path: str | Path, size: int | None = None, follow: bool = False,
                 what: str = "file", at_most: int | None = None) -> BinaryIO:
    """`path` opened for reading in binary, once it is known to be a regular file (of `size`
    bytes, when given; of at most `at_most` bytes, when given). Without `follow`, a symbolic
    link is refused rather than opened through. An UnsafeFileError names the file, what it is,
    and that it is no `what` (a link to nothing included); a path with nothing at it raises
    FileNotFoundError."""
    path = Path(path)
    flags = os.O_RDONLY | NONBLOCK | getattr(os, "O_CLOEXEC", 0) | (0 if follow else NOFOLLOW)
    try:
        fd = os.open(path, flags)
    except OSError as e:
        dangling = e.errno == errno.ENOENT and path.is_symlink()  # followed to nothing
        link = e.errno in (errno.ELOOP, errno.EMLINK) or (not follow and path.is_symlink())
        if link or dangling or e.errno == errno.ENXIO:  # ENXIO: a socket, or a device without its driver
            note = "links are not followed here; " if link and not follow else ""
            raise UnsafeFileError(e.errno, f"{path} is {describe(path)}, not a {what}: {note}"
                                           f"put the {what} itself there") from None
        raise
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise UnsafeFileError(errno.EINVAL, f"{path} is {kind_of(info.st_mode)}, not a "
                                                f"{what}; put the {what} itself there")
        if size is not None and info.st_size != size:
            raise UnsafeFileError(errno.EINVAL, f"{path} holds {info.st_size} bytes, not the "
                                                f"{size} of its {what}")
        if at_most is not None and info.st_size > at_most:
            raise UnsafeFileError(errno.EFBIG, f"{path}: {info.st_size:,} bytes, over the limit "
                                               f"of {at_most:,} for a {what}; is it the file "
                                               f"that was written there?")
        if NONBLOCK:  # a regular file never blocks, but its readers need not know the flag
            os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_regular(path: str | Path, size: int | None = None, follow: bool = False,
                 what: str = "file") -> bytes:
    """The bytes of `path`, opened by `open_regular`."""
    with open_regular(path, size, follow, what) as f:
        return f.read()


def read_trusted(path: str | Path, what: str, at_most: int | None = None,
                 sha256: str | None = None, check: Optional[Callable[[BinaryIO], None]] = None
                 ) -> bytes:
    """The bytes of `path`, opened once by `open_regular` (no link followed, at most `at_most`
    bytes), after `check(f)` (which reads what it needs, say a header) and, with `sha256`, after
    the file's SHA-256, streamed from it, is that one: an UnsafeFileError names a file that is
    not, before its bytes are held in memory."""
    with open_regular(path, what=what, at_most=at_most) as f:
        if check is not None:
            check(f)
            f.seek(0)
        if sha256 is not None:
            if hashlib.file_digest(f, "sha256").hexdigest() != sha256:
                raise UnsafeFileError(errno.EINVAL, f"{path}: its SHA-256 is not the one "
                                                    f"recorded with it; the file was changed "
                                                    f"or damaged")
            f.seek(0)
        return f.read()


def sha256_of(path: str | Path) -> str:
    """The SHA-256 of the regular file at `path`, in hex."""
    with open_regular(path) as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def identity(path: str | Path | int) -> tuple[int, int] | None:
    """(device, inode) of a path (links followed) or an open descriptor; None if there is none."""
    try:
        info = os.fstat(path) if isinstance(path, int) else os.stat(path)
    except (OSError, ValueError):
        return None
    return info.st_dev, info.st_ino


def same_file(a: str | Path | int, b: str | Path | int) -> bool:
    """Whether two paths or descriptors are one file (under any names or links)."""
    first = identity(a)
    return first is not None and first == identity(b)


def copy_into(source: str | Path, sink: BinaryIO, what: str = "file") -> str:
    """Copy the regular file `source` into the open file `sink` and return how: "clone" where
    the file system shares blocks copy-on-write (Btrfs, XFS: no space taken, and a later write
    to either file leaves the other as it was), else "copy", byte for byte. Never a hard link,
    which a write in place to one name (`cp`, an editor, `torch.save`) would carry to the other."""
    with open_regular(source, what=what) as src:
        try:
            import fcntl

            fcntl.ioctl(sink.fileno(), FICLONE, src.fileno())
            return "clone"
        except (ImportError, OSError):
            shutil.copyfileobj(src, sink, 1 << 24)
            return "copy"


def output_clash(output: str | Path, named: dict[str, str | Path | int]) -> str | None:
    """What stands against writing `output`: the name (a key of `named`: what each path or
    descriptor is to the user, e.g. "the input file", "standard input") of the first of `named`
    it is the same file as, under any name; None when there is none. A path that does not exist
    yet clashes with nothing."""
    if identity(output) is None:
        return None
    return next((what for what, other in named.items() if same_file(output, other)), None)


def output_kind(output: str | Path) -> str | None:
    """None when `output` is missing or a regular file (through links); else what it is ("a
    FIFO (named pipe)", "a character device", "a folder", ...)."""
    try:
        mode = os.stat(output).st_mode
    except FileNotFoundError:
        return None
    except OSError as e:
        return describe(output) if e.errno == errno.ELOOP else f"unreadable ({e.strerror})"
    return None if stat.S_ISREG(mode) else kind_of(mode)
