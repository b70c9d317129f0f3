"""Self-describing checkpoints: the file format (weights, recipe, tokenizer, training state;
written atomically), and a model built from one.

A checkpoint holds only tensors and plain Python values, so it loads with
`torch.load(..., weights_only=True)` and never runs code from the file. It carries a SHA-256
of its contents (`content_digest`), checked on every load: a damaged file is refused by name
instead of decoding garbage or resuming from it. A file named step_<N>.pt must hold step N
(`step_number`).

Which checkpoint a run resumes from, and whether the disk holds its checkpoints, is the
training's policy (translate.training.checkpoints).
"""

from __future__ import annotations

import hashlib
import io
import os
import pickle
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from translate.config import (Recipe, data_from, data_relative_to, in_todays_keys,
                              recipe_from_dict)
from translate.files import UnsafeFileError, copy_into, open_regular, same_file
from translate.model_folder import ModelFolderError, is_model_folder, read_model_folder
from translate.models import build_model
from translate.tokenizer import Tokenizer
from translate.tokens import BOS, SPECIAL_IDS
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
    """The raw checkpoint dict of a .pt file, a run folder (its best.pt) or an exported model
    folder (translate.model_folder), or a CheckpointError naming the file. Without `verify`
    the tensors are memory-mapped and the checksum is not checked: for a look at the recipe.
    With `check_name`, a step_<N>.pt must hold step N (without: for a look at whose it is).
    Without `follow` (a file found in a run folder, not named), a link is refused, not followed.

    Only a regular file is read: a FIFO, a device or a link loop is refused by name before a
    byte is read, and a run folder's best.pt is not followed if it is a link."""
    path = Path(path)
    if is_model_folder(path):
        try:
            return _todays_recipe(read_model_folder(path))
        except ModelFolderError as e:
            raise CheckpointError(str(e)) from None
    named = follow and not path.is_dir()  # a file the user named may be a link to one
    if path.is_dir():
        best = path / "best.pt"
        if not os.path.lexists(best):
            raise CheckpointError(f"{path} is a folder without best.pt or an exported model "
                                  f"(config.json, model.safetensors); name a checkpoint file")
        path = best
    try:
        with open_regular(path, follow=named, what="checkpoint") as f:
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
    return _todays_recipe(data)


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


@dataclass
class Loaded:
    model: nn.Module
    recipe: Recipe
    tokenizer: Tokenizer
    step: int
    data: dict


def load_checkpoint(path: str | Path, device: torch.device | str = "cpu") -> Loaded:
    """Rebuild model, recipe and tokenizer from a checkpoint (or a run folder's best.pt)."""
    data = read_checkpoint(path)
    recipe = recipe_from_dict(data["recipe"], f"{path} (recipe)", resolved=True)
    recipe = data_from(recipe, Path(path) if Path(path).is_dir() else Path(path).parent)
    tokenizer = checkpoint_tokenizer(data, path)
    state = upgrade_state_dict(data["model"])
    args = (recipe.model, tokenizer.src_vocab_size, tokenizer.tgt_vocab_size, tokenizer.joint)
    check_weights_fit(build_model, args, state, f"{path}: weights do not fit the recipe's "
                      f"{recipe.model.arch} model")
    check_finite(state, path)
    model = build_model(*args)
    try:
        model.load_state_dict(state)
    except RuntimeError as e:  # the first line only says "Error(s) in loading state_dict"
        detail = (str(e).splitlines() + [""])[1].strip()
        detail = detail if len(detail) <= 300 else detail[:300] + "..."
        raise CheckpointError(f"{path}: weights do not fit the recipe's {recipe.model.arch} "
                              f"model ({detail})") from None
    check_outputs_finite(model.eval(), tokenizer, path)
    model.to(device)
    return Loaded(model, recipe, tokenizer, int(data.get("step", 0)), data)


PROBE = "A man rides a bike."  # what `check_outputs_finite` translates the first word of


@torch.no_grad()
def check_outputs_finite(model: nn.Module, tokenizer: Tokenizer, path: str | Path) -> None:
    """Refuse a model whose finite weights still give NaN or infinite scores (weights grown
    huge in a diverging run): it would translate every sentence into the same piece, without a
    word. One decoder step of one short sentence, in fp32."""
    src = torch.tensor(tokenizer.encode_src([PROBE]))  # (1, S)
    logits = model(src, torch.tensor([[BOS]]))  # (1, 1, V)
    if not torch.isfinite(logits).all():
        raise CheckpointError(f"{path}: its weights are finite but its scores are NaN or "
                              f"infinite (weights grown huge as the loss diverged?); use a "
                              f"checkpoint from before that")


def check_weights_fit(build, args: tuple, state: dict, refusal: str) -> None:
    """Refuse `state` when it does not fit the model `build(*args)` makes, before that model
    takes any memory: it is built on the meta device (shapes, no storage) and compared name by
    name, so a small file that declares a huge model is refused at once."""
    with torch.device("meta"):
        expected = build(*args).state_dict()
    missing = [name for name in expected if name not in state]
    unexpected = [name for name in state if name not in expected]
    if missing or unexpected:
        which = (f"missing {missing[0]}" if missing else f"unexpected {unexpected[0]}")
        raise CheckpointError(f"{refusal} ({which}; {len(missing)} missing, {len(unexpected)} "
                              f"unexpected)")
    for name, tensor in expected.items():
        got = state[name]
        if not isinstance(got, torch.Tensor) or got.shape != tensor.shape:
            shape = tuple(got.shape) if isinstance(got, torch.Tensor) else type(got).__name__
            raise CheckpointError(f"{refusal} ({name}: {shape} in the file, "
                                  f"{tuple(tensor.shape)} in the model)")


def check_finite(state: dict, path: str | Path) -> None:
    """Refuse weights that hold NaN or infinite values: such a model translates every sentence
    into nothing or garbage, without a word."""
    for name, tensor in state.items():
        if tensor.is_floating_point() and not torch.isfinite(tensor).all():
            raise CheckpointError(f"{path}: its weight {name} holds NaN or infinite values (the "
                                  f"loss diverged before it was saved?); use a checkpoint from "
                                  f"before that")


def upgrade_state_dict(state: dict) -> dict:
    """Weights saved by older versions, in today's names: attention's fused `qkv_proj` (one
    (3D, D) matrix, Q first) becomes the three projections `q_proj`, `k_proj`, `v_proj`."""
    upgraded = {}
    for key, value in state.items():
        if ".qkv_proj." in key:
            for name, part in zip(("q_proj", "k_proj", "v_proj"), value.chunk(3)):
                upgraded[key.replace(".qkv_proj.", f".{name}.")] = part.clone()
        else:
            upgraded[key] = value
    return upgraded


def _todays_recipe(data: dict) -> dict:
    """A checkpoint's dict with its recipe in today's keys (`config.in_todays_keys`), for
    every reader:
    loading, resuming (whose check compares the saved model section), averaging, export."""
    return {**data, "recipe": in_todays_keys(data["recipe"])}
