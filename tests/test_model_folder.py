"""The exported model folder (what `translate export --format inference` writes): what it holds,
that every loader reads it and translates as the checkpoint does, and one-line errors for a
folder that is incomplete or another program's."""

import json
from dataclasses import replace

import pytest
import torch
from click.testing import CliRunner
from safetensors import safe_open

from helpers.files import read_jsonl
from translate.checkpoint import CheckpointError, read_checkpoint, save_checkpoint
from translate.loading import load_checkpoint
from translate.cli import main
from translate.config import load_recipe
from translate.data.batch import pad
from translate.inference import translate_sentences
from translate.model_folder import write_model_folder
from translate.models import build_model
from translate.ready import Ready
from translate.tokenizer import Tokenizer


def write(checkpoint, out, dtype="fp32"):
    write_model_folder(read_checkpoint(checkpoint), out, dtype, "best.pt")
    return out


def size(path) -> int:
    return path.stat().st_size


@pytest.fixture(scope="module")
def exported(trained_run, tmp_path_factory):
    return write(trained_run.best_checkpoint, tmp_path_factory.mktemp("x") / "model")


def test_the_folder_holds_the_model_weights_tokenizer_and_config_only(exported, trained_run,
                                                                       small_data):
    assert sorted(p.name for p in exported.iterdir()) == ["config.json", "model.safetensors",
                                                         "spm.model"]
    best = read_checkpoint(trained_run.best_checkpoint)
    with safe_open(str(exported / "model.safetensors"), framework="pt") as f:
        stored = {name: f.get_tensor(name) for name in f.keys()}
        aliases = json.loads(f.metadata()["aliases"])
    # the EMA weights (`model`), each tied tensor once, nothing of the optimizer
    assert set(stored) | set(aliases) == set(best["model"])
    assert aliases == {"tgt_embed.tokens.weight": "src_embed.tokens.weight",
                       "output.weight": "src_embed.tokens.weight"}
    for name, tensor in stored.items():
        assert torch.equal(tensor, best["model"][name]), name
    assert (exported / "spm.model").read_bytes() == best["tokenizer"]["src"].numpy().tobytes()
    config = json.loads((exported / "config.json").read_text())
    assert config["step"] == best["step"] and config["source"] == "best.pt"
    assert set(config["recipe"]) == {"data", "tokenizer", "model", "train", "decode"}
    assert config["recipe"]["model"] == best["recipe"]["model"]
    assert config["recipe"]["train"] == {"precision": "fp32", "engine": "auto"}  # TINY_TRAIN
    text = json.dumps(config)
    assert str(small_data) not in text and "/tmp" not in text  # no machine paths
    total = sum(size(p) for p in exported.iterdir())
    assert total < size(trained_run.run_dir / "last.pt") / 3  # no Adam moments, no raw weights
    assert total < size(trained_run.best_checkpoint) / 1.8  # best.pt: the EMA and raw weights


def test_every_loader_translates_the_export_as_the_checkpoint(exported, trained_run, small_data):
    from translate import Translator

    sources = [row["en"] for row in read_jsonl(small_data / "test_2016_flickr.jsonl")]
    best, folder = load_checkpoint(trained_run.run_dir), load_checkpoint(exported)
    assert folder.step == best.step and folder.recipe.model == best.recipe.model
    for beam in (1, 5):
        cfg = replace(best.recipe.decode, beam=beam)
        assert (translate_sentences(Ready(folder.model, folder.tokenizer), sources, cfg)
                == translate_sentences(Ready(best.model, best.tokenizer), sources, cfg))
    api = Translator.load(exported, device="cpu", precision="fp32")
    assert api.translate(sources[:5], beam=1) == translate_sentences(
        Ready(best.model, best.tokenizer), sources[:5], replace(best.recipe.decode, beam=1))
    result = CliRunner().invoke(main, ["evaluate", str(exported), "--data", str(small_data),
                                       "--split", "test_2016_flickr", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["test_2016_flickr"]["bleu"] >= 0


def test_bf16_halves_the_weights_and_still_loads(exported, trained_run, tmp_path):
    half = write(trained_run.best_checkpoint, tmp_path / "bf16", "bf16")
    fp32 = size(exported / "model.safetensors")
    assert abs(size(half / "model.safetensors") - fp32 / 2) < 0.01 * fp32
    loaded, best = load_checkpoint(half), load_checkpoint(trained_run.run_dir)
    weight = best.model.output.weight
    assert torch.equal(loaded.model.output.weight, weight.to(torch.bfloat16).float())


def test_separate_vocabularies_get_one_spm_model_each(tmp_path, small_data):
    rows = read_jsonl(small_data / "train.jsonl", 500)
    cfg = load_recipe(None, ["tokenizer.vocab_size=200", "tokenizer.joint=false",
                             "model.d_model=32", "model.heads=2", "model.ffn_dim=64",
                             "model.encoder_layers=1", "model.decoder_layers=1",
                             "model.tie_embeddings=false"])
    tokenizer = Tokenizer.train([r["en"] for r in rows], [r["de"] for r in rows], cfg.tokenizer)
    torch.manual_seed(0)
    model = build_model(cfg.model, tokenizer.src_vocab_size, tokenizer.tgt_vocab_size, False)
    save_checkpoint(tmp_path / "x.pt", model, cfg, tokenizer, 7)
    out = write(tmp_path / "x.pt", tmp_path / "model")
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "model.safetensors",
                                                   "spm.de.model", "spm.en.model"]
    loaded = load_checkpoint(out)
    assert loaded.tokenizer.src_model == tokenizer.src_model
    assert loaded.tokenizer.tgt_model == tokenizer.tgt_model
    for name, tensor in model.state_dict().items():
        assert torch.equal(loaded.model.state_dict()[name], tensor), name


def test_the_folder_carries_the_model_options_and_decodes_as_the_checkpoint(trained_run,
                                                                            small_data, tmp_path):
    """RMSNorm and SwiGLU (the peer formats cannot hold both) round-trip through the
    inference format: config.json names them, and the loaded model computes the checkpoint's
    logits and translations."""
    tokenizer = load_checkpoint(trained_run.run_dir).tokenizer
    cfg = load_recipe(None, ["model.d_model=32", "model.heads=2", "model.ffn_dim=96",
                             "model.encoder_layers=1", "model.decoder_layers=2",
                             "model.norm=rmsnorm", "model.activation=swiglu"])
    torch.manual_seed(0)
    model = build_model(cfg.model, tokenizer.src_vocab_size, tokenizer.tgt_vocab_size, True)
    save_checkpoint(tmp_path / "x.pt", model, cfg, tokenizer, 7)
    out = write(tmp_path / "x.pt", tmp_path / "model")
    config = json.loads((out / "config.json").read_text())
    assert (config["recipe"]["model"]["norm"], config["recipe"]["model"]["activation"]) == (
        "rmsnorm", "swiglu")
    saved, folder = load_checkpoint(tmp_path / "x.pt"), load_checkpoint(out)
    assert folder.recipe.model == cfg.model
    sources = [row["en"] for row in read_jsonl(small_data / "test_2016_flickr.jsonl", 20)]
    src = pad([torch.tensor(ids) for ids in tokenizer.encode_src(sources)])  # (B, S)
    with torch.no_grad():
        assert torch.equal(folder.model(src, src[:, :6]), saved.model(src, src[:, :6]))
    for beam in (1, 4):
        decode = replace(cfg.decode, beam=beam, max_len_b=5)
        assert (translate_sentences(Ready(folder.model, folder.tokenizer), sources, decode)
                == translate_sentences(Ready(saved.model, saved.tokenizer), sources, decode))


def test_an_incomplete_or_foreign_folder_gets_one_error_line(exported, tmp_path):
    def decode(folder) -> str:
        result = CliRunner().invoke(main, ["decode", str(folder)], input="A dog.\n")
        assert result.exit_code == 1 and result.output.count("\n") == 1, result.output
        return result.output

    only_config = tmp_path / "only_config"
    only_config.mkdir()
    (only_config / "config.json").write_bytes((exported / "config.json").read_bytes())
    assert "missing model.safetensors, spm.model" in decode(only_config)
    no_config = tmp_path / "no_config"
    no_config.mkdir()
    (no_config / "model.safetensors").write_bytes(b"")
    assert "missing config.json" in decode(no_config)
    broken = tmp_path / "broken"
    broken.mkdir()
    for file in exported.iterdir():
        (broken / file.name).write_bytes(file.read_bytes())
    (broken / "model.safetensors").write_bytes(b"\x00" * 64)
    assert "model.safetensors: its SHA-256 is not the one recorded with it" in decode(broken)
    config = json.loads((broken / "config.json").read_text())  # a folder from before digests
    del config["sha256"]
    (broken / "config.json").write_text(json.dumps({**config, "format_version": 1}))
    assert "model.safetensors (header): not valid JSON" in decode(broken)
    hf = tmp_path / "hf"
    hf.mkdir()
    (hf / "config.json").write_text('{"model_type": "pegasus"}')
    assert "holds a Hugging Face pegasus model" in decode(hf)
    ct2 = tmp_path / "ct2"
    ct2.mkdir()
    (ct2 / "config.json").write_text('{"add_source_eos": true}')
    (ct2 / "model.bin").write_bytes(b"")
    assert "holds a CTranslate2 model" in decode(ct2)
    newer = tmp_path / "newer"
    newer.mkdir()
    config = json.loads((exported / "config.json").read_text())
    (newer / "config.json").write_text(json.dumps({**config, "format_version": 99}))
    with pytest.raises(CheckpointError, match="format version 99 is newer"):
        load_checkpoint(newer)
