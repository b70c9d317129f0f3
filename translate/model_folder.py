"""The exported model folder: what `translate export --format inference` writes for users.

    model.safetensors   the checkpoint's `model` weights (the EMA or averaged ones), each tied
                        tensor stored once; optionally in bf16 or fp16
    spm.model           the SentencePiece model (spm.<src>.model and spm.<tgt>.model when the
                        vocabularies are separate)
    config.json         the format's name and version, the step, the dtype, the files with
                        their SHA-256, and the recipe's model, languages, tokenizer and decode
                        settings

No optimizer, no training state, no machine paths. A folder is checked as a checkpoint is when
read, each refusal one line naming the file and field: config.json's every field must have its
type and range (no unknown ones, nesting and size bounded); every file it names must be a plain
name in the folder, opened only as a regular file (no link followed, no FIFO or device waited
on: `translate.files.read_trusted`), of a bounded size (the weights exactly the size their
header declares), with the SHA-256 recorded at export, so flipped bytes or swapped tensors are
refused; aliases must name stored tensors. Each file is opened and read once (a joint
vocabulary's spm.model serves both sides). The weights' fit to the recipe's model and their
finiteness are checked where every model is loaded (translate.loading).

Format versions: 1 recorded no digests, 2 records them. Digests are checked whenever config.json
holds them, and a config without them is read only if it has version 1's exact fields and its
weights carry no later version's mark (model.safetensors records the version it was written
by), so editing a current export down to version 1 turns no check off. (Format-2 folders
exported before the mark lack it; exporting them again adds it.) Unknown versions and fields
are refused.

`read_model_folder` returns the same dict a .pt checkpoint holds, so `translate.loading` (and
with it `decode`, `evaluate`, the API and the server) loads a folder as it loads a checkpoint.
Tests: tests/test_model_folder.py, tests/reliability/test_export_input.py.
"""

from __future__ import annotations

import json
import os
import re
from contextlib import contextmanager
from itertools import accumulate
from pathlib import Path
from typing import BinaryIO, Callable, Iterator, Optional

import torch

from translate.files import UnsafeFileError, read_trusted, sha256_of
from translate.tokens import SPECIAL_IDS
from translate.utils import first_line
from translate.weights import check_finite

FORMAT, FORMAT_VERSION = "translate", 2  # 2: config.json holds each file's SHA-256
CONFIG, WEIGHTS = "config.json", "model.safetensors"
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
# the fields of config.json every format version writes ("averaged" where it was averaged);
# version 2 adds "sha256"
FIELDS = {"format", "format_version", "step", "source", "dtype", "weights", "tokenizer", "recipe"}
MAX_CONFIG_BYTES = 1 << 20  # a config.json is a few kB
MAX_SPM_BYTES = 1 << 28  # a SentencePiece model is a few MB
MAX_HEADER_BYTES = 1 << 24  # a safetensors header is ~100 bytes per tensor
MAX_DEPTH = 32  # config.json nests 4 levels
MAX_STEP = 2**63 - 1


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

    if not isinstance(dtype, str) or dtype not in DTYPES:
        raise ModelFolderError(f"dtype must be one of {sorted(DTYPES)}, got {dtype!r}")
    check_finite(data["model"], "the checkpoint", "export one from before training diverged",
                 ModelFolderError)
    out.mkdir(parents=True, exist_ok=True)
    tensors, aliases = unique_tensors(data["model"])
    tensors = {k: v.to(DTYPES[dtype]) if v.is_floating_point() else v for k, v in tensors.items()}
    check_finite(tensors, f"--dtype {dtype}", "it is past fp16's range (65,504): export in bf16 "
                                              "or fp32", ModelFolderError)
    save_file(tensors, out / WEIGHTS, metadata={"format": "pt", "aliases": json.dumps(aliases),
                                                "translate_format_version": str(FORMAT_VERSION)})
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
    digests = {name: sha256_of(out / name) for name in sorted({WEIGHTS, *files.values()})}
    config = {"format": FORMAT, "format_version": FORMAT_VERSION, "step": int(data.get("step", 0)),
              "source": source, "dtype": dtype, "weights": WEIGHTS,
              "tokenizer": {**files, "special_ids": SPECIAL_IDS}, "sha256": digests,
              "recipe": recipe}
    if "averaged" in data:
        config["averaged"] = list(data["averaged"])
    (out / CONFIG).write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n",
                              encoding="utf-8")


def read_model_folder(path: Path) -> dict:
    """The checkpoint dict of an exported folder: model, recipe, tokenizer bytes and step. Each
    file is opened and read once, after its checks (`translate.files.read_trusted`)."""
    config = _read_config(path)
    names = [config["weights"], config["tokenizer"]["src"], config["tokenizer"]["tgt"]]
    missing = sorted({name for name in names if not os.path.lexists(path / name)})
    if missing:
        raise ModelFolderError(f"{path}: incomplete exported model folder: missing "
                               f"{', '.join(missing)}")
    digests = config.get("sha256")  # checked present and complete by format (_check_config)

    def read(name: str, what: str, at_most: Optional[int] = None,
             check: Optional[Callable[[BinaryIO], None]] = None) -> bytes:
        with _refused_as_folder_error():
            return read_trusted(path / name, what, at_most,
                                digests[name] if digests is not None else None, check)

    weights = path / names[0]
    # Without digests (format 1) the header's declared size is what a cut-short copy fails.
    raw = read(names[0], "weights file",
               check=None if digests is not None else lambda f: _check_declared_size(weights, f))
    state, metadata = _parse_weights(weights, raw)
    del raw
    written = metadata.get("translate_format_version", str(config["format_version"]))
    if written != str(config["format_version"]):
        raise ModelFolderError(f"{path / CONFIG}: format_version {config['format_version']}, "
                               f"but {weights.name} was written by format {written[:20]}: "
                               f"config.json was edited; export the model again")
    _add_aliases(weights, state, metadata)
    spm = {name: torch.frombuffer(bytearray(read(name, "SentencePiece model", MAX_SPM_BYTES)),
                                  dtype=torch.uint8)
           for name in dict.fromkeys(names[1:])}  # a joint vocabulary's one file, read once
    return {"format_version": 1, "model": state, "recipe": config["recipe"],
            "tokenizer": {"src": spm[names[1]], "tgt": spm[names[2]],
                          "special_ids": config["tokenizer"]["special_ids"]},
            "step": config["step"], "exported": config}


@contextmanager
def _refused_as_folder_error() -> Iterator[None]:
    """A file refused by `translate.files` (a link, a FIFO, too large, a digest that is not
    the recorded one) as a ModelFolderError, with what to do about it."""
    try:
        yield
    except UnsafeFileError as e:
        advice = "; export it again" if "SHA-256" in str(e) or "over the limit" in str(e) else ""
        raise ModelFolderError(f"{e}{advice}") from None


def _check_declared_size(file: Path, f: BinaryIO) -> None:
    """A safetensors file is its 8-byte header length, its JSON header and the tensors' bytes
    the header places: the file must be exactly that long (a cut-short copy is not)."""
    size = os.fstat(f.fileno()).st_size
    length = int.from_bytes(f.read(8), "little")
    if size < 8 or length > min(size - 8, MAX_HEADER_BYTES):
        raise ModelFolderError(f"{file}: not safetensors weights (its header length, {length:,} "
                               f"bytes, does not fit its {size:,} bytes); export it again")
    header = _json(f.read(length), f"{file} (header)")
    if not isinstance(header, dict):
        raise ModelFolderError(f"{file}: its header is not a JSON object; export it again")
    ends = [_end(entry) for name, entry in header.items() if name != "__metadata__"]
    declared = 8 + length + max(ends, default=0)
    if size != declared:
        raise ModelFolderError(f"{file}: {size:,} bytes, not the {declared:,} its header "
                               f"declares (was its copy cut short?); export it again")
    f.seek(0)


def _end(entry) -> int:
    """Where a safetensors header entry says its tensor's bytes end (0 if it says nothing)."""
    offsets = entry.get("data_offsets") if isinstance(entry, dict) else None
    valid = isinstance(offsets, list) and len(offsets) == 2 and type(offsets[1]) is int
    return offsets[1] if valid else 0


def _parse_weights(file: Path, raw: bytes) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """The tensors of safetensors bytes and their header's metadata."""
    from safetensors.torch import load

    try:
        state = load(raw)
    except Exception as e:  # safetensors raises its own error types
        raise ModelFolderError(f"{file}: not readable safetensors weights "
                               f"({type(e).__name__}: {first_line(e)})") from None
    length = int.from_bytes(raw[:8], "little")
    metadata = _json(raw[8:8 + length], f"{file} (header)").get("__metadata__", {})
    if not (isinstance(metadata, dict) and all(isinstance(v, str) for v in metadata.values())):
        raise ModelFolderError(f"{file}: its metadata is not a mapping of text; export it again")
    return state, metadata


def _add_aliases(file: Path, state: dict[str, torch.Tensor], metadata: dict[str, str]) -> None:
    """Each tied tensor's other names (the metadata's "aliases": name -> the stored name)."""
    aliases = _json(metadata.get("aliases", "{}"), f"{file} (metadata \"aliases\")")
    if not (isinstance(aliases, dict) and all(isinstance(v, str) for v in aliases.values())):
        raise ModelFolderError(f"{file}: its metadata \"aliases\" is not a mapping of tensor "
                               f"names; export it again")
    for alias, name in aliases.items():
        if alias in state or name not in state:
            why = ("is a stored tensor too" if alias in state
                   else f"names {name[:80]!r}, which the file does not store")
            raise ModelFolderError(f"{file}: the alias {alias[:80]!r} {why}; export it again")
    state.update({alias: state[name] for alias, name in aliases.items()})


def _check_inside(file: Path, field: str, name) -> None:
    """A file config.json names must be a plain name of a file in the folder itself."""
    if (not isinstance(name, str) or not name or name in (".", "..") or Path(name).name != name
            or "\\" in name or "\0" in name):
        raise ModelFolderError(f"{file}: {field} names the file {name!r}; an exported "
                               f"folder's files are plain names inside it")


def _read_config(path: Path) -> dict:
    """config.json, checked to be ours and whole; other models' folders are named for what
    they are."""
    file = path / CONFIG
    if not os.path.lexists(file):
        raise ModelFolderError(f"{path}: incomplete exported model folder: missing {CONFIG}")
    with _refused_as_folder_error():
        config = _json(read_trusted(file, "config.json", MAX_CONFIG_BYTES), str(file))
    if not isinstance(config, dict) or config.get("format") != FORMAT:
        if (path / "model.bin").exists():
            kind = "a CTranslate2 model: load it with ctranslate2.Translator"
        elif isinstance(config, dict) and "model_type" in config:
            kind = (f"a Hugging Face {str(config['model_type'])[:80]} model: load it with "
                    f"transformers' AutoTokenizer and AutoModelForSeq2SeqLM")
        else:
            kind = "not a translate model folder (its config.json has no \"format\": \"translate\")"
        raise ModelFolderError(f"{path} holds {kind}")
    _check_config(file, config)
    return config


def _check_config(file: Path, config: dict) -> None:
    """Every field of config.json, of its type and in its range, as its format version wrote
    them: version 1 without digests, version 2 with a digest for each file.

    A downgrade turns no check off: digests are checked whenever "sha256" is present, and a
    config without them is read only as version 1's exact layout (its fields, no others),
    whose weights file carries no later format's mark (`write_model_folder` records the version
    in model.safetensors too). So a current export whose digests are deleted and version set
    to 1 is refused.
    """
    version = config.get("format_version")
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise ModelFolderError(f"{file}: format_version must be a whole number from 1 to "
                               f"{FORMAT_VERSION}, got {_short(version)}; export the model again")
    if version > FORMAT_VERSION:
        raise ModelFolderError(f"{file}: format version {_short(version)} is newer than this "
                               f"translate reads ({FORMAT_VERSION}); upgrade translate")
    fields = FIELDS | {"sha256"} if version >= 2 else FIELDS
    wrong = sorted(set(config) - fields - {"averaged"}) or sorted(fields - set(config))
    if wrong == ["sha256"]:
        raise ModelFolderError(f"{file}: " + (
            f"no SHA-256 of its files (\"sha256\"), which format_version {version} records"
            if version >= 2 else "holds \"sha256\", which format_version 1 did not record: was "
            "its version edited?") + "; export the model again")
    if wrong:
        what = "unknown" if wrong[0] in config else "missing"
        raise ModelFolderError(f"{file}: {what} field {wrong[0][:80]!r} for format_version "
                               f"{version}; export the model again")
    step = config["step"]
    if isinstance(step, bool) or not isinstance(step, int) or not 0 <= step <= MAX_STEP:
        raise ModelFolderError(f"{file}: step must be a whole number from 0 to {MAX_STEP}, got "
                               f"{_short(step)}")
    if not (isinstance(config["dtype"], str) and config["dtype"] in DTYPES):
        raise ModelFolderError(f"{file}: dtype is {_short(config['dtype'])}, not "
                               f"{' or '.join(DTYPES)}")
    if not isinstance(config["source"], str):
        raise ModelFolderError(f"{file}: source is {_short(config['source'])}, not text")
    averaged = config.get("averaged", [])
    if not (isinstance(averaged, list) and all(isinstance(name, str) for name in averaged)):
        raise ModelFolderError(f"{file}: averaged is {_short(averaged)}, not a list of "
                               f"checkpoint names")
    if not isinstance(config["recipe"], dict):
        raise ModelFolderError(f"{file}: recipe is {_short(config['recipe'])}, not a mapping of "
                               f"sections")
    tokenizer = config["tokenizer"]
    if not (isinstance(tokenizer, dict) and set(tokenizer) == {"src", "tgt", "special_ids"}):
        raise ModelFolderError(f"{file}: tokenizer must map src, tgt and special_ids, got "
                               f"{_short(tokenizer)}")
    if tokenizer["special_ids"] != SPECIAL_IDS:
        raise ModelFolderError(f"{file}: tokenizer.special_ids is "
                               f"{_short(tokenizer['special_ids'])}, not {SPECIAL_IDS}")
    names = {"weights": config["weights"], "tokenizer.src": tokenizer["src"],
             "tokenizer.tgt": tokenizer["tgt"]}
    for field, name in names.items():
        _check_inside(file, field, name)
    if version >= 2:
        _check_digests(file, config["sha256"], set(names.values()))


def _check_digests(file: Path, digests, names: set[str]) -> None:
    """"sha256" maps each file the folder holds, and only those, to a SHA-256 in hex."""
    if not isinstance(digests, dict):
        raise ModelFolderError(f"{file}: no SHA-256 of its files (\"sha256\" is "
                               f"{_short(digests)}, not a mapping of file names)")
    wrong = sorted(names ^ set(digests))
    if wrong:
        raise ModelFolderError(f"{file}: sha256 {'lacks' if wrong[0] in names else 'names'} "
                               f"{wrong[0][:80]!r}: its keys must be the folder's files "
                               f"({', '.join(sorted(names))}); export the model again")
    for name, digest in digests.items():
        if not (isinstance(digest, str) and len(digest) == 64
                and all(c in "0123456789abcdef" for c in digest)):
            raise ModelFolderError(f"{file}: sha256.{name} is {_short(digest)}, not a SHA-256 "
                                   f"in hex; export the model again")


def _json(text: bytes | str, where: str):
    """Parsed JSON whose reading takes bounded work: nesting past MAX_DEPTH levels is refused
    before parsing, and so are a key given twice and a number of thousands of digits."""
    try:
        text = text.decode("utf-8") if isinstance(text, bytes) else text
    except UnicodeDecodeError as e:
        raise ModelFolderError(f"{where}: not UTF-8 ({e.reason} at byte {e.start})") from None
    brackets = re.sub(r'"(?:[^"\\]|\\.)*"|[^][{}]', "", text)  # strings out, then all else
    if max(accumulate(1 if c in "[{" else -1 for c in brackets), default=0) > MAX_DEPTH:
        raise ModelFolderError(f"{where}: nested deeper than {MAX_DEPTH} levels; is it the file "
                               f"export wrote?")
    try:
        return json.loads(text, object_pairs_hook=_unique_keys)
    except ValueError as e:  # JSONDecodeError, a key twice, an integer of 4,300+ digits
        raise ModelFolderError(f"{where}: not valid JSON ({first_line(e)[:200]})") from None


def _unique_keys(pairs: list[tuple[str, object]]) -> dict:
    keys = [key for key, _ in pairs]
    if len(set(keys)) != len(keys):
        twice = next(key for key in keys if keys.count(key) > 1)
        raise ValueError(f"the key {twice[:80]!r} is given twice")
    return dict(pairs)


def _short(value) -> str:
    """`value` for a message: its repr, cut at 60 characters."""
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:57]}..."
