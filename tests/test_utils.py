"""Process-level helpers: choosing the device, and what choosing a GPU sets up."""

import pytest
import torch

from translate.utils import pick_device


@pytest.fixture
def cudnn_attention_restored():
    before = torch.backends.cuda.cudnn_sdp_enabled()
    yield
    torch.backends.cuda.enable_cudnn_sdp(before)


@pytest.mark.parametrize("name", ["cuda", "cuda:0", None])
def test_choosing_a_gpu_takes_cudnn_out_of_attention(monkeypatch, cudnn_attention_restored, name):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    torch.backends.cuda.enable_cudnn_sdp(True)
    assert pick_device(name).type == "cuda"
    assert not torch.backends.cuda.cudnn_sdp_enabled()  # a plan per shape: see no_cudnn_attention


def test_the_cpu_leaves_attention_backends_alone(cudnn_attention_restored):
    torch.backends.cuda.enable_cudnn_sdp(True)
    assert pick_device("cpu") == torch.device("cpu")
    assert torch.backends.cuda.cudnn_sdp_enabled()
