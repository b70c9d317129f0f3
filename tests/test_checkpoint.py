"""Checkpoints saved by older versions still load: a model config key that is no longer the
model's (`config.RETIRED_MODEL_KEYS`) is dropped wherever a checkpoint is read, and one added
since (`config.ADDED_MODEL_KEYS`) takes the value those checkpoints were trained with."""

import pytest
import torch
import yaml

from helpers.files import read_jsonl
from helpers.models import untrained_model
from translate.checkpoint import read_checkpoint, save_checkpoint, write_checkpoint
from translate.loading import load_checkpoint
from translate.config import ADDED_MODEL_KEYS, ConfigError, in_todays_keys, load_recipe
from translate.inference import translate_sentences
from translate.model_folder import write_model_folder
from translate.ready import Ready
from translate.training.checkpoints import check_resumable


def test_an_old_checkpoint_with_fused_qkv_in_its_model_config_loads(small_data, tmp_path):
    """`fused_qkv` was a model key until it became the fast engine's option: a checkpoint, and
    a model folder exported from one, that still holds it load, and a run resumes from it."""
    cfg, tokenizer, model = untrained_model(small_data)
    path = tmp_path / "run" / "last.pt"
    path.parent.mkdir()
    save_checkpoint(path, model, cfg, tokenizer, 7, {"trainer": {"elapsed": 1.0}})
    old = torch.load(path, weights_only=True)
    old["recipe"]["model"]["fused_qkv"] = True  # as every Transformer run saved it
    write_checkpoint(path, old)  # checksummed anew: a whole file, as an older version wrote
    assert "fused_qkv" in torch.load(path, weights_only=True)["recipe"]["model"]

    data = read_checkpoint(path)
    assert data["recipe"]["model"] == cfg.to_dict()["model"]
    check_resumable(path, data, cfg)  # the saved model section is the run's recipe's
    write_model_folder(old, tmp_path / "exported")  # a folder exported before the change
    for source in (path, tmp_path / "exported"):
        loaded = load_checkpoint(source)
        assert loaded.recipe.model == cfg.model
        for name, tensor in model.state_dict().items():
            assert torch.equal(loaded.model.state_dict()[name], tensor), name


def test_an_old_recipe_with_fused_qkv_loads(recipe_path, tmp_path):
    """A recipe.yaml an older run wrote (`model.fused_qkv: true`) is still a recipe to train
    with; any other unknown model key is still refused."""

    raw = yaml.safe_load(recipe_path.read_text(encoding="utf-8"))
    raw["model"]["fused_qkv"] = False
    old = tmp_path / "recipe.yaml"
    old.write_text(yaml.safe_dump(raw), encoding="utf-8")
    assert load_recipe(old).model == load_recipe(recipe_path).model
    raw["model"]["fused_qkvs"] = True
    old.write_text(yaml.safe_dump(raw), encoding="utf-8")
    with pytest.raises(ConfigError, match="fused_qkvs"):
        load_recipe(old)


@pytest.mark.parametrize("key, value", [("norm", "layernorm"), ("qk_norm", False)])
def test_a_checkpoint_saved_before_a_model_key_existed_loads_resumes_and_decodes_alike(
        small_data, tmp_path, key, value):
    """A key added to the model since (`config.ADDED_MODEL_KEYS`) takes the value the checkpoint
    was trained with, wherever a checkpoint is read: the saved model section then equals the
    run's (so it resumes), and the model loads and translates as the one saved (and from a
    folder exported from it)."""
    cfg, tokenizer, model = untrained_model(small_data)
    path = tmp_path / "run" / "last.pt"
    path.parent.mkdir()
    save_checkpoint(path, model, cfg, tokenizer, 7, {"trainer": {"elapsed": 1.0}})
    old = torch.load(path, weights_only=True)
    del old["recipe"]["model"][key]  # as every Transformer run saved it before the key
    write_checkpoint(path, old)

    data = read_checkpoint(path)
    assert data["recipe"]["model"] == cfg.to_dict()["model"] and \
        data["recipe"]["model"][key] == value
    check_resumable(path, data, cfg)
    write_model_folder(old, tmp_path / "exported")
    sources = [row["en"] for row in read_jsonl(small_data / "test_2016_flickr.jsonl", 10)]
    expected = translate_sentences(Ready(model.eval(), tokenizer), sources, cfg.decode)
    for source in (path, tmp_path / "exported"):
        loaded = load_checkpoint(source)
        assert loaded.recipe.model == cfg.model
        assert loaded.model.state_dict().keys() == model.state_dict().keys()
        assert translate_sentences(Ready(loaded.model, loaded.tokenizer), sources,
                                   cfg.decode) == expected


def test_added_model_keys_fill_saved_recipes_of_their_arch_only():
    saved = {"model": {"arch": "transformer", "d_model": 32}, "train": {}}
    assert in_todays_keys(saved)["model"] == {"arch": "transformer", "d_model": 32,
                                              **ADDED_MODEL_KEYS["transformer"]}
    assert in_todays_keys({"model": {"d_model": 32}})["model"]["norm"] == "layernorm"
    rnn = {"model": {"arch": "rnn", "cell": "gru"}}
    assert in_todays_keys(rnn) == rnn
    given = {"model": {"norm": "rmsnorm", "fused_qkv": True}}
    assert in_todays_keys(given) == {"model": {"norm": "rmsnorm", "qk_norm": False,
                                               "cross_query_norm": "head"}}


def test_finite_weights_that_score_nan_are_refused_on_load_decode_and_export(trained_run,
                                                                            tmp_path):
    """Weights grown huge in a diverging run are finite, so no weight check sees them; the
    model they make scores every piece NaN and would translate every sentence into one piece."""
    from helpers.cli import cli, refused
    from translate.checkpoint import CheckpointError, write_checkpoint

    data = read_checkpoint(trained_run.best_checkpoint)
    model = {name: w * 1e30 if w.is_floating_point() else w for name, w in data["model"].items()}
    assert all(torch.isfinite(w).all() for w in model.values())
    huge = tmp_path / "diverged.pt"
    write_checkpoint(huge, {**data, "model": model})
    with pytest.raises(CheckpointError, match="its weights are finite but its scores are NaN"):
        load_checkpoint(huge)
    refused(cli("decode", huge), "its scores are NaN or infinite", code=1)
    refused(cli("export", huge, "-o", tmp_path / "out"), "its scores are NaN or infinite")
    assert not (tmp_path / "out").exists()
    load_checkpoint(trained_run.best_checkpoint)  # the run's own loads
