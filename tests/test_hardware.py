"""The machine (translate.hardware): choosing the device and what choosing a GPU sets up;
precision `auto`, what it resolves to for training and for decoding, per kind of CPU."""

import pytest
import torch

from translate import hardware
from translate.engine import PLAIN
from translate.hardware import pick_device
from translate.models import build_model
from translate.models.transformer import TransformerConfig
from translate.ready import Ready

CPU = torch.device("cpu")


@pytest.fixture
def cudnn_attention_restored():
    before = torch.backends.cuda.cudnn_sdp_enabled()
    yield
    torch.backends.cuda.enable_cudnn_sdp(before)


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


def test_an_unknown_precision_is_refused_with_the_valid_ones():
    with pytest.raises(ValueError, match=r"precision 'fp64' is unknown; valid: auto, fp32, bf16, "
                                         r"fp16, int8 \(decoding on the CPU\)"):
        hardware.resolve_precision("fp64", CPU)


AMD, INTEL = "AuthenticAMD", "GenuineIntel"


@pytest.mark.parametrize("vendor, flags, training, decoding", [
    (INTEL, {"avx2", "fma"}, "fp32", "fp32"),                  # no bf16 instructions
    (AMD, {"avx2", "fma"}, "fp32", "fp32"),
    (AMD, {"avx512f", "avx512_bf16"}, "fp32", "bf16"),         # AMD EPYC (Zen 4), say
    (INTEL, {"avx512f", "avx512_bf16", "avx512_fp16"}, "fp32", "fp32"),  # Xeon, AMX not shown
    (INTEL, {"avx512f", "avx512_bf16", "amx_bf16", "amx_tile"}, "bf16", "bf16"),  # with AMX
])
def test_auto_per_cpu(monkeypatch, vendor, flags, training, decoding):
    monkeypatch.setattr(hardware, "cpu_flags", lambda: flags)
    monkeypatch.setattr(hardware, "cpu_vendor", lambda: vendor)
    assert hardware.resolve_precision("auto", CPU) == training
    assert hardware.resolve_precision("auto", CPU, decoding=True) == decoding
    assert hardware.resolve_precision("fp32", CPU, decoding=True) == "fp32"  # asked for: kept


def test_a_model_made_ready_to_decode_follows_the_cpu(monkeypatch):
    model = build_model(TransformerConfig(d_model=32, heads=2, ffn_dim=64, encoder_layers=1,
                                          decoder_layers=1), 50, 50, True)

    def precision() -> str:  # (preparing needs no tokenizer)
        return Ready.prepare(model, None, CPU, "auto", PLAIN).precision

    monkeypatch.setattr(hardware, "cpu_flags", lambda: {"avx512_bf16"})
    monkeypatch.setattr(hardware, "cpu_vendor", lambda: AMD)
    assert precision() == "bf16"
    monkeypatch.setattr(hardware, "cpu_vendor", lambda: INTEL)
    assert precision() == "fp32"
    monkeypatch.setattr(hardware, "cpu_flags", lambda: set())
    assert precision() == "fp32"


def test_cpu_flags_reads_this_machine():
    flags = hardware.cpu_flags()
    assert isinstance(flags, set)
    assert hardware.cpu_has_amx() == ("amx_bf16" in flags)
    assert hardware.cpu_has_bf16() == bool({"amx_bf16", "avx512_bf16"} & flags)
    assert isinstance(hardware.cpu_vendor(), str)


def test_a_run_whose_test_decode_takes_another_precision_says_so(monkeypatch, recipe_path,
                                                                  small_data, tmp_path, caplog):
    """On an AMD CPU with AVX512-BF16, `auto` trains in fp32 and decodes in bf16: the log says
    so where the test decode starts, and how to decode as trained."""
    import logging

    from helpers.training import TINY_OVERRIDES, train_tiny

    monkeypatch.setattr(hardware, "cpu_flags", lambda: {"avx512f", "avx512_bf16"})
    monkeypatch.setattr(hardware, "cpu_vendor", lambda: AMD)
    with caplog.at_level(logging.INFO, logger="translate"):
        train_tiny(recipe_path, [*TINY_OVERRIDES, "train.precision=auto", "train.eval_every=0"],
                   small_data, 3, tmp_path / "run")
    assert ("test decode in bf16, training ran in fp32: precision auto picks each on its own "
            "(here bf16 decodes faster); --precision fp32 decodes as trained") in caplog.text


def test_the_ram_guard_refuses_weights_larger_than_the_machines_memory():
    from translate.hardware import ModelTooLarge, check_fits_in_memory, physical_memory

    memory = physical_memory()
    assert memory > 2**30  # every machine this runs on has a GiB
    check_fits_in_memory(memory // 2, "half of it")  # nothing raised
    with pytest.raises(ModelTooLarge, match=r"^too much, \d+ GiB of weights; this machine has "
                                            r"\d+ GiB of memory: make it smaller$"):
        check_fits_in_memory(memory + 1, "too much")


@pytest.mark.parametrize("value, threads", [("3", 3), (" 1 ", 1), (None, 2), ("", 2), ("0", 2),
                                            ("-4", 2), ("two", 2), ("1.5", 2)])
def test_a_benchmark_computes_on_omp_num_threads_or_else_two(monkeypatch, value, threads):
    if value is None:
        monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    else:
        monkeypatch.setenv("OMP_NUM_THREADS", value)
    assert hardware.benchmark_threads() == threads
