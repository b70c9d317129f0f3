"""Loading a model: a path the user names, to a model built and checked, in one room.

    load_checkpoint   a run folder (its best.pt), a .pt checkpoint or an exported model folder,
                      or the Location `translate.locate.locate` made of one, to a `Loaded`
    Loaded            the model (eval mode, on its device), its recipe, tokenizer and step, and
                      the dict it was built from

The path is decided once (`locate`), and each format below reads its files: the .pt format
(`translate.checkpoint.read_checkpoint`: its schema and checksum) and the exported folder
(`translate.model_folder.read_model_folder`: its config's fields and each file's SHA-256), each
file opened and read once. Then, once for every kind, here: the recipe is read (its data path
relative to the folder it was saved in), the weights are upgraded to today's names, checked to
fit the recipe's model (on the meta device, before any memory is taken) and to be finite, the
model is built and loaded, and one decoder step checks that its scores are finite.

`Ready.load` (decode, evaluate, the API, the server), training's pick and `translate export`
load through here. Tests: tests/test_loading.py (each decision made once, counted), and the
refusals in tests/reliability/test_checkpoint_input.py and test_export_input.py.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from translate.checkpoint import (CheckpointError, checkpoint_tokenizer, read_checkpoint,
                                  todays_recipe)
from translate.config import Recipe, data_from, recipe_from_dict
from translate.locate import CHECKPOINT, EXPORT, Location, locate
from translate.model_folder import ModelFolderError, read_model_folder
from translate.models import build_model
from translate.tokenizer import Tokenizer
from translate.tokens import BOS
from translate.weights import check_finite, check_weights_fit, upgrade_state_dict


@dataclass
class Loaded:
    model: nn.Module
    recipe: Recipe
    tokenizer: Tokenizer
    step: int
    data: dict


def load_checkpoint(source: str | Path | Location, device: torch.device | str = "cpu"
                    ) -> Loaded:
    """Rebuild model, recipe and tokenizer from what `source` names (a path, or its Location
    when the caller located it already), on `device`; a CheckpointError naming the file
    otherwise."""
    location = source if isinstance(source, Location) else locate(source)
    data = read_source(location)
    where = _weights_file(location, data)
    recipe = recipe_from_dict(data["recipe"], f"{location.path} (recipe)", resolved=True)
    recipe = data_from(recipe, location.recipe_base)
    tokenizer = checkpoint_tokenizer(data, location.path)
    state = upgrade_state_dict(data["model"])
    args = (recipe.model, tokenizer.src_vocab_size, tokenizer.tgt_vocab_size, tokenizer.joint)
    refusal = f"{location.path}: weights do not fit the recipe's {recipe.model.arch} model"
    check_weights_fit(build_model, args, state, refusal, CheckpointError)
    advice = ("the file is damaged, or training diverged before the checkpoint it was "
              "exported from: export a good one" if location.kind == EXPORT else
              "the loss diverged before it was saved? Use a checkpoint from before that")
    check_finite(state, where, advice, CheckpointError)
    model = build_model(*args)
    try:
        model.load_state_dict(state)
    except RuntimeError as e:  # the first line only says "Error(s) in loading state_dict"
        detail = (str(e).splitlines() + [""])[1].strip()
        detail = detail if len(detail) <= 300 else detail[:300] + "..."
        raise CheckpointError(f"{refusal} ({detail})") from None
    check_outputs_finite(model.eval(), tokenizer, location.path)
    model.to(device)
    return Loaded(model, recipe, tokenizer, int(data.get("step", 0)), data)


def read_source(location: Location) -> dict:
    """The checkpoint dict of what `location` names, read by its format: a .pt the user named
    (a link to one followed), a run folder's best.pt (a link there refused), or an exported
    folder."""
    if location.kind == EXPORT:
        try:
            return todays_recipe(read_model_folder(location.path))
        except ModelFolderError as e:
            raise CheckpointError(str(e)) from None
    file = location.checkpoint
    if location.kind != CHECKPOINT and not os.path.lexists(file):
        raise CheckpointError(f"{location.path} is a folder without best.pt or an exported "
                              f"model (config.json, model.safetensors); name a checkpoint file")
    return read_checkpoint(file, follow=location.kind == CHECKPOINT)


def _weights_file(location: Location, data: dict) -> Path:
    """The file the weights were read from, for a message."""
    if location.kind == EXPORT:
        return location.path / data["exported"]["weights"]
    return location.checkpoint


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
