"""Recipes: frozen dataclasses loaded strictly from YAML, with dotted `--set` overrides.

A recipe has five sections, each a dataclass below:

    data:       where the parallel text comes from and how it is filtered
    tokenizer:  the SentencePiece spec (a path into tokenizers/ or inline keys)
    model:      the architecture (`arch` picks the model and its config from translate.models)
    train:      optimisation, batching, validation and stopping
    decode:     search settings for `translate decode`, `evaluate`, `compare`, the API, the
                server and the test splits' decode when training ends (validation has its own
                `train.valid_beam`)

An unknown key anywhere is an error that names the file and lists the valid keys.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import os
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import yaml

from translate import yaml_limits
from translate.models import MODELS


class ConfigError(ValueError):
    """A recipe or override that cannot be used; the message says what and where."""


@dataclass(frozen=True)
class DataConfig:
    # Hub name (e.g. bentrevett/multi30k, wmt14) or a local folder. The environment variable
    # TRANSLATE_DATA or `translate train --data PATH` overrides it (for offline machines).
    dataset: str = "bentrevett/multi30k"
    subset: Optional[str] = None  # hub configuration name, e.g. "de-en" for wmt14
    src_lang: str = "en"
    tgt_lang: str = "de"
    # Our split names -> the dataset's split names. A local folder may name its files by either.
    splits: dict = field(default_factory=lambda: {
        "train": "train", "dev": "validation", "test_2016_flickr": "test"})
    test_splits: tuple = ("test_2016_flickr",)  # scored at the end of `translate train`
    max_len: int = 100  # pieces (EOS included); longer training pairs are dropped
    max_len_ratio: float = 3.0  # drop training pairs whose piece counts differ more than this
    cache_dir: Optional[str] = None  # encoded-corpus cache; default ~/.cache/translate
    num_proc: int = 0  # processes that encode the train split; 0: one per CPU


@dataclass(frozen=True)
class TokenizerConfig:
    # YAML file in tokenizers/; its keys fill the fields below (and a run saves them, not it)
    spec: Optional[str] = None
    model_type: str = "unigram"  # unigram | bpe
    vocab_size: int = 8000
    character_coverage: float = 1.0
    joint: bool = True  # one vocabulary for both languages (allows tying all embeddings)
    max_sentences: int = 2_000_000  # sentences sampled to train SentencePiece
    model: Optional[str] = None  # an existing SentencePiece .model to use (joint), not trained
    # Subword regularization: each time a training pair is batched, it is segmented afresh by
    # sampling (dev and test text keep the one best segmentation). None: off. Unigram: the
    # sampling distribution's smoothing (smaller: more varied; 0.1-0.5 is usual); BPE: the
    # probability of dropping each merge (BPE-dropout; 0.1 is usual).
    sampling_alpha: Optional[float] = None
    sampling_nbest: int = 0  # unigram: draw from the N best segmentations; 0: from all of them


@dataclass(frozen=True)
class TrainConfig:
    seed: int = 1
    max_tokens: int = 4096  # tokens per batch (padded, source or target, whichever is larger)
    # batches' source and target lengths rounded up to a multiple of this: fewer distinct shapes
    # for a GPU to reuse, more padding (benchmarks/padding.py); 1: each batch to its longest
    length_multiple: int = 1
    accum_steps: int = 1  # gradient accumulation: batches per optimizer step
    lr: float = 1e-3  # peak learning rate, reached after `warmup` steps
    warmup: int = 1000  # linear warm-up steps, then the schedule's decay
    # inverse_sqrt: lr * sqrt(warmup / step), no end; linear | cosine: down to 0 when the budget
    # (max_steps, max_minutes or max_epochs, whichever comes first) runs out
    lr_schedule: str = "inverse_sqrt"
    betas: tuple = (0.9, 0.98)
    weight_decay: float = 0.0
    label_smoothing: float = 0.1
    clip_norm: float = 1.0  # 0 disables clipping
    ema_decay: float = 0.0  # exponential moving average of the weights (e.g. 0.999); 0: off
    precision: str = "auto"  # auto | fp32 | bf16 | fp16 (fp16 only on CUDA, with a grad scaler);
    # decode/evaluate also take --precision int8 (CPU)
    max_steps: int = 0  # 0: no step limit
    max_epochs: int = 0  # 0: no epoch limit
    max_minutes: float = 0.0  # wall-clock budget for training; 0: none
    eval_every: int = 500  # steps between validations
    eval_every_minutes: float = 0.0  # also validate when this much wall-clock passed; 0: off
    # Splits scored at every validation to draw learning curves; never used to pick a model.
    monitor_splits: tuple = ()
    valid_beam: int = 1  # beam for validation's dev BLEU (1: greedy, fast); decode.beam for use
    patience: int = 0  # validations without dev-BLEU gain before stopping; 0: never
    keep_last: int = 2  # step checkpoints kept besides best.pt
    save_every: int = 250  # steps between last.pt saves, for --resume (besides step_N.pt); 0: off
    # steps with a NaN/inf loss skipped (with a warning) before stopping; on a GPU they are
    # counted when the next log record, checkpoint or validation reads them
    max_bad_losses: int = 10
    log_every: int = 50
    threads: int = 0  # torch CPU threads; 0: torch's default
    # on the CPU, glibc keeps freed memory for reuse instead of mapping big blocks afresh each
    # step (translate.utils.keep_freed_memory): ~8% faster steps, 0.2-0.55 GB more peak memory
    keep_freed_memory: bool = True
    # torch.compile the training forward (with the plain engine; inductor needs a C++ compiler
    # on the CPU and Triton on a GPU); validation and decoding run the model as it is
    compile: bool = False
    # record the whole training step once per batch shape as a CUDA graph and replay it
    # (translate.training.graphs): one launch a step for a small model on a GPU; on a CPU the
    # step runs as written for the graphs, unrecorded. One process, accum_steps 1, no fp16
    cuda_graphs: bool = False
    # fast: the engine's CPU speed work (translate.fast); plain: the model's modules with
    # PyTorch's fused attention; gpu: plain, with validation's searches reading the device every
    # few steps (translate.gpu);
    # textbook: translate/models/ exactly as written, attention included (an edit there shows);
    # auto: fast on the CPU, plain elsewhere
    engine: str = "auto"
    # project the decoder's states to the vocabulary this many target tokens at a time in the
    # loss, never holding the (B, T, V) logits (translate.gpu.loss): for 32k+ vocabularies on a
    # GPU; 0: the whole batch's logits at once
    loss_chunk: int = 0


@dataclass(frozen=True)
class DecodeConfig:
    beam: int = 5  # 1: greedy
    lenpen: float = 0.6  # GNMT length penalty alpha for beam search; 0: rank by log-probability
    early_exit: bool = True  # beam search: stop once no live hypothesis ended now would win
    max_len_a: float = 1.5  # output limit a * source length + b
    max_len_b: int = 10
    max_tokens: int = 8000  # source tokens per decoding batch
    batch_size: int = 0  # most sentences per decoding batch; 0: no limit


@dataclass(frozen=True)
class Recipe:
    data: DataConfig = field(default_factory=DataConfig)
    tokenizer: TokenizerConfig = field(default_factory=TokenizerConfig)
    model: Any = field(default_factory=lambda: MODELS["transformer"].config())
    train: TrainConfig = field(default_factory=TrainConfig)
    decode: DecodeConfig = field(default_factory=DecodeConfig)

    def to_dict(self) -> dict:
        return to_plain(dataclasses.asdict(self))


SECTIONS = {"data": DataConfig, "tokenizer": TokenizerConfig, "train": TrainConfig,
            "decode": DecodeConfig}


def to_plain(value: Any) -> Any:
    """Tuples to lists, recursively, so the dict round-trips through YAML and JSON."""
    if isinstance(value, dict):
        return {k: to_plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_plain(v) for v in value]
    return value


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
            raise ConfigError(f"{path}: a recipe is a mapping of sections, got {type(raw).__name__}")
        if isinstance(raw.get("data"), dict) and "dataset" in raw["data"]:  # a saved recipe's
            raw["data"]["dataset"] = _dataset_from(raw["data"]["dataset"], path.parent)
    for item in overrides:
        _apply_override(raw, item)
    return recipe_from_dict(raw, where, base_dir=path.parent if path else Path.cwd())


def _read_yaml(path: Path) -> Any:
    """A YAML file's content via the safe loader (plain values only, never Python objects),
    with bounded work (`yaml_limits`)."""
    try:
        if path.stat().st_size > yaml_limits.MAX_BYTES:
            raise ConfigError(f"{path}: {path.stat().st_size:,} bytes, over the limit of "
                              f"{yaml_limits.MAX_BYTES:,} for a recipe")
        return yaml_limits.safe_load(path.read_text(encoding="utf-8"), str(path))
    except yaml_limits.YamlLimitError as e:
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
    if resolved:
        raw = upgrade_recipe(raw)
    sections = {}
    for name, cls in SECTIONS.items():
        values = dict(_section(raw, name, where))
        if name == "tokenizer" and values.get("spec") and not resolved:
            values = _merge_spec(values, where, base_dir)
        sections[name] = _build(cls, values, f"{where}: {name}")
    model_raw = dict(_section(raw, "model", where))
    arch = model_raw.get("arch", "transformer")
    if not isinstance(arch, str) or arch not in MODELS:
        raise ConfigError(f"{where}: model.arch {arch!r} is unknown; valid: {sorted(MODELS)}")
    sections["model"] = _build(MODELS[arch].config, model_raw, f"{where}: model")
    return Recipe(**sections)


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
        [base_dir / spec] if base_dir else []), Path(__file__).resolve().parent.parent / spec]
    found = next((c for c in candidates if c.is_file()), None)
    if found is None:
        raise ConfigError(f"{where}: tokenizer spec not found: {str(spec)!r}")
    spec_values = _read_yaml(found) or {}
    if not isinstance(spec_values, dict):
        raise ConfigError(f"{found}: a tokenizer spec is a mapping")
    _build(TokenizerConfig, spec_values, str(found))  # validates the spec's own keys
    # The spec's keys are now in the recipe: a saved recipe needs no file (spec is dropped).
    return {**spec_values, **values, "spec": None}


def decode_options(cfg: DecodeConfig, **changes: Any) -> DecodeConfig:
    """The recipe's decoding settings with the options a user gave (None: not given), checked
    as a recipe's values are."""
    given = {k: v for k, v in changes.items() if v is not None}
    return checked(dataclasses.replace(cfg, **given), "decode options")


def checked(section: Any, where: str) -> Any:
    """A recipe section (a dataclass) changed after it was read, say by command-line options,
    checked as a recipe's would be."""
    return _build(type(section), dataclasses.asdict(section), where)


def _build(cls: type, values: dict, where: str):
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = set(values) - set(fields)
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {sorted(unknown, key=str)}; valid keys: {sorted(fields)}")
    hints = typing.get_type_hints(cls)
    checked = {k: _check_type(v, hints[k], f"{where}.{k}") for k, v in values.items()}
    for key, value in checked.items():
        _check_range(key, value, f"{where}.{key}")
    built = cls(**checked)
    if isinstance(built, TrainConfig):
        _check_budget(built, where)
    if isinstance(built, TokenizerConfig):
        _check_sampling(built, where)
    if isinstance(built, (DataConfig, TrainConfig)):
        _check_split_names(built, where)
    return built


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


# Sizes and counts that must be at least 1; no number in a recipe may be negative.
AT_LEAST_ONE = {"max_tokens", "accum_steps", "log_every", "vocab_size", "max_sentences", "d_model",
                "heads", "ffn_dim", "encoder_layers", "decoder_layers", "max_positions",
                "embed_dim", "encoder_hidden", "decoder_hidden", "attn_dim", "beam", "max_len",
                "valid_beam", "warmup", "length_multiple"}
# Fractions: [low, high) -- a dropout of 1 zeroes every activation, a decay of 1 never moves.
FRACTIONS = {"dropout": (0, 1), "attn_dropout": (0, 1), "activation_dropout": (0, 1),
             "label_smoothing": (0, 1), "ema_decay": (0, 1)}
# Upper bounds far past any real use that keep a typo from asking for exabytes or forever.
AT_MOST = {"d_model": 65_536, "ffn_dim": 1 << 20, "heads": 1024, "encoder_layers": 1000,
           "decoder_layers": 1000, "embed_dim": 65_536, "encoder_hidden": 65_536,
           "decoder_hidden": 65_536, "attn_dim": 65_536, "max_positions": 1 << 20,
           "vocab_size": 1_000_000, "max_tokens": 1 << 24, "accum_steps": 1 << 16,
           "beam": 1024, "valid_beam": 1024, "max_len": 1 << 20, "max_len_a": 100.0,
           "max_len_b": 1 << 20, "character_coverage": 1.0, "threads": 4096, "num_proc": 4096,
           "sampling_nbest": 1024, "length_multiple": 1024, "loss_chunk": 1 << 24,
           "seed": (1 << 32) - 1}  # every generator seeded from it takes 32 bits


# Words with a fixed set of values.
CHOICES = {"model_type": ("unigram", "bpe", "char", "word"),
           "precision": ("auto", "fp32", "bf16", "fp16"),
           "engine": ("auto", "fast", "plain", "gpu", "textbook"),
           "activation": ("relu", "gelu"), "positions": ("sinusoidal", "learned"),
           "cell": ("gru", "lstm"),
           "lr_schedule": ("inverse_sqrt", "linear", "cosine")}


def _check_range(key: str, value: Any, where: str) -> None:
    if key in CHOICES and isinstance(value, str) and value not in CHOICES[key]:
        hint = (" (int8 is for decoding only: translate decode/evaluate --precision int8)"
                if key == "precision" and value == "int8" else "")
        raise ConfigError(f"{where}: {value!r} is not one of {', '.join(CHOICES[key])}{hint}")
    if key == "betas" and isinstance(value, tuple):
        if len(value) != 2 or not all(isinstance(b, (int, float)) and not isinstance(b, bool)
                                      and 0 <= b < 1 for b in value):
            raise ConfigError(f"{where}: expected two numbers in [0, 1) (Adam's beta1, beta2), "
                              f"got {list(value)!r}")
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return
    if not math.isfinite(value):
        raise ConfigError(f"{where}: expected a finite number, got {value!r}")
    if key in AT_LEAST_ONE and value < 1:
        hint = " (1: no warm-up)" if key == "warmup" else ""
        raise ConfigError(f"{where}: must be at least 1{hint}, got {value!r}")
    if value < 0:
        raise ConfigError(f"{where}: must not be negative, got {value!r}")
    if key == "lr" and value == 0:
        raise ConfigError(f"{where}: must be above 0, got {value!r}")
    if key in FRACTIONS and not FRACTIONS[key][0] <= value < FRACTIONS[key][1]:
        low, high = FRACTIONS[key]
        raise ConfigError(f"{where}: must be in [{low}, {high}), got {value!r}")
    if key in AT_MOST and value > AT_MOST[key]:
        raise ConfigError(f"{where}: must be at most {AT_MOST[key]:,}, got {value!r}")


def _check_type(value: Any, hint: Any, where: str) -> Any:
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
    except yaml_limits.YamlLimitError as e:
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
# Everything else (model, data, tokenizer, optimisation) shapes the weights and stays as trained.
RESUME_KEYS = ("max_steps", "max_epochs", "max_minutes", "eval_every", "eval_every_minutes",
               "patience", "keep_last", "save_every", "log_every", "threads", "max_bad_losses",
               "monitor_splits", "engine", "valid_beam", "keep_freed_memory", "cuda_graphs",
               "loss_chunk")


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


def _relative_path(dataset: Any) -> bool:
    """Whether `dataset` reads as a relative path (a hub name does too, but exists nowhere)."""
    return isinstance(dataset, str) and not (Path(dataset).is_absolute() or dataset.startswith("~"))


def data_relative_to(recipe: Recipe, folder: Path) -> Recipe:
    """The recipe with a local data folder given relative to the working directory rewritten
    relative to `folder` (a run folder): saved so, a run finds its data from anywhere. Hub
    names and absolute paths stay as they are."""
    dataset = recipe.data.dataset
    if not (_relative_path(dataset) and Path(dataset).exists()):
        return recipe
    moved = _readable(os.path.relpath(os.path.abspath(dataset), os.path.abspath(folder)),
                      Path(folder), Path(dataset))
    return dataclasses.replace(recipe, data=dataclasses.replace(recipe.data, dataset=moved))


def _readable(lexical: str, start: Path, target: Path) -> str:
    """`lexical`, the path from `start` to `target` as written (through any symlinks, so
    ../../shared/data stays that), when the file system takes it there too; else the path
    between their real locations (a `..` after a symlinked folder goes elsewhere)."""
    if os.path.realpath(os.path.join(os.path.abspath(start), lexical)) == \
            os.path.realpath(target):
        return lexical
    return os.path.relpath(target.resolve(), start.resolve())


def data_from(recipe: Recipe, folder: Path) -> Recipe:
    """The inverse of `data_relative_to` for a recipe saved in `folder`."""
    dataset = _dataset_from(recipe.data.dataset, folder)
    return dataclasses.replace(recipe, data=dataclasses.replace(recipe.data, dataset=dataset))


def _dataset_from(dataset: Any, folder: Path) -> Any:
    """A relative data path that exists from `folder`, as a path from the working directory;
    anything else (a hub name, an absolute path, a path that exists only from the working
    directory, as in recipes saved before data paths were stored relative) as it is."""
    if not _relative_path(dataset):
        return dataset
    there = Path(folder) / dataset
    if not there.exists():
        return dataset
    return _readable(os.path.relpath(os.path.abspath(there)), Path("."), there)
