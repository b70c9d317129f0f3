"""Self-describing checkpoints: weights, recipe, tokenizer, training state; written atomically.

A checkpoint holds only tensors and plain Python values, so it loads with
`torch.load(..., weights_only=True)` and never runs code from the file.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from translate.config import Recipe, recipe_from_dict
from translate.models import build_model
from translate.tokenizer import SPECIAL_IDS, Tokenizer
from translate.utils import first_line

FORMAT_VERSION = 1


class CheckpointError(ValueError):
    """A checkpoint that cannot be read; the message names the file."""


def _bytes_tensor(data: bytes) -> torch.Tensor:
    return torch.frombuffer(bytearray(data), dtype=torch.uint8).clone()


def save_checkpoint(path: Path, model: nn.Module, recipe: Recipe, tokenizer: Tokenizer,
                    step: int, extra: dict[str, Any] | None = None) -> None:
    """Write atomically: a temporary file, flushed and fsynced, then renamed over `path`."""
    payload = {
        "format_version": FORMAT_VERSION,
        "model": model.state_dict(),
        "recipe": recipe.to_dict(),
        "tokenizer": {"src": _bytes_tensor(tokenizer.src_model),
                      "tgt": _bytes_tensor(tokenizer.tgt_model), "special_ids": SPECIAL_IDS},
        "step": step,
        **(extra or {}),
    }
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            torch.save(payload, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def read_checkpoint(path: str | Path) -> dict:
    """The raw checkpoint dict, or a CheckpointError naming the file."""
    path = Path(path)
    if not path.exists():
        raise CheckpointError(f"checkpoint not found: {path}")
    if path.is_dir():
        best = path / "best.pt"
        if not best.is_file():
            raise CheckpointError(f"{path} is a folder without best.pt; name a checkpoint file")
        path = best
    try:
        data = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:
        raise CheckpointError(f"{path}: not a readable checkpoint ({type(e).__name__}: "
                              f"{first_line(e)})") from None
    if not isinstance(data, dict) or "model" not in data or "recipe" not in data:
        raise CheckpointError(f"{path}: not a translate checkpoint (missing model or recipe)")
    return data


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
    tok = data["tokenizer"]
    tokenizer = Tokenizer(tok["src"].numpy().tobytes(), tok["tgt"].numpy().tobytes())
    model = build_model(recipe.model, tokenizer.src_vocab_size, tokenizer.tgt_vocab_size,
                        tokenizer.joint)
    try:
        model.load_state_dict(data["model"])
    except RuntimeError as e:
        raise CheckpointError(f"{path}: weights do not fit the recipe's model: "
                              f"{first_line(e)}") from None
    model.to(device).eval()
    return Loaded(model, recipe, tokenizer, int(data.get("step", 0)), data)
