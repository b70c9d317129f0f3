"""The exported model folder: what `translate export --format inference` writes for users.

    model.safetensors   the checkpoint's `model` weights (the EMA or averaged ones), each tied
                        tensor stored once; optionally in bf16 or fp16
    spm.model           the SentencePiece model (spm.<src>.model and spm.<tgt>.model when the
                        vocabularies are separate)
    config.json         the format's name and version, the step, the dtype, the files with
                        their SHA-256, and the recipe's model, languages, tokenizer and decode
                        settings

No optimizer, no training state, no machine paths. A folder is checked as a checkpoint is when
read: every file config.json names must be a plain file in the folder (no path out of it) with
the SHA-256 recorded at export, so flipped bytes or swapped tensors are refused, and the
weights' shapes are compared with the recipe's model before it is built (`load_checkpoint`).
`read_model_folder` returns the same dict a .pt checkpoint holds, so `load_checkpoint` (and with
it `decode`, `evaluate`, the API and the server) loads a folder as it loads a checkpoint.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import torch

from translate.tokens import SPECIAL_IDS
from translate.utils import first_line

FORMAT, FORMAT_VERSION = "translate", 2  # 2: config.json holds each file's SHA-256
CONFIG, WEIGHTS = "config.json", "model.safetensors"
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


class ModelFolderError(ValueError):
    """A model folder that cannot be written or read; the message names the folder and file."""


def is_model_folder(path: Path) -> bool:
    """Whether `path` is a folder that holds (or means to hold) an exported model."""
    return path.is_dir() and ((path / CONFIG).exists() or (path / WEIGHTS).exists())


def slim_recipe(recipe: dict) -> dict:
    """The recipe sections a translation needs, without paths or training settings: the model,
    the data's languages and split names, the tokenizer's kind, decoding, and the decoding
    precision and engine (`train.precision`, `train.engine`)."""
    data = {k: v for k, v in recipe["data"].items()
            if k in ("subset", "src_lang", "tgt_lang", "splits", "test_splits")}
    dataset = str(recipe["data"].get("dataset", ""))
    if dataset and not (Path(dataset).expanduser().exists() or dataset.startswith((".", "/", "~"))):
        data["dataset"] = dataset  # a hub name, not a path on this machine
    tokenizer = {k: v for k, v in recipe["tokenizer"].items() if k not in ("spec", "model")}
    train = {k: recipe["train"][k] for k in ("precision", "engine") if k in recipe["train"]}
    return {"data": data, "tokenizer": tokenizer, "model": recipe["model"], "train": train,
            "decode": recipe["decode"]}


def unique_tensors(state: dict[str, torch.Tensor]
                   ) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """The state with each shared tensor (tied embeddings) under its first name only, and the
    other names mapped to it: safetensors stores no tensor twice."""
    kept: dict[tuple, str] = {}
    tensors, aliases = {}, {}
    for name, tensor in state.items():
        key = (tensor.data_ptr(), tensor.dtype, tuple(tensor.shape), tensor.stride())
        if tensor.numel() and key in kept:
            aliases[name] = kept[key]
        else:
            kept[key] = name
            tensors[name] = tensor.contiguous()
    return tensors, aliases


def write_model_folder(data: dict, out: Path, dtype: str = "fp32", source: str = "") -> None:
    """Write a checkpoint's dict (as `read_checkpoint` returns it) into the folder `out`.

    Args:
        data: the checkpoint: `model`, `recipe`, `tokenizer`, `step` (and `averaged`, if any).
        dtype: fp32, bf16 or fp16 for the floating-point weights.
        source: the checkpoint's file name, recorded in config.json.
    """
    from safetensors.torch import save_file

    if dtype not in DTYPES:
        raise ModelFolderError(f"dtype must be one of {sorted(DTYPES)}, got {dtype!r}")
    out.mkdir(parents=True, exist_ok=True)
    tensors, aliases = unique_tensors(data["model"])
    tensors = {k: v.to(DTYPES[dtype]) if v.is_floating_point() else v for k, v in tensors.items()}
    save_file(tensors, out / WEIGHTS, metadata={"format": "pt", "aliases": json.dumps(aliases)})
    recipe = slim_recipe(data["recipe"])
    src, tgt = (data["tokenizer"][side].numpy().tobytes() for side in ("src", "tgt"))
    if src == tgt:
        files = {"src": "spm.model", "tgt": "spm.model"}
    else:  # spm.en.model and spm.de.model (spm.src.model and spm.tgt.model for en -> en)
        names = {side: recipe["data"][f"{side}_lang"] for side in ("src", "tgt")}
        names = names if names["src"] != names["tgt"] else {"src": "src", "tgt": "tgt"}
        files = {side: f"spm.{name}.model" for side, name in names.items()}
    (out / files["src"]).write_bytes(src)
    (out / files["tgt"]).write_bytes(tgt)
    digests = {name: _sha256(out / name) for name in sorted({WEIGHTS, *files.values()})}
    config = {"format": FORMAT, "format_version": FORMAT_VERSION, "step": int(data.get("step", 0)),
              "source": source, "dtype": dtype, "weights": WEIGHTS,
              "tokenizer": {**files, "special_ids": SPECIAL_IDS}, "sha256": digests,
              "recipe": recipe}
    if "averaged" in data:
        config["averaged"] = list(data["averaged"])
    (out / CONFIG).write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n",
                              encoding="utf-8")


def read_model_folder(path: Path) -> dict:
    """The checkpoint dict of an exported folder: model, recipe, tokenizer bytes and step."""
    config = _read_config(path)
    names = config["tokenizer"] if isinstance(config.get("tokenizer"), dict) else {}
    needed = [config.get("weights", WEIGHTS), names.get("src", "spm.model"),
              names.get("tgt", "spm.model")]
    for name in needed:
        _check_inside(path, name)
    missing = sorted({name for name in needed if not (path / name).is_file()})
    if missing:
        raise ModelFolderError(f"{path}: incomplete exported model folder: missing "
                               f"{', '.join(missing)}")
    _check_digests(path, config, needed)
    from safetensors import safe_open

    weights = path / needed[0]
    try:
        with safe_open(str(weights), framework="pt") as f:
            state = {name: f.get_tensor(name) for name in f.keys()}
            aliases = json.loads((f.metadata() or {}).get("aliases", "{}"))
    except Exception as e:  # safetensors raises its own error types
        raise ModelFolderError(f"{weights}: not readable safetensors weights "
                               f"({type(e).__name__}: {first_line(e)})") from None
    for alias, name in aliases.items():
        state[alias] = state[name]
    spm = {side: torch.frombuffer(bytearray((path / needed[i]).read_bytes()), dtype=torch.uint8)
           for i, side in ((1, "src"), (2, "tgt"))}
    return {"format_version": 1, "model": state, "recipe": config["recipe"],
            "tokenizer": {**spm, "special_ids": names.get("special_ids", SPECIAL_IDS)},
            "step": int(config.get("step", 0)), "exported": config}


def _check_inside(path: Path, name) -> None:
    """A file config.json names must be a plain name of a file in the folder itself."""
    if (not isinstance(name, str) or not name or name in (".", "..") or Path(name).name != name
            or "\\" in name):
        raise ModelFolderError(f"{path / CONFIG}: names the file {name!r}; an exported folder's "
                               f"files are plain names inside it")
    file = path / name
    if file.is_symlink() and file.resolve().parent != path.resolve():
        raise ModelFolderError(f"{file} links out of the folder (to {file.resolve()}); an "
                               f"exported folder holds its own files")


def _check_digests(path: Path, config: dict, names: list[str]) -> None:
    """Each file's SHA-256 must be the one recorded at export (format 2 and later)."""
    digests = config.get("sha256")
    if int(config.get("format_version", 1)) < 2 and digests is None:
        return  # exported before digests were recorded
    if not isinstance(digests, dict):
        raise ModelFolderError(f"{path / CONFIG}: no SHA-256 of its files (\"sha256\")")
    for name in sorted(set(names)):
        if digests.get(name) != _sha256(path / name):
            raise ModelFolderError(f"{path / name}: its SHA-256 is not the one recorded at "
                                   f"export; the file was changed or damaged: export it again")


def _sha256(file: Path) -> str:
    with open(file, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def _read_config(path: Path) -> dict:
    """config.json, checked to be ours; other models' folders are named for what they are."""
    file = path / CONFIG
    if not file.is_file():
        raise ModelFolderError(f"{path}: incomplete exported model folder: missing {CONFIG}")
    try:
        config = json.loads(file.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ModelFolderError(f"{file}: not valid JSON ({e})") from None
    if not isinstance(config, dict) or config.get("format") != FORMAT:
        if (path / "model.bin").exists():
            kind = "a CTranslate2 model: load it with ctranslate2.Translator"
        elif isinstance(config, dict) and "model_type" in config:
            kind = (f"a Hugging Face {config['model_type']} model: load it with transformers' "
                    f"AutoTokenizer and AutoModelForSeq2SeqLM")
        else:
            kind = "not a translate model folder (its config.json has no \"format\": \"translate\")"
        raise ModelFolderError(f"{path} holds {kind}")
    if not isinstance(config.get("recipe"), dict):
        raise ModelFolderError(f"{file}: no recipe")
    if int(config.get("format_version", 0)) > FORMAT_VERSION:
        raise ModelFolderError(f"{file}: format version {config['format_version']} is newer "
                               f"than this translate reads ({FORMAT_VERSION}); upgrade translate")
    return config
