"""The C memory allocator `translate train` runs under: on a CPU with AMX, jemalloc (or
tcmalloc) where the system has one; glibc's otherwise.

A CPU training run allocates and frees tensors of ever-changing shapes thousands of times a
minute. On an Intel Xeon with AMX (bf16 training) glibc's heap fragments under that: a run's
memory grows several-fold and its steps slow as it goes on (a fresh process resumed from the
same checkpoint starts fast again); under jemalloc it holds a third of that and keeps its pace
after a slower start. The cause, found later (bf16 training on an AMD EPYC fragments alike):
oneDNN's kernel caches, refilled every step, which a training process now keeps empty, or,
training in bf16, fills once from batches of a few shapes (`translate.hardware`,
`translate.training.batches.keeps_kernels`; docs/results.md, "Memory"). On the AMD EPYC and the
Intel Xeon without AMX (fp32) glibc's steps kept their pace over whole hours, so `auto` leaves
them alone. An allocator can only be swapped as a process starts, so `translate train`
starts itself once more with the library in LD_PRELOAD before it imports anything else. Only
the standard library is imported here.

    TRANSLATE_ALLOCATOR=auto      the default: on a CPU with AMX, jemalloc, else tcmalloc,
                                  where the system has one; glibc's otherwise (nothing to
                                  install: the cause of the growth, oneDNN's kernel caches,
                                  is gone, translate.hardware.bound_kernel_caches)
    TRANSLATE_ALLOCATOR=jemalloc  (or tcmalloc) that one on any CPU, an error where it is missing
    TRANSLATE_ALLOCATOR=system    the C library's own, as any Python program
"""

from __future__ import annotations

import ctypes.util
import os
import sys
from pathlib import Path
from typing import Optional

SETTING = "TRANSLATE_ALLOCATOR"
CHOICES = ("auto", "system", "jemalloc", "tcmalloc")
# Each allocator by the library names the dynamic loader knows it under, first found first used.
LIBRARIES = {"jemalloc": ("jemalloc",), "tcmalloc": ("tcmalloc_minimal", "tcmalloc")}
INSTALL_HINT = "apt install libjemalloc2 (Debian/Ubuntu) or dnf install jemalloc (Fedora)"


def setting() -> str:
    """TRANSLATE_ALLOCATOR, checked: one of CHOICES (auto when unset or empty)."""
    value = os.environ.get(SETTING, "").strip().lower() or "auto"
    if value not in CHOICES:
        raise ValueError(f"{SETTING}={os.environ[SETTING]!r} is not an allocator: use auto "
                         f"(jemalloc or tcmalloc where the system has one), system (the C "
                         f"library's), jemalloc or tcmalloc")
    return value


def system_chosen() -> bool:
    """Whether TRANSLATE_ALLOCATOR asks for the C library's allocator (then no advice)."""
    return os.environ.get(SETTING, "").strip().lower() == "system"


def find(name: str) -> Optional[str]:
    """The library of allocator `name` (jemalloc, tcmalloc) as the dynamic loader names it
    (e.g. 'libjemalloc.so.2'); None where the system has none."""
    for library in LIBRARIES[name]:
        found = ctypes.util.find_library(library)
        if found:
            return found
    return None


def active() -> Optional[str]:
    """The allocator this process runs under in place of the C library's ('jemalloc',
    'tcmalloc'), read from the libraries it has mapped; None for the C library's own."""
    try:
        maps = Path("/proc/self/maps").read_text()
    except OSError:
        return None
    for name, libraries in LIBRARIES.items():
        if any(f"/lib{library}.so" in maps for library in libraries):
            return name
    return None


def command(argv: list[str]) -> Optional[str]:
    """The `translate` subcommand `argv` runs: its first word that is not an option (the group
    takes only flags, -v and --help)."""
    return next((word for word in argv[1:] if not word.startswith("-")), None)


def rerun_under_allocator(argv: list[str]) -> None:
    """For `translate train` on Linux: start the command again under the allocator
    TRANSLATE_ALLOCATOR chooses (`auto`: on a CPU with AMX only), unless it runs under one
    already (or under `system`); the
    process keeps its id, arguments and environment, with the library added to LD_PRELOAD.
    Any other command, or no library found for `auto`, returns and runs as it is."""
    if command(argv) != "train" or not sys.platform.startswith("linux"):
        return
    choice = setting()
    if choice == "system" or preloaded() or (choice == "auto" and not cpu_has_amx()):
        return
    names = ("jemalloc", "tcmalloc") if choice == "auto" else (choice,)
    library = next((lib for name in names if (lib := find(name))), None)
    if library is None:
        if choice == "auto":
            return
        raise ValueError(f"{SETTING}={choice}: the system has no {choice} library (for "
                         f"jemalloc: {INSTALL_HINT}); unset it to use what the system has")
    env = dict(os.environ)
    # jemalloc as it comes: told never to return freed pages (dirty_decay_ms:-1), a run grew
    # past 20 GB within 300 steps and was killed; a MALLOC_CONF of the user's own applies
    env["LD_PRELOAD"] = ":".join(p for p in (library, env.get("LD_PRELOAD", "")) if p)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable, "-m", "translate", *argv[1:]], env)


def cpu_has_amx() -> bool:
    """Whether the CPU has AMX tiles (as translate.hardware reads it, without torch)."""
    try:
        return "amx_bf16" in Path("/proc/cpuinfo").read_text()
    except OSError:
        return False


def preloaded() -> bool:
    """Whether LD_PRELOAD already names jemalloc or tcmalloc (then no second start: the loader
    either loaded it, or said why not)."""
    entries = os.environ.get("LD_PRELOAD", "").replace(":", " ").split()
    return any(Path(entry).name.startswith(f"lib{library}.so")
               for entry in entries for libraries in LIBRARIES.values() for library in libraries)
