"""The decoding benchmark's peers decode our model as we do: its HF and CTranslate2 wrappers,
holding the conversions of `translate export` (tested themselves in tests/export/).

Tiny random models; learned positions (random tables) catch an off-by-one in the position offset.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

from translate.config import DecodeConfig
from translate.models import TransformerConfig, build_model
from translate.search import greedy_search
from translate.tokens import EOS, PAD

_spec = importlib.util.spec_from_file_location(
    "decode_benchmark", Path(__file__).resolve().parents[2] / "benchmarks" / "decode.py")
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)

V = 40
VARIANTS = [{}, {"qkv_bias": False, "positions": "learned", "activation": "gelu"},
            {"positions": "rope", "qk_norm": True, "cross_query_norm": "width"}]  # the recipe's
VOCABULARY = ["<pad>", "<unk>", "<s>", "</s>"] + [f"w{i}" for i in range(4, V)]


def tiny(**overrides):
    torch.manual_seed(0)
    cfg = TransformerConfig(d_model=32, heads=4, ffn_dim=64, encoder_layers=2, decoder_layers=2,
                            dropout=0.0, max_positions=64, **overrides)
    return build_model(cfg, V, V, shared_vocab=True).eval()


def sources() -> tuple[torch.Tensor, list[list[int]]]:
    """(B, S) right-padded sources ending in EOS, and the same as lists without padding."""
    g = torch.Generator().manual_seed(1)
    src = torch.randint(4, V, (3, 7), generator=g)
    src[:, -1] = EOS
    src[1, 4:], src[1, 3] = PAD, EOS
    return src, [[t for t in row if t != PAD] for row in src.tolist()]


@pytest.mark.parametrize("overrides", VARIANTS)
def test_the_hf_peer_decodes_greedy_as_we_do(overrides):
    pytest.importorskip("transformers")
    model = tiny(**overrides)
    peer = bench.HF(bench.to_transformers(model), None, DecodeConfig(), model.cfg.max_positions)
    src, ids = sources()
    assert peer.decode(ids, 1, 12) == greedy_search(model, src, 12)  # cached positions


@pytest.mark.parametrize("overrides", VARIANTS)
def test_the_ctranslate2_peer_decodes_greedy_as_we_do(overrides, tmp_path):
    pytest.importorskip("ctranslate2")
    model = tiny(**overrides)
    peer = bench.CT2(bench.to_ctranslate2(model, VOCABULARY, VOCABULARY, tmp_path), VOCABULARY,
                     "float32", 1, None, DecodeConfig(), model.cfg.max_positions)
    src, ids = sources()
    assert peer.decode(ids, 1, 12) == greedy_search(model, src, 12)
