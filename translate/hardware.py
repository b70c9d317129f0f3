"""The machine a model runs on: which device, which precision, and what the CPU offers.

    pick_device          a device name (--device, device=) checked, or the best available
    resolve_precision    a precision name resolved for a device: `auto` made a choice, and a
                         precision the device cannot run refused
    autocast             the autocast context a resolved precision runs under
    cpu_*                the CPU's features (AMX, AVX512-BF16, vendor), which `auto` reads
    benchmark_threads    the CPU threads a benchmark computes on: OMP_NUM_THREADS, else 2
    keep_freed_memory    glibc keeps freed memory for reuse (`train.keep_freed_memory`)
    bound_kernel_caches  oneDNN keeps no kernel per shape (a training process)
    keep_onednn_kernels  oneDNN keeps its own cache only (bf16 training on batches of few shapes)
    check_fits_in_memory the RAM guard: weights that could never fit refused before allocating
    resident_memory      this process's resident memory now and at its peak, for the logs

The precision names are the recipe's (translate.config.names): `train.precision`, the
`--precision` option and the error messages read them there. Decoding resolves them in
`translate.ready`, training in `translate.training.build`.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import platform
from typing import Optional

import torch

from translate.config.names import PRECISIONS


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
    if precision not in PRECISIONS:
        raise ValueError(f"precision '{precision}' is unknown; valid: {', '.join(PRECISIONS)} "
                         f"(decoding on the CPU)")
    return precision


def autocast(device: torch.device, precision: str, cache: bool = True):
    """The autocast context for a resolved precision (a no-op for fp32); `cache`: keep the
    low-precision copies of weights made within the block (off while recording a CUDA graph)."""
    if precision == "fp32":
        return contextlib.nullcontext()
    dtype = torch.bfloat16 if precision == "bf16" else torch.float16
    return torch.autocast(device.type, dtype=dtype, cache_enabled=cache)


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


def benchmark_threads(default: int = 2) -> int:
    """The CPU threads a benchmark computes on unless told (`--threads`): OMP_NUM_THREADS where
    it is a whole number of at least 1 (a shell's or a test worker's share of the cores),
    else `default`, the 2 cores its recorded figures were measured on."""
    value = os.environ.get("OMP_NUM_THREADS", "").strip()
    return int(value) if value.isdigit() and int(value) >= 1 else default


def keep_freed_memory() -> bool:
    """Have glibc keep freed memory for the process to reuse; False where the C library is not
    glibc (nothing changed).

    glibc maps each allocation over its threshold (32 MB at most) fresh from the OS and unmaps
    it when freed, so each CPU training step pays for the pages of its (N, V) logits and their
    gradients anew: tens of thousands of page faults a step, without which the Multi30k recipes
    train faster. With this, every allocation comes from the heap and freed memory stays there;
    the peak grows by what fragments (the figures: docs/results.md, `train.keep_freed_memory`).
    """
    if platform.libc_ver()[0] != "glibc":
        return False
    libc = ctypes.CDLL(None)
    return bool(libc.mallopt(M_MMAP_MAX, 0)) and bool(libc.mallopt(M_TRIM_THRESHOLD, 2**31 - 1))


# oneDNN's kernel caches, by the environment variables that size them (1,024 kernels each unset):
# PyTorch's ideep layer's, and oneDNN's own
KERNEL_CACHES = {"LRU_CACHE_CAPACITY": "1", "ONEDNN_PRIMITIVE_CACHE_CAPACITY": "0"}


def bound_kernel_caches() -> None:
    """Keep no oneDNN kernels between matmuls in this process (a size in the environment is
    kept); in effect only before its first bf16 matmul, when the caches read their sizes.

    oneDNN runs PyTorch's bf16 matmuls on a CPU with AVX512-BF16 or AMX, and keeps a kernel for
    each input shape it meets, about half a megabyte each. Training batches come in hundreds of
    shapes, a decoder's shrinking batches in more, so a bf16 run, or an fp32 run that validates
    in bf16, evicts and refills both caches every step, and glibc's heap fragments under the
    churn: 2.95 GB after 250 bf16 steps, growing, against 1.03 GB flat with nothing kept, at
    the same speed on an AMD EPYC (docs/journal/2026-12-07-memory-anywhere.md). On an Intel Xeon
    with AMX, building every kernel afresh left bf16 steps 0.6x as fast, so bf16 training keeps
    them, on batches of a few shapes (`training.batches.keeps_kernels`). Decoding keeps them: kept
    kernels decode a split at beam 5 1.09x as fast, a server's calls of 1 to 64 sentences 1.56x,
    and a decoder's memory levels off where the caches are full (1.4 GB, flat over 1,000 such
    calls, against 0.4 GB keeping none: benchmarks/decode_memory.py)."""
    for name, size in KERNEL_CACHES.items():
        os.environ.setdefault(name, size)


def keep_onednn_kernels() -> None:
    """Keep kernels in oneDNN's own cache (1,024) and none in PyTorch's ideep layer's (a size in
    the environment is kept): for a training process whose batches come in a few shapes
    (`training.batches.keeps_kernels`). oneDNN's cache alone gives the speed of both (bf16 on an
    Intel Xeon with AMX: 5,080 target tokens/s against 5,100-5,250 with both, 2,900 with
    none); ideep's added 0.3 GB at the end of a run, when the pick and the tests decode
    (docs/journal/2026-12-07-amx-shapes.md)."""
    os.environ.setdefault("LRU_CACHE_CAPACITY", KERNEL_CACHES["LRU_CACHE_CAPACITY"])


class ModelTooLarge(ValueError):
    """A model whose weights cannot be allocated."""


def physical_memory() -> int:
    """Bytes of RAM on this machine (0 where the platform does not say)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return 0


def resident_memory() -> tuple[Optional[int], Optional[int]]:
    """This process's resident memory in bytes: (now, the peak so far); None for what the
    platform does not say (now: Linux's /proc only; the peak: any POSIX system)."""
    now = peak = None
    try:
        with open("/proc/self/statm", encoding="ascii") as f:
            now = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        pass
    try:
        import resource
        # ru_maxrss: kilobytes on Linux, bytes on macOS
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        peak *= 1 if platform.system() == "Darwin" else 1024
    except (ImportError, OSError, ValueError):
        pass
    if now is not None and peak is not None:  # the kernel updates its high-water mark lazily
        peak = max(peak, now)
    return now, peak


def check_fits_in_memory(weight_bytes: int, what: str) -> None:
    """Refuse `what` ("the transformer model of this recipe has about 2.0G parameters") whose
    weights alone are more bytes than this machine's memory, before anything is allocated."""
    memory = physical_memory()
    if memory and weight_bytes > memory:
        raise ModelTooLarge(f"{what}, {weight_bytes / 2**30:.0f} GiB of weights; this machine "
                            f"has {memory / 2**30:.0f} GiB of memory: make it smaller")
