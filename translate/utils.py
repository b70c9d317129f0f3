"""Small helpers: console logging, device choice, seeding and random states, autocast, atomic
file writes, the C library's allocator."""

from __future__ import annotations

import contextlib
import ctypes
import functools
import logging
import os
import platform
import random
import signal
import sys
import threading
from pathlib import Path
from typing import IO, Iterator, Optional

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


def pick_device(name: str | None = None, precision: str | None = None,
                option: str = "--device ") -> torch.device:
    """CUDA > MPS > CPU unless `name` says otherwise; the CPU for `precision` int8, which runs
    there only. Errors name the device as `option` does (`device=` from Python)."""
    if not name and precision == "int8":
        return torch.device("cpu")
    if name:
        try:
            device = torch.device(name)
        except (RuntimeError, TypeError, ValueError):
            device = None
        if device is None or device.type not in ("cpu", "cuda", "mps"):
            raise ValueError(f"{option}{name!r} is not a device: use cpu, cuda, cuda:N or "
                             f"mps") from None
        if device.type == "mps" and not torch.backends.mps.is_available():
            raise ValueError(f"{option}{name!r}: MPS is not available on this machine")
        if device.type == "cuda":
            if not torch.cuda.is_available():
                raise ValueError(f"{option}{name!r}: CUDA is not available on this machine")
            gpus = torch.cuda.device_count()
            if (device.index or 0) >= gpus:
                raise ValueError(f"{option}{name!r}: this machine has {gpus} CUDA device(s), "
                                 f"cuda:0 to cuda:{gpus - 1}")
            no_cudnn_attention()
        return device
    if torch.cuda.is_available():
        no_cudnn_attention()
        return torch.device("cuda")
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


def no_cudnn_attention() -> None:
    """Take cuDNN out of `scaled_dot_product_attention`'s backends on a GPU (FlashAttention,
    memory-efficient and math remain). For a masked attention in bf16/fp16 recent PyTorch tries
    cuDNN first, and cuDNN builds an execution plan for every new (batch, length) shape: length-
    bucketed batches and a growing decoder are new shapes nearly every step (bf16 training on an
    H100 ran at 0.07x of fp32 with it, about half a second a step; benchmarks/train_speed.py)."""
    torch.backends.cuda.enable_cudnn_sdp(False)


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


@functools.cache
def _cpuinfo(field: str) -> Optional[str]:
    """The first value of `field` in Linux's /proc/cpuinfo; None where there is none."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            return next((line.split(":", 1)[1].strip() for line in f if line.startswith(field)),
                        None)
    except OSError:
        return None


def cpu_flags() -> set[str]:
    """The CPU's feature flags; empty where they cannot be read."""
    return set((_cpuinfo("flags") or "").split())


def cpu_has_amx() -> bool:
    """Whether the CPU has AMX tiles, which make bf16 matmuls faster than fp32."""
    return "amx_bf16" in cpu_flags()


def cpu_has_bf16() -> bool:
    """Whether the CPU computes bf16 dot products natively (AMX or AVX512-BF16)."""
    return bool({"amx_bf16", "avx512_bf16"} & cpu_flags())


def cpu_vendor() -> str:
    """'GenuineIntel', 'AuthenticAMD', ...; '' where it cannot be read."""
    return _cpuinfo("vendor_id") or ""


def cpu_decodes_faster_in_bf16() -> bool:
    """Whether bf16 autocast decodes faster than fp32 here, as measured (benchmarks/decode.py):
    with AMX; with AVX512-BF16 on an AMD EPYC (Zen 4: 1.07-1.15x with the Transformer, 1.27-1.40x
    with the RNN); not with AVX512-BF16 on an Intel Xeon without AMX (0.74-0.81x: its bf16
    matmuls ran at half the fp32 rate)."""
    return cpu_has_amx() or (cpu_has_bf16() and cpu_vendor() == "AuthenticAMD")


def cpu_name() -> str:
    """The CPU's model name, for benchmark reports."""
    return _cpuinfo("model name") or platform.processor() or platform.machine()


# glibc's mallopt parameters (malloc.h)
M_TRIM_THRESHOLD, M_MMAP_MAX = -1, -4


def keep_freed_memory() -> bool:
    """Have glibc keep freed memory for the process to reuse; False where the C library is not
    glibc (nothing changed).

    glibc maps each allocation over its threshold (32 MB at most) fresh from the OS and unmaps
    it when freed, so each CPU training step pays for the pages of its (N, V) logits and their
    gradients anew: about 90k page faults a step, without which the Multi30k recipes train
    1.08x as fast. With this, every allocation comes from the heap and freed memory stays
    there; the peak grows by what fragments (0.2-0.55 GB there; docs/results.md).
    """
    if platform.libc_ver()[0] != "glibc":
        return False
    libc = ctypes.CDLL(None)
    return bool(libc.mallopt(M_MMAP_MAX, 0)) and bool(libc.mallopt(M_TRIM_THRESHOLD, 2**31 - 1))


def resolve_precision(precision: str, device: torch.device, decoding: bool = False) -> str:
    """'auto' -> bf16 on CUDA (fp16 if bf16 is unsupported) and on CPUs with AMX, else fp32;
    for `decoding`, bf16 wherever `cpu_decodes_faster_in_bf16` (dev BLEU within 0.15).

    On a CPU without AMX, bf16 training runs slower than fp32 (benchmarks/train_speed.py): its
    backward pass converts and reduces in ways the chip does not speed up. Decoding is forward
    matmuls only, and there it depends on the chip (see `cpu_decodes_faster_in_bf16`).
    """
    if precision == "auto":
        if device.type == "cuda":
            return "bf16" if torch.cuda.is_bf16_supported() else "fp16"
        if device.type != "cpu":
            return "fp32"
        return "bf16" if cpu_has_amx() or (decoding and cpu_decodes_faster_in_bf16()) else "fp32"
    if precision == "fp16" and device.type != "cuda":
        raise ValueError("precision fp16 needs a CUDA device; use bf16 or fp32")
    if precision == "int8" and device.type != "cpu":
        raise ValueError("precision int8 (dynamic quantization) runs on the CPU only; add "
                         "--device cpu (device='cpu' in Python), or use fp16/bf16")
    if precision not in ("fp32", "bf16", "fp16", "int8"):
        raise ValueError(f"precision '{precision}' is unknown; valid: auto, fp32, bf16, fp16, "
                         f"int8 (decoding on the CPU)")
    return precision


def autocast(device: torch.device, precision: str, cache: bool = True):
    """The autocast context for a resolved precision (a no-op for fp32); `cache`: keep the
    low-precision copies of weights made within the block (off while recording a CUDA graph)."""
    if precision == "fp32":
        return contextlib.nullcontext()
    dtype = torch.bfloat16 if precision == "bf16" else torch.float16
    return torch.autocast(device.type, dtype=dtype, cache_enabled=cache)


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


@contextlib.contextmanager
def atomic_write(path: str | Path, mode: str = "wb") -> Iterator[IO]:
    """A file that becomes `path` only whole: written beside it under a temporary name, then
    flushed, fsynced and renamed over it (the rename fsynced too) when the block ends without an
    error; removed when it does not. A crash, a full disk or an error half-way leaves the old
    `path`, if any, as it was. Text modes write UTF-8."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        with open(tmp, mode, encoding=None if "b" in mode else "utf-8") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        _fsync_folder(path.parent)  # makes the rename itself survive a power cut
    finally:
        if tmp.exists():
            tmp.unlink()


def _fsync_folder(folder: Path) -> None:
    if hasattr(os, "O_DIRECTORY"):  # POSIX; elsewhere the rename is all there is
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
