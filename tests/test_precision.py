"""Precision `auto`: what it resolves to for training and for decoding, per kind of CPU."""

import pytest
import torch

from translate import utils
from translate.engine import PLAIN
from translate.inference import decoding_model
from translate.models import build_model
from translate.models.transformer import TransformerConfig

CPU = torch.device("cpu")


AMD, INTEL = "AuthenticAMD", "GenuineIntel"


@pytest.mark.parametrize("vendor, flags, training, decoding", [
    (INTEL, {"avx2", "fma"}, "fp32", "fp32"),                  # no bf16 instructions
    (AMD, {"avx2", "fma"}, "fp32", "fp32"),
    (AMD, {"avx512f", "avx512_bf16"}, "fp32", "bf16"),         # AMD EPYC (Zen 4), say
    (INTEL, {"avx512f", "avx512_bf16", "avx512_fp16"}, "fp32", "fp32"),  # Xeon, AMX not shown
    (INTEL, {"avx512f", "avx512_bf16", "amx_bf16", "amx_tile"}, "bf16", "bf16"),  # with AMX
])
def test_auto_per_cpu(monkeypatch, vendor, flags, training, decoding):
    monkeypatch.setattr(utils, "cpu_flags", lambda: flags)
    monkeypatch.setattr(utils, "cpu_vendor", lambda: vendor)
    assert utils.resolve_precision("auto", CPU) == training
    assert utils.resolve_precision("auto", CPU, decoding=True) == decoding
    assert utils.resolve_precision("fp32", CPU, decoding=True) == "fp32"  # asked for: kept


def test_decoding_model_follows_the_cpu(monkeypatch):
    model = build_model(TransformerConfig(d_model=32, heads=2, ffn_dim=64, encoder_layers=1,
                                          decoder_layers=1), 50, 50, True)
    monkeypatch.setattr(utils, "cpu_flags", lambda: {"avx512_bf16"})
    monkeypatch.setattr(utils, "cpu_vendor", lambda: AMD)
    assert decoding_model(model, "auto", CPU, PLAIN)[1] == "bf16"
    monkeypatch.setattr(utils, "cpu_vendor", lambda: INTEL)
    assert decoding_model(model, "auto", CPU, PLAIN)[1] == "fp32"
    monkeypatch.setattr(utils, "cpu_flags", lambda: set())
    assert decoding_model(model, "auto", CPU, PLAIN)[1] == "fp32"


def test_cpu_flags_reads_this_machine():
    flags = utils.cpu_flags()
    assert isinstance(flags, set)
    assert utils.cpu_has_amx() == ("amx_bf16" in flags)
    assert utils.cpu_has_bf16() == bool({"amx_bf16", "avx512_bf16"} & flags)
    assert isinstance(utils.cpu_vendor(), str)


def test_a_run_whose_test_decode_takes_another_precision_says_so(monkeypatch, recipe_path,
                                                                  small_data, tmp_path, caplog):
    """On an AMD CPU with AVX512-BF16, `auto` trains in fp32 and decodes in bf16: the log says
    so where the test decode starts, and how to decode as trained."""
    import logging

    from conftest import TINY_OVERRIDES, train_tiny

    monkeypatch.setattr(utils, "cpu_flags", lambda: {"avx512f", "avx512_bf16"})
    monkeypatch.setattr(utils, "cpu_vendor", lambda: AMD)
    with caplog.at_level(logging.INFO, logger="translate"):
        train_tiny(recipe_path, [*TINY_OVERRIDES, "train.precision=auto", "train.eval_every=0"],
                   small_data, 3, tmp_path / "run")
    assert ("test decode in bf16, training ran in fp32: precision auto picks each on its own "
            "(here bf16 decodes faster); --precision fp32 decodes as trained") in caplog.text
