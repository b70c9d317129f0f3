"""`train.keep_freed_memory`: glibc reuses freed memory instead of faulting big blocks in anew."""

import platform
import subprocess
import sys

import pytest

from helpers.training import TINY_OVERRIDES
from translate import hardware
from translate.config import load_recipe
from translate.metrics import MetricsLog
from translate.training import build, build_trainer, prepare_data

glibc_only = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's allocator")

# Page faults while a 64 MB tensor is made and freed 16 times (after 8 times uncounted, while
# the heap settles), before and after the call.
FAULTS = """
import resource, torch
from translate.hardware import keep_freed_memory

def faults():
    for _ in range(8):
        torch.ones(16 << 20).sum()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(16):
        torch.ones(16 << 20).sum()
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before

print(faults(), keep_freed_memory(), faults())
"""


@glibc_only
def test_big_blocks_are_faulted_in_once_not_at_every_allocation():
    out = subprocess.run([sys.executable, "-c", FAULTS], capture_output=True, text=True,
                         check=True).stdout.split()
    before, applied, after = int(out[0]), out[1], int(out[2])
    assert applied == "True"
    pages = (64 << 20) // 4096
    assert before >= 12 * pages  # each allocation mapped afresh and faulted in page by page
    # The heap's pages, faulted in once and reused by the allocations after: once more where a
    # small block lands behind the first big one (seen on a CI machine), never at every one.
    assert after <= 4 * pages


def test_other_c_libraries_are_left_alone(monkeypatch):
    monkeypatch.setattr(hardware.platform, "libc_ver", lambda: ("musl", "1.2"))
    assert hardware.keep_freed_memory() is False


@pytest.mark.parametrize("setting, calls", [("true", 1), ("false", 0)])
def test_a_cpu_trainer_keeps_freed_memory_unless_told_not_to(recipe_path, small_data, tmp_path,
                                                             monkeypatch, setting, calls):
    made = []
    monkeypatch.setattr(build, "keep_freed_memory", lambda: made.append(1) or True)
    recipe = load_recipe(recipe_path, [*TINY_OVERRIDES, f"data.dataset={small_data}",
                                       f"train.keep_freed_memory={setting}"])
    metrics = MetricsLog(tmp_path / "metrics.jsonl")
    build_trainer(recipe, tmp_path, prepare_data(recipe, tmp_path), metrics, device="cpu",
                  progress=False)
    metrics.close()
    assert len(made) == calls
