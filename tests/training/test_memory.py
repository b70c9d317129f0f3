"""Training's memory in the open: each train record of metrics.jsonl and the progress line give
the process's resident memory, the run's summary its peak; a run's memory does not grow step
over step (a tiny model, a fresh process, a bounded slope over a few hundred steps); and a
training process keeps no oneDNN kernel per shape (translate.hardware.bound_kernel_caches)
unless it trains in bf16 on batches of a few shapes (translate.training.batches)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from helpers.files import read_jsonl
from helpers.training import RECIPES, TINY_OVERRIDES, train_tiny
from translate.training.progress import TrainingBar
from translate.config import TrainConfig
from translate.hardware import KERNEL_CACHES
from translate.metrics import LogWindow
from translate.training.batches import keeps_kernels, length_multiple

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/self/statm")
TESTS = Path(__file__).resolve().parents[1]

# A tiny run in a process of its own (the test process's heap holds other tests' leftovers);
# LEAK megabytes kept alive at every step, the check's broken-on-purpose twin.
RUN = """
import sys
from pathlib import Path
sys.path.insert(0, {tests!r})
import torch
from helpers.training import RECIPES, TINY_OVERRIDES, train_tiny
from translate.training import loop

kept = []
if {leak}:
    step = loop.Trainer.next_step
    def leaking(self, order):
        kept.append(torch.ones({leak} << 18))  # {leak} MiB of float32
        return step(self, order)
    loop.Trainer.next_step = leaking
train_tiny(RECIPES / "transformer.yaml", [*TINY_OVERRIDES, "train.precision=auto",
           "train.eval_every=0", "data.test_splits=[]"], Path({data!r}), {steps}, Path({run!r}))
"""


def growth_per_step(records: list[dict], after: int) -> float:
    """The least-squares slope of the resident memory (MiB) over the steps after `after`."""
    points = [(r["step"], r["rss_mb"]) for r in records
              if r["kind"] == "train" and r["step"] > after]
    n = len(points)
    mean_x, mean_y = sum(x for x, _ in points) / n, sum(y for _, y in points) / n
    return (sum((x - mean_x) * (y - mean_y) for x, y in points)
            / sum((x - mean_x) ** 2 for x, _ in points))


def run_alone(data: Path, run_dir: Path, steps: int, leak: int = 0) -> list[dict]:
    script = RUN.format(tests=str(TESTS), leak=leak, data=str(data), steps=steps, run=str(run_dir))
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return read_jsonl(run_dir / "metrics.jsonl")


def test_the_slope_is_the_least_squares_one():
    records = [{"kind": "train", "step": s, "rss_mb": 100 + 0.5 * s} for s in range(0, 300, 10)]
    records.append({"kind": "valid", "step": 300})
    assert growth_per_step(records, after=100) == pytest.approx(0.5)


GROWS = """
import torch
from translate.hardware import resident_memory
now, peak = resident_memory()
kept = torch.ones(16 << 20)  # 64 MiB written: resident
print(now, peak, resident_memory()[0])
"""


@linux_only
def test_resident_memory_now_and_at_the_peak():
    """In a fresh process (a test worker's heap may hold freed pages a new tensor reuses)."""
    done = subprocess.run([sys.executable, "-c", GROWS], capture_output=True, text=True,
                          check=True, timeout=300)
    now, peak, after = map(int, done.stdout.split())
    assert 10 * 2**20 < now <= peak  # a Python process with torch loaded: tens of MiB at least
    assert after > now + (60 << 20)


@linux_only
def test_every_train_record_and_the_progress_line_give_the_resident_memory(small_data, tmp_path,
                                                                           capsys):
    train_tiny(RECIPES / "transformer.yaml", [*TINY_OVERRIDES, "data.test_splits=[]"], small_data,
               20, tmp_path / "run")
    train = [r for r in read_jsonl(tmp_path / "run/metrics.jsonl") if r["kind"] == "train"]
    assert len(train) == 2
    assert all(50 < r["rss_mb"] <= r["peak_rss_mb"] < 64_000 for r in train)
    bar = TrainingBar(TrainConfig(max_steps=20), enabled=True, file=sys.stdout)
    window = LogWindow()
    window.losses, window.seconds = [2.0], 0.5
    bar.show_record(train[-1], window, epoch=1)
    bar.close()
    assert f"mem={train[-1]['rss_mb'] / 1024:.2f}G" in capsys.readouterr().out


@linux_only
def test_training_memory_does_not_grow_step_over_step(small_data, tmp_path):
    """300 steps of a tiny model at the default precision: after the first 100 (the heap and
    the allocator's caches settling) the resident memory grows by less than 0.1 MiB a step
    (30 MiB over the 200); the same run keeping 1 MiB alive at every step is caught."""
    steady = growth_per_step(run_alone(small_data, tmp_path / "steady", 300), after=100)
    assert steady < 0.1, f"{steady:.3f} MiB a step"
    leaking = growth_per_step(run_alone(small_data, tmp_path / "leaking", 100, leak=1), after=40)
    assert leaking > 0.8, f"{leaking:.3f} MiB a step"  # the check sees a leak of 1 MiB a step



CACHES = """
import os
import sys
from pathlib import Path
sys.path.insert(0, {tests!r})
from helpers.training import RECIPES, TINY_OVERRIDES, train_tiny
from translate.hardware import KERNEL_CACHES

train_tiny(RECIPES / "transformer.yaml", [*TINY_OVERRIDES, "data.test_splits=[]", *{extra!r}],
           Path({data!r}), 1, Path({run!r}))
print(*(os.environ.get(name) for name in KERNEL_CACHES))
"""


def kernel_caches_after_training(data: Path, run_dir: Path, env: dict,
                                 extra: tuple = ()) -> list[str]:
    """The kernel caches' sizes in the environment of a fresh process that trained a step
    (`extra`: more overrides)."""
    script = CACHES.format(tests=str(TESTS), data=str(data), run=str(run_dir), extra=list(extra))
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.split()


def test_a_training_process_keeps_no_kernels_and_a_users_sizes_are_kept(small_data, tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in KERNEL_CACHES}
    assert kernel_caches_after_training(small_data, tmp_path / "a", env) == ["1", "0"]
    env["LRU_CACHE_CAPACITY"] = "64"
    assert kernel_caches_after_training(small_data, tmp_path / "b", env) == ["64", "0"]


def test_bf16_training_on_a_few_shapes_keeps_its_kernels(small_data, tmp_path):
    """bf16 on a CPU: lengths rounded up to 8 by `auto`, the kernels kept in oneDNN's cache (not
    sized) and none in ideep's; with each batch padded to its longest (length_multiple 1), none
    kept."""
    env = {k: v for k, v in os.environ.items() if k not in KERNEL_CACHES}
    kept = kernel_caches_after_training(small_data, tmp_path / "a", env, ("train.precision=bf16",))
    assert kept == ["1", "None"]
    assert "lengths rounded up to 8 (train.length_multiple: auto)" in (
        tmp_path / "a/train.log").read_text()
    each = kernel_caches_after_training(small_data, tmp_path / "b", env,
                                        ("train.precision=bf16", "train.length_multiple=1"))
    assert each == ["1", "0"]


def test_length_multiple_auto_rounds_where_a_cpu_trains_in_bf16():
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    auto, one, four = TrainConfig(), TrainConfig(length_multiple=1), TrainConfig(length_multiple=4)
    assert auto.length_multiple == 0
    assert length_multiple(auto, cpu, "bf16") == 8
    assert length_multiple(auto, cpu, "fp32") == 1
    assert length_multiple(auto, cuda, "bf16") == 1
    assert length_multiple(one, cpu, "bf16") == 1 and length_multiple(four, cpu, "fp32") == 4
    assert keeps_kernels(cpu, "bf16", 8) and keeps_kernels(cpu, "bf16", 16)
    assert not keeps_kernels(cpu, "bf16", 4)  # dozens of shapes more: none kept
    assert not keeps_kernels(cpu, "fp32", 8) and not keeps_kernels(cuda, "bf16", 8)


# bf16 matmuls of 1,500 shapes, as a run's batches and a decoder's shrinking batches make them:
# the resident memory they leave behind (MiB), once a few shapes have been seen.
SHAPES = """
import torch
from translate.hardware import bound_kernel_caches, resident_memory

bound_kernel_caches()  # as training does, before the first matmul
weight = torch.randn(512, 256, dtype=torch.bfloat16)
x = torch.randn(1600, 256, dtype=torch.bfloat16)
for rows in range(1, 50):
    torch.nn.functional.linear(x[:rows], weight)
before = resident_memory()[0]
for rows in range(50, 1550):
    torch.nn.functional.linear(x[:rows], weight)
print((resident_memory()[0] - before) / 2**20)
"""


def left_behind(env: dict) -> float:
    done = subprocess.run([sys.executable, "-c", SHAPES], env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return float(done.stdout)


@linux_only
@pytest.mark.skipif(not torch.backends.mkldnn.is_available()
                    or not torch.ops.mkldnn._is_mkldnn_bf16_supported(),
                    reason="bf16 matmuls run on oneDNN only where the CPU has AVX512-BF16 or AMX")
def test_bf16_matmuls_of_many_shapes_leave_no_kernels_behind():
    """oneDNN keeps a kernel per shape in two caches, 1,024 each unless sized: with the sizes
    training sets, 1,500 shapes leave nothing resident behind; with 1,024, hundreds of MiB."""
    env = {k: v for k, v in os.environ.items() if k not in KERNEL_CACHES}
    bounded = left_behind(env)
    assert bounded < 15, f"{bounded:.1f} MiB left by 1,500 shapes"
    unbounded = left_behind({**env, **{name: "1024" for name in KERNEL_CACHES}})
    assert unbounded > bounded + 100, f"{unbounded:.1f} MiB unbounded, {bounded:.1f} bounded"
