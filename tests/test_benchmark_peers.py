"""The decoding benchmark's peers compute our model: HF M2M100 and CTranslate2 conversions.

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
from translate.tokens import BOS, EOS, PAD

_spec = importlib.util.spec_from_file_location(
    "decode_benchmark", Path(__file__).resolve().parents[1] / "benchmarks" / "decode.py")
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)

V = 40
VARIANTS = [{}, {"qkv_bias": False, "positions": "learned", "activation": "gelu"}]
VOCABULARY = ["<pad>", "<unk>", "<s>", "</s>"] + [f"w{i}" for i in range(4, V)]


def tiny(**overrides):
    torch.manual_seed(0)
    cfg = TransformerConfig(d_model=32, heads=4, ffn_dim=64, encoder_layers=2, decoder_layers=2,
                            dropout=0.0, max_positions=64, **overrides)
    return build_model(cfg, V, V, shared_vocab=True).eval()


def batch():
    """(B, S) right-padded sources ending in EOS and (B, T) BOS-first target prefixes."""
    g = torch.Generator().manual_seed(1)
    src = torch.randint(4, V, (3, 7), generator=g)
    src[:, -1] = EOS
    src[1, 4:], src[1, 3] = PAD, EOS
    tgt = torch.randint(4, V, (3, 6), generator=g)
    tgt[:, 0] = BOS
    return src, tgt


def ids(src: torch.Tensor) -> list[list[int]]:
    return [[t for t in row if t != PAD] for row in src.tolist()]


@pytest.mark.parametrize("overrides", VARIANTS)
def test_m2m100_logits_and_greedy_equal_ours(overrides):
    pytest.importorskip("transformers")
    model = tiny(**overrides)
    hf = bench.to_m2m100(model)
    src, tgt = batch()
    with torch.no_grad():
        theirs = hf(input_ids=src, attention_mask=src != PAD, decoder_input_ids=tgt).logits
        torch.testing.assert_close(theirs, model(src, tgt), atol=1e-5, rtol=0)
    peer = bench.HF(hf, None, DecodeConfig(), model.cfg.max_positions)
    assert peer.decode(ids(src), 1, 12) == greedy_search(model, src, 12)  # cached positions


@pytest.mark.parametrize("overrides", VARIANTS)
def test_ctranslate2_logprobs_and_greedy_equal_ours(overrides, tmp_path):
    pytest.importorskip("ctranslate2")
    model = tiny(**overrides)
    peer = bench.CT2(bench.to_ctranslate2(model, VOCABULARY, tmp_path), VOCABULARY, "float32", 1,
                     None, DecodeConfig(), model.cfg.max_positions)
    src, tgt = batch()
    scored = peer.translator.score_batch([[VOCABULARY[i] for i in s] for s in ids(src)],
                                         [[VOCABULARY[i] for i in t[1:]] for t in tgt.tolist()])
    tgt_out = torch.cat([tgt[:, 1:], torch.full((3, 1), EOS)], dim=1)  # (B, T)
    with torch.no_grad():
        ours = torch.log_softmax(model(src, tgt), -1).gather(-1, tgt_out[..., None]).squeeze(-1)
    theirs = torch.tensor([r.log_probs for r in scored])  # (B, T): the target pieces, then EOS
    torch.testing.assert_close(theirs, ours, atol=1e-4, rtol=0)
    assert peer.decode(ids(src), 1, 12) == greedy_search(model, src, 12)


def test_untied_models_are_refused():
    with pytest.raises(ValueError, match="tied embeddings"):
        bench.check_convertible(tiny(tie_embeddings=False))
