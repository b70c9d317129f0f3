"""Recipes: frozen dataclasses loaded strictly from YAML, with dotted `--set` overrides.

A recipe has five sections, each a dataclass in `schema.py`:

    data:       where the parallel text comes from and how it is filtered
    tokenizer:  the SentencePiece spec (a path into tokenizers/ or inline keys)
    model:      the architecture (`arch` picks its config in models.py)
    train:      optimisation, batching, validation and stopping
    decode:     search settings for `translate decode`, `evaluate`, `compare`, the API, the
                server and the test splits' decode when training ends (validation has its own
                `train.valid_beam`)

An unknown key anywhere is an error that names the file and lists the valid keys.

    schema.py   the sections, each field's range in its metadata
    models.py   the model section: one config per architecture, with its parameter count
    names.py    the words for the runtime's choices (engines, precisions, activations, norms),
                which the runtime modules import from here: the recipe imports none of them
    checks.py   a section built from plain values: keys, types, ranges, rules across fields
    loader.py   YAML read safely, overrides applied, recipes saved by older runs upgraded, a
                saved recipe's data folder written relative to where it is saved and read back
"""

from translate.config.checks import ConfigError, checked, decode_options
from translate.config.loader import (ADDED_MODEL_KEYS, RESUME_KEYS, RETIRED_MODEL_KEYS,
                                     data_from, data_relative_to, in_todays_keys, load_recipe,
                                     recipe_from_dict, resume_overrides, upgrade_recipe,
                                     without_retired_keys)
from translate.config.schema import (SECTIONS, DataConfig, DecodeConfig, Recipe, TokenizerConfig,
                                     TrainConfig, to_plain)

__all__ = ["RESUME_KEYS", "SECTIONS", "ConfigError", "DataConfig", "DecodeConfig", "Recipe",
           "TokenizerConfig", "TrainConfig", "checked", "data_from", "data_relative_to",
           "decode_options", "load_recipe",
           "recipe_from_dict", "resume_overrides", "to_plain", "upgrade_recipe",
           "without_retired_keys", "in_todays_keys", "ADDED_MODEL_KEYS",
           "RETIRED_MODEL_KEYS"]
