"""Recipes: frozen dataclasses loaded strictly from YAML, with dotted `--set` overrides.

A recipe has five sections, each a dataclass in `schema.py`:

    data:       where the parallel text comes from and how it is filtered
    tokenizer:  the SentencePiece spec (a path into tokenizers/ or inline keys)
    model:      the architecture (`arch` picks the model and its config from translate.models)
    train:      optimisation, batching, validation and stopping
    decode:     search settings for `translate decode`, `evaluate`, `compare`, the API, the
                server and the test splits' decode when training ends (validation has its own
                `train.valid_beam`)

An unknown key anywhere is an error that names the file and lists the valid keys.

    schema.py   the sections, each field's range in its metadata
    checks.py   a section built from plain values: keys, types, ranges, rules across fields
    loader.py   YAML read safely, overrides applied, recipes saved by older runs upgraded

A run folder's paths (a data folder saved relative to the run) are translate.run_folder's.
"""

from translate.config.checks import ConfigError, checked, decode_options
from translate.config.loader import (RESUME_KEYS, RETIRED_MODEL_KEYS, in_todays_keys,
                                     load_recipe, recipe_from_dict, resume_overrides,
                                     upgrade_recipe)
from translate.config.schema import (SECTIONS, DataConfig, DecodeConfig, Recipe, TokenizerConfig,
                                     TrainConfig, to_plain)

__all__ = ["RESUME_KEYS", "SECTIONS", "ConfigError", "DataConfig", "DecodeConfig", "Recipe",
           "TokenizerConfig", "TrainConfig", "checked", "decode_options", "load_recipe",
           "recipe_from_dict", "resume_overrides", "to_plain", "upgrade_recipe",
           "in_todays_keys", "RETIRED_MODEL_KEYS"]
