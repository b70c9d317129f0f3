"""int8 decoding: the quantized model translates real data as fp32 does, through the CLI too."""

import json
from dataclasses import replace

import pytest
import sacrebleu
import torch
from click.testing import CliRunner

from helpers.models import untrained_model
from translate.loading import load_checkpoint
from translate.cli import main
from translate.data.batch import pad
from translate.engine import FAST
from translate.fast import quantize_int8
from translate.fast.linear import PackedLinear
from translate.hardware import resolve_precision
from translate.models import build_model
from translate.search import beam_search, greedy_search
from translate.tokens import BOS


def real_batch(loaded, small_data) -> tuple[torch.Tensor, torch.Tensor]:
    """16 test sentences: (B, S) source ids, (B, T) target ids that start with BOS."""
    rows = [json.loads(line) for line in (small_data / "test_2016_flickr.jsonl").open()][:16]
    src = pad([torch.tensor(ids) for ids in loaded.tokenizer.encode_src([r["en"] for r in rows])])
    tgt = pad([torch.tensor([BOS] + ids)
               for ids in loaded.tokenizer.encode_tgt([r["de"] for r in rows])])
    return src, tgt


@pytest.mark.parametrize("run", ["trained_run", "trained_rnn_run"])
def test_int8_model_scores_real_references_like_fp32(run, request, small_data):
    loaded = load_checkpoint(request.getfixturevalue(run).run_dir)
    src, tgt = real_batch(loaded, small_data)
    int8 = quantize_int8(loaded.model)
    float_types = (torch.nn.Linear, PackedLinear, torch.nn.GRUCell, torch.nn.LSTMCell)
    assert not any(type(m) in float_types for m in int8.modules())  # every linear and cell int8
    real = tgt[:, 1:] != 0
    with torch.no_grad():
        fp32 = loaded.model(src, tgt[:, :-1]).log_softmax(-1)
        quantized = int8(src, tgt[:, :-1]).log_softmax(-1)
    gold = tgt[:, 1:, None]
    ref_lp, int8_lp = fp32.gather(-1, gold)[real], quantized.gather(-1, gold)[real]
    # the reference tokens keep their log-probabilities within a few percent
    assert abs(float(int8_lp.mean() - ref_lp.mean())) < 0.05 * abs(float(ref_lp.mean()))
    assert float((fp32.argmax(-1) == quantized.argmax(-1))[real].float().mean()) > 0.9
    assert not any(isinstance(m, torch.ao.nn.quantized.dynamic.Linear)
                   for m in loaded.model.modules())  # the original is left as it was


def test_fast_engine_runs_the_int8_copy_joined_and_equal(trained_run, small_data):
    """The fast engine's int8 model makes one matmul of self-attention's Q, K, V (and of
    cross-attention's K, V) and applies fc1's ReLU inside it; its logits are the plain path's."""
    loaded = load_checkpoint(trained_run.run_dir)
    src, tgt = real_batch(loaded, small_data)
    plain, fast = quantize_int8(loaded.model), FAST.prepare(quantize_int8(loaded.model))
    layer = fast.decoder_layers[0]
    assert layer.self_attn.fuse_qkv and layer.cross_attn.fuse_qkv
    assert isinstance(layer.ffn.fc1, torch.ao.nn.intrinsic.quantized.dynamic.LinearReLU)
    calls = []
    layer.self_attn.qkv_int8.register_forward_hook(lambda *_: calls.append("Q, K, V"))
    layer.cross_attn.kv_int8.register_forward_hook(lambda *_: calls.append("memory K, V"))
    with torch.no_grad():
        expected, got = plain(src, tgt[:, :-1]), fast(src, tgt[:, :-1])
    assert calls == ["Q, K, V", "memory K, V"]
    # per-row weight scales: a row quantizes the same joined or alone; the input is shared
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


def test_decode_int8_through_the_cli(trained_run, small_data):
    lines = [json.loads(line)["en"] for line in (small_data / "test_2016_flickr.jsonl").open()][:12]
    runner = CliRunner()
    fp32, int8 = (runner.invoke(main, ["decode", str(trained_run.run_dir), "--precision", precision,
                                       "--beam", "3"], input="\n".join(lines) + "\n")
                  for precision in ("fp32", "int8"))
    assert fp32.exit_code == 0 and int8.exit_code == 0, int8.output
    assert len(int8.stdout.splitlines()) == len(fp32.stdout.splitlines()) == 12
    # int8 tracks fp32 (a weak 300-step model's beam may end some sentences at once in both)
    close = sacrebleu.corpus_chrf(int8.stdout.splitlines(), [fp32.stdout.splitlines()]).score
    assert close > 60, (close, int8.stdout, fp32.stdout)


def test_int8_is_for_decoding_on_the_cpu(recipe_path, small_data, tmp_path):
    assert resolve_precision("int8", torch.device("cpu")) == "int8"
    with pytest.raises(ValueError, match="CPU only"):
        resolve_precision("int8", torch.device("cuda"))
    result = CliRunner().invoke(main, ["train", str(recipe_path), "--data", str(small_data),
                                       "--run-dir", str(tmp_path / "run"),
                                       "--set", "train.precision=int8"])
    assert result.exit_code != 0
    assert ("train.precision: 'int8' is not one of auto, fp32, bf16, fp16 (int8 is for decoding "
            "only" in result.output)
    assert "Traceback" not in result.output


@pytest.mark.parametrize("options", [{"norm": "rmsnorm", "activation": "swiglu"},
                                     {"activation": "relu2"}], ids=["rmsnorm-swiglu", "relu2"])
def test_the_int8_copy_of_a_model_with_an_option_runs_alike_in_both_engines(options, trained_run,
                                                                             small_data):
    """Every linear layer int8, the gated network's third one too; the fast engine's int8
    logits are the plain path's, and both stay near fp32's (a model of the trained run's shape
    with the option, drawn afresh, on real sentences)."""
    loaded = load_checkpoint(trained_run.run_dir)
    torch.manual_seed(0)
    model = build_model(replace(loaded.recipe.model, **options), loaded.tokenizer.src_vocab_size,
                        loaded.tokenizer.tgt_vocab_size, loaded.tokenizer.joint).eval()
    src, tgt = real_batch(loaded, small_data)
    plain, fast = quantize_int8(model), FAST.prepare(quantize_int8(model))
    float_types = (torch.nn.Linear, PackedLinear)
    assert not any(type(m) in float_types for m in plain.modules())
    with torch.no_grad():
        fp32, expected, got = (m(src, tgt[:, :-1]) for m in (model, plain, fast))
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    assert (expected - fp32).abs().mean() < 0.05 * fp32.abs().mean()


def test_the_int8_copy_keeps_the_attention_options_and_the_fast_engine_runs_it_equal(small_data):
    """rope and qk_norm in an int8 copy: its norms stay fp32, the fast engine's joined int8
    projections feed them, and its logits and searches are the plain path's."""
    _, tokenizer, model = untrained_model(small_data, 2, ("model.positions=rope",
                                                          "model.qk_norm=true"))
    rows = [json.loads(line) for line in (small_data / "test_2016_flickr.jsonl").open()][:8]
    src = pad([torch.tensor(ids) for ids in tokenizer.encode_src([r["en"] for r in rows])])
    tgt = pad([torch.tensor([BOS] + ids) for ids in tokenizer.encode_tgt([r["de"] for r in rows])])
    plain, fast = quantize_int8(model), FAST.prepare(quantize_int8(model))
    layer = fast.decoder_layers[0]
    assert type(layer.self_attn.q_norm) is torch.nn.RMSNorm and layer.self_attn.rope
    assert layer.self_attn.fuse_qkv and not layer.cross_attn.rope
    with torch.no_grad():
        torch.testing.assert_close(fast(src, tgt[:, :-1]), plain(src, tgt[:, :-1]),
                                   rtol=1e-5, atol=1e-5)
    limits = torch.full((src.size(0),), 12)
    assert greedy_search(fast, src, limits) == greedy_search(plain, src, limits)
    ours = beam_search(fast, src, 3, limits, candidates=FAST.candidates)
    assert [h[0].tokens for h in ours] == [h[0].tokens for h in beam_search(plain, src, 3, limits)]
