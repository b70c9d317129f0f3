"""`translate export` on the command line: sizes printed, and one `Error:` line for what a
format cannot take."""

import importlib.util
import json
import re
from dataclasses import replace

import pytest
import torch
from click.testing import CliRunner

from helpers.files import read_jsonl
from helpers.models import untrained_model
from translate.checkpoint import save_checkpoint
from translate.loading import load_checkpoint
from translate.cli import main
from translate.config import load_recipe
from translate.inference import translate_sentences
from translate.models import build_model
from translate.ready import Ready


def run(*args: str):
    return CliRunner().invoke(main, ["export", *args])


def one_error(result) -> str:
    assert result.exit_code == 1 and result.output.startswith("Error: "), result.output
    assert result.output.count("\n") == 1, result.output
    return result.output


def test_export_prints_the_checkpoint_and_export_sizes(trained_run, tmp_path):
    result = run(str(trained_run.run_dir), "-o", str(tmp_path / "model"))
    assert result.exit_code == 0, result.output
    best = trained_run.best_checkpoint.stat().st_size
    exported = sum(p.stat().st_size for p in (tmp_path / "model").iterdir())
    first = result.output.splitlines()[0]
    assert f"exported {trained_run.best_checkpoint} ({best / 2**20:.2f} MiB)" in first
    assert f"as inference to {tmp_path / 'model'} ({exported / 2**20:.2f} MiB" in first
    assert re.search(r"model\.safetensors +\d+\.\d\d MiB", result.output)
    print(first)


@pytest.fixture(scope="module")
def rnn_checkpoint(trained_run, tmp_path_factory):
    """An untrained RNN checkpoint with the trained run's tokenizer."""
    tokenizer = load_checkpoint(trained_run.run_dir).tokenizer
    cfg = load_recipe(None, ["model.arch=rnn", "model.embed_dim=16", "model.encoder_hidden=16",
                             "model.decoder_hidden=16", "model.attn_dim=16"])
    torch.manual_seed(0)
    model = build_model(cfg.model, tokenizer.src_vocab_size, tokenizer.tgt_vocab_size, True)
    path = tmp_path_factory.mktemp("rnn") / "rnn.pt"
    save_checkpoint(path, model, cfg, tokenizer, 1)
    return path


def test_the_rnn_exports_to_inference_only(rnn_checkpoint, tmp_path):
    result = run(str(rnn_checkpoint), "-o", str(tmp_path / "rnn"))
    assert result.exit_code == 0, result.output
    loaded, original = load_checkpoint(tmp_path / "rnn"), load_checkpoint(rnn_checkpoint)
    for name, tensor in original.model.state_dict().items():
        assert torch.equal(loaded.model.state_dict()[name], tensor), name
    for fmt in ("ctranslate2", "hf"):
        if importlib.util.find_spec({"hf": "transformers"}.get(fmt, fmt)) is None:
            continue
        output = one_error(run(str(rnn_checkpoint), "--format", fmt, "-o", str(tmp_path / fmt)))
        assert f"--format {fmt} converts only the Transformer" in output
        assert "additive attention" in output and "--format inference" in output
        assert not (tmp_path / fmt).exists()  # nothing half-written


@pytest.mark.parametrize("option, fmt", [("activation=relu2", "ctranslate2")])
def test_a_model_option_a_peer_format_cannot_hold_is_named_in_one_line(trained_run, tmp_path,
                                                                      option, fmt):
    pytest.importorskip({"hf": "transformers"}.get(fmt, fmt))
    tokenizer = load_checkpoint(trained_run.run_dir).tokenizer
    cfg = load_recipe(None, ["model.d_model=16", "model.heads=2", "model.ffn_dim=32",
                             "model.encoder_layers=1", "model.decoder_layers=1",
                             f"model.{option}"])
    torch.manual_seed(0)
    model = build_model(cfg.model, tokenizer.src_vocab_size, tokenizer.tgt_vocab_size, True)
    save_checkpoint(tmp_path / "option.pt", model, cfg, tokenizer, 1)
    output = one_error(run(str(tmp_path / "option.pt"), "--format", fmt, "-o",
                           str(tmp_path / fmt)))
    key, value = option.split("=")
    assert f"--format {fmt} cannot hold model.{key}: {value}" in output
    assert "export this model with --format" in output and "inference" in output
    assert not (tmp_path / fmt).exists()  # nothing half-written
    assert run(str(tmp_path / "option.pt"), "-o", str(tmp_path / "inference")).exit_code == 0


@pytest.fixture(scope="module")
def options_checkpoint(small_data, tmp_path_factory):
    """An untrained Transformer checkpoint with rotary positions and QK-norm."""
    cfg, tokenizer, model = untrained_model(small_data, 2, ("model.positions=rope",
                                                            "model.qk_norm=true"))
    path = tmp_path_factory.mktemp("options") / "rope.pt"
    save_checkpoint(path, model, cfg, tokenizer, 1)
    return path


def test_rope_and_qk_norm_export_to_inference_hf_and_ctranslate2_refuses_the_head_form(
        options_checkpoint, small_data, tmp_path):
    """The inference folder holds the options (config.json's model) and translates as the
    checkpoint does, greedy and beam 4; hf writes its modeling file (tests/export/test_hf_remote.py
    translates with it); CTranslate2 refuses the per-head cross-attention query norm in one line
    (the width form converts: tests/export/test_ctranslate2.py)."""
    result = run(str(options_checkpoint), "-o", str(tmp_path / "model"))
    assert result.exit_code == 0, result.output
    loaded, original = load_checkpoint(tmp_path / "model"), load_checkpoint(options_checkpoint)
    assert loaded.recipe.model == original.recipe.model
    assert (loaded.recipe.model.positions, loaded.recipe.model.qk_norm) == ("rope", True)
    assert loaded.model.state_dict().keys() == original.model.state_dict().keys()
    for name, tensor in original.model.state_dict().items():
        assert torch.equal(loaded.model.state_dict()[name], tensor), name
    sources = [row["en"] for row in read_jsonl(small_data / "test_2016_flickr.jsonl", 20)]
    for beam in (1, 4):
        cfg = replace(original.recipe.decode, beam=beam, max_len_b=5)
        assert (translate_sentences(Ready(loaded.model, loaded.tokenizer), sources, cfg)
                == translate_sentences(Ready(original.model, original.tokenizer), sources, cfg))
    if importlib.util.find_spec("ctranslate2") is not None:  # its cross-attention's norm
        output = one_error(run(str(options_checkpoint), "--format", "ctranslate2", "-o",
                               str(tmp_path / "ct2")))
        assert output.startswith("Error: --format ctranslate2 cannot hold model.qk_norm: true "
                                 "with model.cross_query_norm: head (CTranslate2 normalises")
        assert not (tmp_path / "ct2").exists()
    if importlib.util.find_spec("transformers") is not None:  # a modeling file of its own
        result = run(str(options_checkpoint), "--format", "hf", "-o", str(tmp_path / "hf"))
        assert result.exit_code == 0, result.output
        config = json.loads((tmp_path / "hf" / "config.json").read_text())
        assert config["auto_map"]["AutoModelForSeq2SeqLM"].startswith("modeling_translate.")


def test_options_a_format_cannot_take_and_an_occupied_output_are_refused(trained_run, tmp_path):
    ckpt = str(trained_run.best_checkpoint)
    output = one_error(run(ckpt, "--format", "ctranslate2", "--dtype", "bf16", "-o",
                           str(tmp_path / "a")))
    assert "ctranslate2 takes --quantization" in output
    output = one_error(run(ckpt, "--quantization", "int8", "-o", str(tmp_path / "b")))
    assert "--quantization takes int8" in output
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "keep.txt").write_text("mine")
    assert "exists and is not an empty folder" in one_error(run(ckpt, "-o", str(tmp_path / "full")))
    assert (tmp_path / "full" / "keep.txt").read_text() == "mine"


@pytest.mark.parametrize("fmt, module", [("ctranslate2", "ctranslate2"),
                                         ("hf", "google.protobuf")])  # transformers reads spm
def test_a_missing_peer_package_is_named(trained_run, tmp_path, monkeypatch, fmt, module):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == module else real(name, *a))
    output = one_error(run(str(trained_run.best_checkpoint), "--format", fmt, "-o",
                           str(tmp_path / fmt)))
    assert (f"needs the {module.split('.')[-1]} package: pip install ctranslate2 transformers "
            f"protobuf (in a clone: pip install -e '.[export]')") in output
    assert not (tmp_path / fmt).exists()
