"""Self-describing checkpoints: the .pt file format (weights, recipe, tokenizer, training state;
written atomically), read and written. A model is built from one in translate.loading, which
reads an exported folder (translate.model_folder) alike.

A checkpoint holds only tensors and plain Python values, so it loads with
`torch.load(..., weights_only=True)` and never runs code from the file. It carries a SHA-256
of its contents (`content_digest`), checked on every load: a damaged file is refused by name
instead of decoding garbage or resuming from it. A file named step_<N>.pt must hold step N
(`step_number`).

Which checkpoint a run resumes from, and whether the disk holds its checkpoints, is the
training's policy (translate.training.checkpoints). Tests: tests/test_checkpoint.py,
tests/reliability/test_checkpoint_input.py.
"""

from __future__ import annotations

import hashlib
import io
import os
import pickle
import re
from pathlib import Path
from typing import Any

import torch
from torch import nn

from translate.config import Recipe, data_relative_to, in_todays_keys
from translate.files import UnsafeFileError, copy_into, open_regular, same_file
from translate.tokenizer import Tokenizer
from translate.tokens import SPECIAL_IDS
from translate.utils import atomic_write, first_line

FORMAT_VERSION = 1


class CheckpointError(ValueError):
    """A checkpoint that cannot be read or written; the message names the file."""


def step_number(path: Path) -> int:
    """12 for step_12.pt; -1 for a name that is not step_<digits 0-9>.pt (step_².pt is not)."""
    match = re.fullmatch(r"step_([0-9]+)\.pt", Path(path).name)
    return int(match[1]) if match else -1


def _bytes_tensor(data: bytes) -> torch.Tensor:
    return torch.frombuffer(bytearray(data), dtype=torch.uint8).clone()


def save_checkpoint(path: Path, model: nn.Module, recipe: Recipe, tokenizer: Tokenizer,
                    step: int, extra: dict[str, Any] | None = None) -> None:
    """Write atomically (`write_checkpoint`): a temporary file, flushed and fsynced, then renamed
    over `path`."""
    src = _bytes_tensor(tokenizer.src_model)
    tgt = src if tokenizer.joint else _bytes_tensor(tokenizer.tgt_model)  # joint: saved once
    payload = {
        "format_version": FORMAT_VERSION,
        "model": model.state_dict(),
        "recipe": data_relative_to(recipe, path.parent).to_dict(),
        "tokenizer": {"src": src, "tgt": tgt, "special_ids": SPECIAL_IDS},
        "step": step,
        **(extra or {}),
    }
    write_checkpoint(path, payload)


def content_digest(payload: dict) -> str:
    """SHA-256 of a checkpoint's contents, its `checksum` entry left out: every tensor's dtype,
    shape and bytes and every plain value, in a fixed order. It depends on what was saved, not
    on how torch laid it out in the file."""
    digest = hashlib.sha256()
    _feed(digest, {k: v for k, v in payload.items() if k != "checksum"})
    return digest.hexdigest()


def _feed(digest, value: Any) -> None:
    if isinstance(value, torch.Tensor):
        flat = value.detach().cpu().contiguous().reshape(-1)
        digest.update(f"T{value.dtype}{tuple(value.shape)}:".encode())
        digest.update(flat.view(torch.uint8).numpy())
    elif isinstance(value, dict):
        digest.update(f"{{{len(value)}:".encode())
        for key in sorted(value, key=repr):
            digest.update(f"{key!r}=".encode())
            _feed(digest, value[key])
    elif isinstance(value, (list, tuple)):
        digest.update(f"[{len(value)}:".encode())
        for item in value:
            _feed(digest, item)
    else:
        digest.update(f"{type(value).__name__}:{value!r};".encode())


def write_checkpoint(path: Path, payload: dict) -> None:
    """torch.save `payload`, with its checksum, to `path` atomically; a failure leaves the old
    file (if any) whole."""
    payload = {**payload, "checksum": content_digest(payload)}
    # Serialized in memory first: torch's zip writer would hide a full disk's OSError.
    buffer = io.BytesIO()
    torch.save(payload, buffer)
    try:
        with atomic_write(path) as f:
            f.write(buffer.getbuffer())
    except OSError as e:
        kept = "is unchanged" if path.exists() else "was not written"
        raise CheckpointError(f"could not write the checkpoint {path} ({e.strerror}); "
                              f"the file {kept}") from None


def copy_checkpoint(source: Path, path: Path) -> None:
    """Write `path` atomically as a file of its own with the checkpoint `source`'s contents: a
    copy-on-write clone where the file system makes one (no space taken), else a copy. Never a
    hard link: a user's write in place to one name (`cp other.pt best.pt`) would change the
    other too."""
    try:
        with atomic_write(path) as f:
            copy_into(source, f, "checkpoint")
    except OSError as e:
        kept = "is unchanged" if path.exists() else "was not written"
        raise CheckpointError(f"could not write the checkpoint {path} ({e.strerror or e}); "
                              f"the file {kept}") from None


def read_checkpoint(path: str | Path, verify: bool = True, check_name: bool = True,
                    follow: bool = True) -> dict:
    """The raw checkpoint dict of a .pt file, its recipe in today's keys, or a CheckpointError
    naming the file. Without `verify` the tensors are memory-mapped and the checksum is not
    checked: for a look at the recipe. With `check_name`, a step_<N>.pt must hold step N
    (without: for a look at whose it is). Without `follow` (a file found in a run folder, not
    named), a link is refused, not followed.

    Only a regular file is read: a FIFO, a device, a folder or a link loop is refused by name
    before a byte is read. (What a path names, a run folder or an export included, is decided
    in translate.locate; translate.loading reads each kind.)"""
    path = Path(path)
    try:
        with open_regular(path, follow=follow, what="checkpoint") as f:
            data = _load(f, path, verify)
    except FileNotFoundError:
        raise CheckpointError(f"checkpoint not found: {path}") from None
    except UnsafeFileError as e:
        raise CheckpointError(str(e)) from None
    except OSError as e:
        raise CheckpointError(f"{path} cannot be read ({e.strerror or e})") from None
    if not isinstance(data, dict) or "model" not in data or "recipe" not in data:
        raise CheckpointError(f"{path}: not a translate checkpoint (missing model or recipe)")
    _check_schema(data, path)
    if verify and "checksum" in data and data["checksum"] != content_digest(data):  # older ones have none
        raise CheckpointError(f"{path}: the file is damaged (its contents do not match the "
                              f"checksum written with them); use another checkpoint")
    if check_name:
        _check_step_name(path, data)
    return todays_recipe(data)


def _load(f, path: Path, verify: bool) -> Any:
    """torch.load the open checkpoint file `f` (at `path`): plain values and tensors only."""
    size = os.fstat(f.fileno()).st_size
    if size == 0:
        raise CheckpointError(f"{path}: the file is empty (was its writing cut short?)")
    if f.read(4) != b"PK\x03\x04":  # torch.save writes a zip archive
        hint = " (it looks like a SentencePiece model)" if path.suffix == ".model" else ""
        raise CheckpointError(f"{path} is not a checkpoint{hint}: give a run folder or a "
                              f".pt file that `translate train` wrote")
    f.seek(0)
    try:  # mmap needs a path: the file was checked to be a regular one just now
        return torch.load(path if not verify else f, map_location="cpu", weights_only=True,
                          mmap=not verify)
    except Exception as e:
        refused = re.search(r"Unsupported global: GLOBAL (\S+)", str(e))
        if isinstance(e, pickle.UnpicklingError) and refused:  # weights_only met a Python object
            raise CheckpointError(f"{path}: refused to load: it holds Python objects, not just "
                                  f"tensors, and loading them could run code (it names "
                                  f"{refused[1]})") from None
        raise CheckpointError(f"{path}: not a readable checkpoint ({type(e).__name__}: "
                              f"{first_line(e)})") from None


def _check_step_name(path: Path, data: dict) -> None:
    """A file named step_<N>.pt must hold step N: one that holds another was replaced or
    written over after the run wrote it, and would be decoded or averaged as step N."""
    number = step_number(path)
    if number < 0 or int(data.get("step", number)) == number:
        return
    twin = next((other for other in ("best.pt", "last.pt") if (path.parent / other).exists()
                 and same_file(path, path.parent / other)), None)
    cause = (f"it is the same file as {twin} (a hard link), so a write to {twin} changed it "
             f"too" if twin else "it was replaced or written over after the run wrote it")
    raise CheckpointError(f"{path}: its name says step {number} but it holds step "
                          f"{data['step']}; {cause}. Use another checkpoint, or rename it "
                          f"step_{data['step']}.pt if that is what it is")


def _check_schema(data: dict, path: Path) -> None:
    """The entries a checkpoint's readers rely on, of the types they expect; checked before
    anything is built from them."""
    def wrong(what: str) -> CheckpointError:
        return CheckpointError(f"{path}: not a translate checkpoint ({what})")

    if not isinstance(data["recipe"], dict):
        raise wrong(f"its recipe is a {type(data['recipe']).__name__}, not a mapping of sections")
    if not all(isinstance(k, str) for k in data["recipe"]):
        raise wrong("its recipe has sections not named by text")
    for name in ("model", "train_model"):
        weights = data.get(name, {})
        if not isinstance(weights, dict) or not all(
                isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in weights.items()):
            raise wrong(f"its {name} is not a mapping of names to tensors")
    tokenizer = data.get("tokenizer")
    if not (isinstance(tokenizer, dict) and all(
            isinstance(tokenizer.get(s), torch.Tensor) and tokenizer[s].dtype == torch.uint8
            for s in ("src", "tgt"))):
        raise wrong("it has no SentencePiece models under tokenizer.src and tokenizer.tgt")
    if not isinstance(data.get("step", 0), int) or isinstance(data.get("step"), bool):
        raise wrong(f"its step is {data['step']!r}, not a whole number")
    version = data.get("format_version", 1)
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise wrong(f"its format_version is {version!r}, not a version number")
    if version > FORMAT_VERSION:
        raise CheckpointError(f"{path}: format version {version} is newer than this translate "
                              f"reads ({FORMAT_VERSION}); upgrade translate")


def checkpoint_tokenizer(data: dict, path: str | Path = "checkpoint") -> Tokenizer:
    """The SentencePiece models stored in a checkpoint's dict."""
    tok = data.get("tokenizer")
    try:
        return Tokenizer(tok["src"].numpy().tobytes(), tok["tgt"].numpy().tobytes())
    except Exception as e:  # sentencepiece raises RuntimeError, OSError or TypeError
        raise CheckpointError(f"{path}: its tokenizer cannot be read ({type(e).__name__}: "
                              f"{first_line(e)})") from None


def todays_recipe(data: dict) -> dict:
    """A checkpoint's dict with its recipe in today's keys (`config.in_todays_keys`), for every
    reader: loading, resuming (whose check compares the saved model section), averaging,
    export."""
    return {**data, "recipe": in_todays_keys(data["recipe"])}
