"""A recipe section's checks: its keys, each value's type and range, and the rules across fields.

Tests: tests/test_config.py, tests/reliability/test_hostile_input.py.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from typing import Any, Mapping

import torch

from translate.config.schema import DataConfig, DecodeConfig, TokenizerConfig, TrainConfig


class ConfigError(ValueError):
    """A recipe or override that cannot be used; the message says what and where."""


def build_section(cls: type, values: dict, where: str) -> Any:
    """The dataclass `cls` from `values`, every key known, every value of its field's type and
    in its field's range (translate.config.schema says how a field states its range)."""
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = set(values) - set(fields)
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {sorted(unknown, key=str)}; "
                          f"valid keys: {sorted(fields)}")
    hints = typing.get_type_hints(cls)
    typed = {k: _check_type(v, hints[k], f"{where}.{k}") for k, v in values.items()}
    for key, value in typed.items():
        _check_range(fields[key].metadata, value, f"{where}.{key}")
    built = cls(**typed)
    if isinstance(built, TrainConfig):
        _check_budget(built, where)
        _check_optimizer(built, where)
    if isinstance(built, TokenizerConfig):
        _check_sampling(built, where)
    if isinstance(built, (DataConfig, TrainConfig)):
        _check_split_names(built, where)
    if getattr(built, "cross_query_norm", "head") == "width" and not built.qk_norm:
        raise ConfigError(f"{where}.cross_query_norm: width says how qk_norm normalises "
                          f"cross-attention's queries; set model.qk_norm: true, or leave it head")
    return built


def checked(section: Any, where: str) -> Any:
    """A recipe section (a dataclass) changed after it was read, say by command-line options,
    checked as a recipe's would be."""
    return build_section(type(section), dataclasses.asdict(section), where)


def decode_options(cfg: DecodeConfig, **changes: Any) -> DecodeConfig:
    """The recipe's decoding settings with the options a user gave (None: not given), checked
    as a recipe's values are."""
    given = {k: v for k, v in changes.items() if v is not None}
    return checked(dataclasses.replace(cfg, **given), "decode options")


def _check_split_names(cfg: Any, where: str) -> None:
    """Split names are text: data.splits maps ours to the dataset's, and the lists name ours."""
    named = {f"splits.{k}": v for k, v in getattr(cfg, "splits", {}).items()}
    for field in ("test_splits", "monitor_splits"):
        named.update({f"{field}[{i}]": v for i, v in enumerate(getattr(cfg, field, ()))})
    for key, name in named.items():
        if not isinstance(name, str) or not name.strip():
            raise ConfigError(f"{where}.{key}: expected a split name, got {name!r}")
    for key in getattr(cfg, "splits", {}):
        if not isinstance(key, str) or not key.strip():
            raise ConfigError(f"{where}.splits: expected split names as keys, got {key!r}")


def _check_budget(cfg: TrainConfig, where: str) -> None:
    """A schedule that decays to zero as the budget runs out needs a budget."""
    if cfg.lr_schedule != "inverse_sqrt" and not (cfg.max_steps or cfg.max_minutes
                                                  or cfg.max_epochs):
        raise ConfigError(f"{where}.lr_schedule: {cfg.lr_schedule} decays to zero as the "
                          "budget runs out: set train.max_steps, max_minutes or max_epochs")


def _check_optimizer(cfg: TrainConfig, where: str) -> None:
    """Muon is PyTorch's own (torch.optim.Muon, from torch 2.9 on)."""
    if cfg.optimizer == "muon" and not hasattr(torch.optim, "Muon"):
        raise ConfigError(f"{where}.optimizer: muon needs torch.optim.Muon, which torch "
                          f"{torch.__version__} lacks; upgrade torch (2.9 or later)")


def _check_sampling(cfg: TokenizerConfig, where: str) -> None:
    """Subword sampling exists for unigram and BPE models, each with its own meaning of alpha."""
    if cfg.sampling_alpha is None:
        return
    if cfg.model_type not in ("unigram", "bpe"):
        raise ConfigError(f"{where}.sampling_alpha: {cfg.model_type} models have one "
                          "segmentation only; sampling needs a unigram or bpe model")
    if cfg.model_type == "bpe" and cfg.sampling_alpha >= 1:
        raise ConfigError(f"{where}.sampling_alpha: for a bpe model it is the probability of "
                          f"dropping a merge, in [0, 1), got {cfg.sampling_alpha!r}")
    if cfg.model_type == "bpe" and cfg.sampling_nbest:
        raise ConfigError(f"{where}.sampling_nbest: only unigram models draw from an n-best "
                          "list; leave it 0 for bpe")
    if cfg.sampling_nbest == 1:
        raise ConfigError(f"{where}.sampling_nbest: 1 draws the one best segmentation every "
                          "time; give 0 (all segmentations) or 2 and more")


def _check_range(limits: Mapping[str, Any], value: Any, where: str) -> None:
    """`value` within its field's `limits` (the field's metadata); every number finite and not
    negative."""
    choices = limits.get("choices")
    if choices and isinstance(value, str) and value not in choices:
        note = limits.get("why_not", {}).get(value)
        hint = f" ({note})" if note else ""
        raise ConfigError(f"{where}: {value!r} is not one of {', '.join(choices)}{hint}")
    if "pair" in limits and isinstance(value, tuple):
        below = limits["below"]
        if len(value) != 2 or not all(isinstance(b, (int, float)) and not isinstance(b, bool)
                                      and 0 <= b < below for b in value):
            raise ConfigError(f"{where}: expected two numbers in [0, {below}) "
                              f"({limits['pair']}), got {list(value)!r}")
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return
    if not math.isfinite(value):
        raise ConfigError(f"{where}: expected a finite number, got {value!r}")
    if "min" in limits and value < limits["min"]:
        hint = f" ({limits['hint']})" if "hint" in limits else ""
        raise ConfigError(f"{where}: must be at least {limits['min']}{hint}, got {value!r}")
    if value < 0:
        raise ConfigError(f"{where}: must not be negative, got {value!r}")
    if "above" in limits and value <= limits["above"]:
        raise ConfigError(f"{where}: must be above {limits['above']}, got {value!r}")
    if "below" in limits and value >= limits["below"]:
        raise ConfigError(f"{where}: must be in [0, {limits['below']}), got {value!r}")
    if "max" in limits and value > limits["max"]:
        raise ConfigError(f"{where}: must be at most {limits['max']:,}, got {value!r}")


def _check_type(value: Any, hint: Any, where: str) -> Any:
    """`value` as the field's type `hint` takes it (an int for a float, a list for a tuple);
    a ConfigError where it is not of that type."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(hint)
        if value is None and type(None) in args:
            return None
        hint = next(a for a in args if a is not type(None))
        origin = typing.get_origin(hint)
    if hint is Any:
        return value
    if hint is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if hint is float and isinstance(value, str):  # YAML 1.1 reads 1e-3 (no dot) as a string
        try:
            return float(value)
        except ValueError:
            raise ConfigError(f"{where}: expected a number, got {value!r}") from None
    if hint is tuple or origin is tuple:
        if isinstance(value, (list, tuple)):
            return tuple(value)
        if isinstance(value, str):  # a single split name, say
            return (value,)
        raise ConfigError(f"{where}: expected a list, got {value!r}")
    expected = origin or hint
    if expected is bool and not isinstance(value, bool):
        raise ConfigError(f"{where}: expected true/false, got {value!r}")
    if expected is int and (isinstance(value, bool) or not isinstance(value, int)):
        raise ConfigError(f"{where}: expected an integer, got {value!r}")
    if not isinstance(value, expected):
        raise ConfigError(f"{where}: expected {expected.__name__}, got {value!r}")
    return value
