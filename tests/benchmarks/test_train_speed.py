"""The training-speed benchmark measures what it says: every system takes real steps on the same
batches (the peer in bf16 autocast too), and the matmul peak behind its MFU is a positive rate."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

_spec = importlib.util.spec_from_file_location(
    "train_speed", Path(__file__).resolve().parents[2] / "benchmarks" / "train_speed.py")
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)


def test_each_system_trains_on_the_same_batches(small_data):
    pytest.importorskip("transformers")
    tok, batches = bench.make_batches(str(small_data), 600, 3)
    # the tiny shape: the multi30k one's bf16 steps take seconds where a CPU lacks bf16 kernels
    systems = bench.build_systems(tok.tgt_vocab_size, ["fp32", "bf16"], shape="tiny")
    assert list(systems) == ["ours fp32 fast", "ours fp32 plain", "ours bf16 fast",
                             "ours bf16 plain", "hf marian fp32", "hf marian bf16"]
    for name, system in systems.items():
        before = [p.detach().clone() for p in system.model.parameters()][:4]
        system.step(batches[0])
        after = list(system.model.parameters())[:4]
        assert any(not torch.equal(a, b) for a, b in zip(after, before)), name  # it learned
        assert all(torch.isfinite(p).all() for p in system.model.parameters()), name
    assert abs(systems["ours fp32 fast"].params - systems["hf marian fp32"].params) / \
        systems["hf marian fp32"].params < 0.1  # peers of the same size


def test_the_matmul_peak_is_a_rate():
    assert 0 < bench.matmul_peak(torch.float32, reps=2) < 1e6  # GFLOP/s
