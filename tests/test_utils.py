"""Process-level helpers: choosing the device, and what choosing a GPU sets up."""

import random

import pytest
import torch

from translate.training.distributed import join
from translate.utils import pick_device, rng_state, set_rng_state


@pytest.fixture
def cudnn_attention_restored():
    before = torch.backends.cuda.cudnn_sdp_enabled()
    yield
    torch.backends.cuda.enable_cudnn_sdp(before)


@pytest.fixture
def one_gpu(monkeypatch):
    """A machine that shows one CUDA device (nothing here runs on it)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)


@pytest.mark.parametrize("name", ["cuda", "cuda:0", None])
def test_choosing_a_gpu_takes_cudnn_out_of_attention(one_gpu, cudnn_attention_restored, name):
    torch.backends.cuda.enable_cudnn_sdp(True)
    assert pick_device(name).type == "cuda"
    assert not torch.backends.cuda.cudnn_sdp_enabled()  # a plan per shape: see no_cudnn_attention


def test_the_cpu_leaves_attention_backends_alone(cudnn_attention_restored):
    torch.backends.cuda.enable_cudnn_sdp(True)
    assert pick_device("cpu") == torch.device("cpu")
    assert torch.backends.cuda.cudnn_sdp_enabled()


def test_a_gpu_the_machine_lacks_is_refused_by_number(one_gpu, cudnn_attention_restored):
    with pytest.raises(ValueError, match=r"--device 'cuda:3': this machine has 1 CUDA device\(s\), "
                                         r"cuda:0 to cuda:0"):
        pick_device("cuda:3")


def test_int8_with_no_device_named_decodes_on_the_cpu_beside_a_gpu(one_gpu,
                                                                   cudnn_attention_restored):
    assert pick_device(None, "int8") == torch.device("cpu")
    assert pick_device(None, "bf16").type == "cuda"
    assert pick_device("cpu", "int8") == torch.device("cpu")


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
