"""A recipe read: YAML read safely, `--set` overrides applied, old saved recipes upgraded.

A recipe saved in a folder (a run folder's recipe.yaml, a checkpoint) names a local data folder
relative to that folder (`data_relative_to`), and is read back from there (`data_from`), so that
a run finds its data from any working directory.

Tests: tests/test_config.py, tests/test_checkpoint.py (recipes of older runs).
"""

from __future__ import annotations

import copy
import dataclasses
import os
from pathlib import Path
from typing import Any

import yaml

from translate import yaml_limits
from translate.config.checks import ConfigError, build_section
from translate.config.schema import SECTIONS, DecodeConfig, Recipe, TokenizerConfig
from translate.config.models import MODEL_CONFIGS
from translate.paths import is_relative, path_from, readable

# Where a tokenizer spec named by a relative path is looked for last: the project's root.
PROJECT = Path(__file__).resolve().parents[2]


def load_recipe(path: str | Path | None = None, overrides: list[str] | tuple = ()) -> Recipe:
    """Read a recipe YAML (or start from defaults when `path` is None) and apply overrides.

    Args:
        path: recipe file.
        overrides: strings like ``"model.encoder_layers=4"``; values are parsed as YAML.
    """
    raw: dict = {}
    where = "defaults"
    if path is not None:
        path = Path(path)
        if not path.is_file():
            raise ConfigError(f"recipe not found: {path}")
        where = str(path)
        raw = _read_yaml(path)
        if not raw:
            raise ConfigError(f"{path}: the recipe is empty")
        if not isinstance(raw, dict):
            raise ConfigError(f"{path}: a recipe is a mapping of sections, "
                              f"got {type(raw).__name__}")
        if isinstance(raw.get("data"), dict) and "dataset" in raw["data"]:  # a saved recipe's
            raw["data"]["dataset"] = path_from(raw["data"]["dataset"], path.parent)
    for item in overrides:
        _apply_override(raw, item)
    return recipe_from_dict(raw, where, base_dir=path.parent if path else Path.cwd())


def data_relative_to(recipe: Recipe, folder: Path) -> Recipe:
    """The recipe with a local data folder given relative to the working directory rewritten
    relative to `folder` (a run folder): saved so, a run finds its data from anywhere. Hub
    names and absolute paths stay as they are."""
    dataset = recipe.data.dataset
    if not (is_relative(dataset) and Path(dataset).exists()):
        return recipe
    moved = readable(os.path.relpath(os.path.abspath(dataset), os.path.abspath(folder)),
                     Path(folder), Path(dataset))
    return dataclasses.replace(recipe, data=dataclasses.replace(recipe.data, dataset=moved))


def data_from(recipe: Recipe, folder: Path) -> Recipe:
    """The inverse of `data_relative_to` for a recipe saved in `folder`."""
    dataset = path_from(recipe.data.dataset, folder)
    return dataclasses.replace(recipe, data=dataclasses.replace(recipe.data, dataset=dataset))


def _read_yaml(path: Path) -> Any:
    """A YAML file's content via the safe loader (plain values only, never Python objects),
    with bounded work (`yaml_limits`)."""
    try:
        if path.stat().st_size > yaml_limits.MAX_BYTES:
            raise ConfigError(f"{path}: {path.stat().st_size:,} bytes, over the limit of "
                              f"{yaml_limits.MAX_BYTES:,} for a recipe")
        return yaml_limits.safe_load(path.read_text(encoding="utf-8"), str(path))
    except yaml_limits.YamlRefusedError as e:
        raise ConfigError(str(e)) from None
    except UnicodeDecodeError as e:
        raise ConfigError(f"{path}: not valid UTF-8 ({e.reason} at byte {e.start})") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise ConfigError(f"{path}: not valid YAML ({problem}{where})") from None


def recipe_from_dict(raw: dict, where: str = "recipe", base_dir: Path | None = None,
                     resolved: bool = False) -> Recipe:
    """Build a Recipe from a plain dict, checking every key and type.

    `resolved` marks a recipe saved by a run (checkpoint, recipe.yaml): its tokenizer fields are
    already filled in, so `tokenizer.spec` is only a note and is not read again.
    """
    unknown = set(raw) - {"data", "tokenizer", "model", "train", "decode"}
    if unknown:
        raise ConfigError(f"{where}: unknown section(s) {sorted(unknown, key=str)}; valid: "
                          "['data', 'decode', 'model', 'tokenizer', 'train']")
    raw = without_retired_keys(raw)
    if resolved:
        raw = upgrade_recipe(in_todays_keys(raw))
    sections = {}
    for name, cls in SECTIONS.items():
        values = dict(_section(raw, name, where))
        if name == "tokenizer" and values.get("spec") and not resolved:
            values = _merge_spec(values, where, base_dir)
        sections[name] = build_section(cls, values, f"{where}: {name}")
    model_raw = dict(_section(raw, "model", where))
    arch = model_raw.get("arch", "transformer")
    if not isinstance(arch, str) or arch not in MODEL_CONFIGS:
        raise ConfigError(f"{where}: model.arch {arch!r} is unknown; valid: {sorted(MODEL_CONFIGS)}")
    sections["model"] = build_section(MODEL_CONFIGS[arch], model_raw, f"{where}: model")
    return Recipe(**sections)


# Model keys older recipes saved that are no longer the model's: `fused_qkv` (Q, K and V in one
# matmul) is the fast engine's choice now (`translate.engine.fast_engine`), on by default, and
# either way the outputs are the same to float rounding.
RETIRED_MODEL_KEYS = ("fused_qkv",)
# Model keys added since, per arch, with the value every recipe saved before them had: not
# today's default, which may change, but what those models compute. A saved recipe gets them
# wherever it is read (loading, export, resuming, whose check compares the saved model section
# with the run's); a recipe a person writes gets today's defaults.
ADDED_MODEL_KEYS = {"transformer": {"norm": "layernorm", "qk_norm": False,
                                     "cross_query_norm": "head"}}


def without_retired_keys(recipe: dict) -> dict:
    """A recipe in today's keys: its model section without RETIRED_MODEL_KEYS."""
    model = recipe.get("model")
    if not isinstance(model, dict) or not any(key in model for key in RETIRED_MODEL_KEYS):
        return recipe
    return {**recipe, "model": {k: v for k, v in model.items() if k not in RETIRED_MODEL_KEYS}}


def in_todays_keys(recipe: dict) -> dict:
    """A recipe a run saved, in today's keys: without RETIRED_MODEL_KEYS, and with the
    ADDED_MODEL_KEYS it lacks."""
    recipe = without_retired_keys(recipe)
    model = recipe.get("model")
    arch = model.get("arch", "transformer") if isinstance(model, dict) else None
    added = ADDED_MODEL_KEYS.get(arch, {}) if isinstance(arch, str) else {}
    if not added or added.keys() <= model.keys():
        return recipe
    return {**recipe, "model": {**added, **model}}


def upgrade_recipe(raw: dict) -> dict:
    """A recipe saved before validation had its own beam (`train.valid_beam`): its decode.beam
    was validation's, usually greedy; it becomes valid_beam, and decode.beam takes today's
    default, so that `translate decode` on an older run searches with a beam of 5 too."""
    train, decode = raw.get("train"), raw.get("decode")
    if not isinstance(train, dict) or not isinstance(decode, dict) or "valid_beam" in train:
        return raw
    return {**raw, "train": {**train, "valid_beam": decode.get("beam", 1)},
            "decode": {**decode, "beam": DecodeConfig.beam}}


def _section(raw: dict, name: str, where: str) -> dict:
    value = raw.get(name) or {}
    if not isinstance(value, dict):
        raise ConfigError(f"{where}: section '{name}' must be a mapping, got {value!r}")
    return value


def _merge_spec(values: dict, where: str, base_dir: Path | None) -> dict:
    """Fill tokenizer fields from a spec file; keys given in the recipe win."""
    if not isinstance(values["spec"], str):
        raise ConfigError(f"{where}: tokenizer.spec: expected a file path, got {values['spec']!r}")
    spec = Path(values["spec"])
    candidates = [spec] if spec.is_absolute() else [Path.cwd() / spec, *(
        [base_dir / spec] if base_dir else []), PROJECT / spec]
    found = next((c for c in candidates if c.is_file()), None)
    if found is None:
        raise ConfigError(f"{where}: tokenizer spec not found: {str(spec)!r}")
    spec_values = _read_yaml(found) or {}
    if not isinstance(spec_values, dict):
        raise ConfigError(f"{found}: a tokenizer spec is a mapping")
    build_section(TokenizerConfig, spec_values, str(found))  # validates the spec's own keys
    # The spec's keys are now in the recipe: a saved recipe needs no file (spec is dropped).
    return {**spec_values, **values, "spec": None}


def _apply_override(raw: dict, item: str) -> None:
    """Apply one ``section.key=value`` override in place (value parsed as YAML)."""
    if "=" not in item:
        raise ConfigError(f"override {item!r} must look like section.key=value")
    dotted, text = item.split("=", 1)
    keys = dotted.strip().split(".")
    if len(keys) < 2 or not all(keys):
        raise ConfigError(f"override {item!r}: the key must be section.key, e.g. model.d_model=512")
    try:
        value = yaml_limits.safe_load(text, f"override {dotted.strip()}") if text.strip() else ""
    except yaml_limits.YamlRefusedError as e:
        raise ConfigError(str(e)) from None
    except yaml.YAMLError:
        value = text
    node = raw
    for key in keys[:-1]:
        child = node.setdefault(key, {})
        if child is None:
            child = node[key] = {}
        if not isinstance(child, dict):
            raise ConfigError(f"override {item!r}: {key!r} is not a section")
        node = child
    node[keys[-1]] = value


# Train keys that `translate train --resume` may change: when to stop, validate, save and log.
# Everything else (model, data, tokenizer, optimisation: train.optimizer and its settings, the
# schedule) shapes the weights and stays as trained; the checkpoint holds that optimizer's state.
RESUME_KEYS = ("max_steps", "max_epochs", "max_minutes", "eval_every", "eval_every_minutes",
               "patience", "keep_last", "step_checkpoints", "save_every", "log_every",
               "threads", "max_bad_losses", "monitor_splits", "engine", "valid_beam",
               "keep_freed_memory", "cuda_graphs", "loss_chunk", "pick")


def resume_overrides(raw: dict, overrides: list[str] | tuple = ()) -> dict:
    """A run's saved recipe (a dict) with `--set` overrides applied; only the train keys a
    resumed run may change (RESUME_KEYS) are accepted."""
    raw = copy.deepcopy(raw)
    for item in overrides:
        key = item.split("=", 1)[0].strip()
        if key not in {f"train.{k}" for k in RESUME_KEYS}:
            raise ConfigError(f"--set {key!r}: a resumed run keeps its recipe; only these train "
                              f"keys may change: {', '.join(RESUME_KEYS)}")
        _apply_override(raw, item)
    return raw
