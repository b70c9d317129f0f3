"""Process-level helpers: joining the processes of a run, the random states a checkpoint holds.
(Choosing the device: tests/test_hardware.py.)"""

import random

import pytest
import torch

from translate.training.distributed import join
from translate.utils import rng_state, set_rng_state


@pytest.mark.parametrize("local_rank", ["0", "1"])
def test_more_processes_a_node_than_gpus_is_refused_before_joining(one_gpu, monkeypatch,
                                                                   local_rank):
    """Every process of the node refuses, the one that has a GPU too: none waits to join."""
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_RANK", local_rank)
    monkeypatch.setattr(torch.cuda, "set_device", lambda i: pytest.fail("took a GPU"))
    with pytest.raises(ValueError, match=r"this node starts 2 processes, one a GPU, and has 1 "
                                         r"GPU\(s\): start at most 1 a node \(torchrun "
                                         r"--nproc-per-node 1\)"):
        join(torch.device("cuda"))
    assert not torch.distributed.is_initialized()


def test_the_random_state_of_a_cpu_run_holds_no_gpu_and_restores_the_same_draws():
    state = rng_state(torch.device("cpu"))
    assert set(state) == {"torch", "python"}  # a CPU run never opens CUDA
    first = torch.rand(3), random.random()
    torch.rand(5), random.random()
    set_rng_state(state, torch.device("cpu"))
    again = torch.rand(3), random.random()
    assert torch.equal(first[0], again[0]) and first[1] == again[1]


def test_a_gpu_random_state_is_left_alone_when_resuming_on_the_cpu(monkeypatch):
    state = {**rng_state(torch.device("cpu")), "cuda": [torch.zeros(16, dtype=torch.uint8)] * 8}
    monkeypatch.setattr(torch.cuda, "set_rng_state",
                        lambda *args: pytest.fail("set a CUDA state on a CPU resume"))
    set_rng_state(state, torch.device("cpu"))
