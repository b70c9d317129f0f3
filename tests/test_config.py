import pytest
import torch
from click.testing import CliRunner

from translate.cli import main
from translate.config import ConfigError, load_recipe, resume_overrides


def test_recipe_loads_with_tokenizer_spec(recipe_path):
    r = load_recipe(recipe_path)
    assert r.model.arch == "transformer" and r.tokenizer.vocab_size == 8000 and r.tokenizer.joint
    assert r.data.splits["dev"] == "validation"


def test_overrides_are_parsed_and_typed(recipe_path):
    r = load_recipe(recipe_path, ["model.encoder_layers=4", "train.lr=1e-4", "train.lr=2e-4",
                                  "data.test_splits=[test_2016_flickr, test_2017_flickr]",
                                  "train.max_minutes=5", "data.splits.dev=val"])
    assert r.model.encoder_layers == 4 and r.train.lr == 2e-4
    assert r.data.test_splits == ("test_2016_flickr", "test_2017_flickr")
    assert r.train.max_minutes == 5.0 and r.data.splits["dev"] == "val"


def test_model_options_default_to_the_classic_transformer(recipe_path):
    r = load_recipe(recipe_path)
    assert (r.model.norm, r.model.activation) == ("layernorm", "relu")
    r = load_recipe(recipe_path, ["model.norm=rmsnorm", "model.activation=swiglu"])
    assert (r.model.norm, r.model.activation) == ("rmsnorm", "swiglu")


def test_the_attention_options_are_model_keys_off_by_default(recipe_path):
    default = load_recipe(recipe_path).model
    assert (default.positions, default.qk_norm) == ("sinusoidal", False)
    r = load_recipe(recipe_path, ["model.positions=rope", "model.qk_norm=true"])
    assert (r.model.positions, r.model.qk_norm) == ("rope", True)


def test_unknown_key_lists_valid_keys(recipe_path):
    with pytest.raises(ConfigError, match=r"unknown key\(s\) \['layers'\].*encoder_layers"):
        load_recipe(recipe_path, ["model.layers=4"])


def test_unknown_key_in_file_names_the_file(tmp_path):
    path = tmp_path / "r.yaml"
    path.write_text("train:\n  lr: 0.1\n  warmpu: 10\n")
    with pytest.raises(ConfigError, match=r"r\.yaml: train: unknown key\(s\) \['warmpu'\]"):
        load_recipe(path)


@pytest.mark.parametrize("override, message", [
    ("model.d_model=big", "expected an integer"),
    ("model.tie_embeddings=3", "expected true/false"),
    ("train.lr", "must look like section.key=value"),
    ("lr=3", "must be section.key"),
    ("model.arch=lstm", "model.arch 'lstm' is unknown"),
    ("optim.lr=3", "unknown section"),
    ("train.optimizer=sgd", "train.optimizer: 'sgd' is not one of adamw, muon"),
    ("train.muon_lr=0", "train.muon_lr: must be above 0"),
    ("train.muon_momentum=1", r"train.muon_momentum: must be in \[0, 1\)"),
    ("train.muon_weight_decay=-0.1", "train.muon_weight_decay: must not be negative"),
    ("train.muon_adjust_lr=moonshot", "not one of original, match_rms_adamw"),
    ("model.norm=batchnorm", r"model\.norm: 'batchnorm' is not one of layernorm, rmsnorm$"),
    ("model.activation=swish", r"model\.activation: 'swish' is not one of relu, gelu, relu2, "
                               r"swiglu$"),
    ("model.norm=1", r"model\.norm: expected str, got 1$"),
    ("model.positions=rotary", "'rotary' is not one of sinusoidal, learned, rope "
                               r"\(rotary position embeddings are rope\)"),
    ("model.qk_norm=yes please", "model.qk_norm: expected true/false"),
])
def test_bad_overrides_are_clear_errors(recipe_path, override, message):
    with pytest.raises(ConfigError, match=message):
        load_recipe(recipe_path, [override])


@pytest.mark.parametrize("key, value", [("optimizer", "muon"), ("muon_lr", "0.01"),
                                        ("muon_adjust_lr", "match_rms_adamw"),
                                        ("lr_schedule", "wsd"), ("decay_fraction", "0.5")])
def test_a_resumed_run_keeps_its_optimizer_and_schedule(recipe_path, key, value):
    saved = load_recipe(recipe_path).to_dict()
    with pytest.raises(ConfigError, match=f"--set 'train.{key}': a resumed run keeps its recipe"):
        resume_overrides(saved, [f"train.{key}={value}"])


def test_muon_needs_a_torch_that_has_it(recipe_path, monkeypatch):
    monkeypatch.delattr("torch.optim.Muon")
    with pytest.raises(ConfigError, match=r"train.optimizer: muon needs torch.optim.Muon, which "
                                          r"torch .* lacks; upgrade torch \(2.9 or later\)"):
        load_recipe(recipe_path, ["train.optimizer=muon"])
    assert load_recipe(recipe_path).train.optimizer == "adamw"


def test_missing_and_invalid_recipe_files(tmp_path):
    with pytest.raises(ConfigError, match="recipe not found"):
        load_recipe(tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("model: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_recipe(bad)
    bad.write_text("- a list\n")
    with pytest.raises(ConfigError, match="a recipe is a mapping"):
        load_recipe(bad)


def test_yaml_tags_are_not_executed(tmp_path):
    bad = tmp_path / "evil.yaml"
    bad.write_text("train: !!python/object/apply:os.system ['echo hacked']\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_recipe(bad)


def test_a_tokenizer_spec_giving_a_key_twice_is_refused_as_a_recipe_is(recipe_path, tmp_path):
    spec = tmp_path / "spec.yaml"
    spec.write_text("model_type: bpe\nvocab_size: 8000\njoint: true\nvocab_size: 4000\n")
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(recipe_path.read_text().replace("tokenizers/multi30k_joint_8k_bpe.yaml",
                                                      str(spec)))
    says = (f"{spec}: the key 'vocab_size' is given twice in one mapping (lines 2 and 4); "
            f"keep one")
    with pytest.raises(ConfigError) as error:
        load_recipe(recipe)
    assert str(error.value) == says
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    result = CliRunner().invoke(main, ["train", str(recipe), "--run-dir", str(tmp_path / "run")])
    assert (result.exit_code, result.output) == (1, f"Error: {says}\n")
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before


def test_each_runtime_table_has_exactly_the_recipes_names():
    """The runtime's tables are keyed by the names the recipe takes (translate.config.names):
    a name added on one side only would be a recipe value that fails at run time."""
    from dataclasses import fields

    from translate.config import names
    from translate.config.models import TransformerConfig
    from translate.engine import ENGINES
    from translate.hardware import resolve_precision
    from translate.models.transformer import ACTIVATIONS, NORMS

    assert tuple(ENGINES) == names.ENGINES
    assert tuple(ACTIVATIONS) == names.ACTIVATIONS and set(names.GATED) <= set(ACTIVATIONS)
    assert tuple(NORMS) == names.NORMS
    choices = {f.name: f.metadata.get("choices") for f in fields(TransformerConfig)}
    assert (choices["activation"], choices["norm"], choices["cross_query_norm"]) == (
        names.ACTIVATIONS, names.NORMS, names.QUERY_NORMS)
    assert resolve_precision("fp32", torch.device("cpu")) == "fp32"
    with pytest.raises(ValueError, match="valid: " + ", ".join(names.PRECISIONS)):
        resolve_precision("fp8", torch.device("cpu"))
