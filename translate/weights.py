"""A model's weights (a state dict) checked before a model is built from them, whatever file
they came from (a .pt checkpoint, an exported folder, a resumed run):

    check_weights_fit    every name and shape the model expects, and no other, checked on the
                         meta device before the model takes any memory
    check_finite         no NaN or infinite value in any floating-point weight
    upgrade_state_dict   weights saved by older versions, in today's names

Each check raises the error class its caller passes (a CheckpointError where a checkpoint is
loaded, a ModelFolderError where a folder is written), with a message naming where the weights
came from. Tests: tests/test_loading.py, tests/reliability/test_checkpoint_input.py.
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import nn


def check_weights_fit(build: Callable[..., nn.Module], args: tuple, state: dict, refusal: str,
                      error: type[Exception] = ValueError) -> None:
    """Refuse `state` when it does not fit the model `build(*args)` makes, before that model
    takes any memory: it is built on the meta device (shapes, no storage) and compared name by
    name, so a small file that declares a huge model is refused at once. The message is
    `refusal` and which name or shape is wrong."""
    with torch.device("meta"):
        expected = build(*args).state_dict()
    missing = [name for name in expected if name not in state]
    unexpected = [name for name in state if name not in expected]
    if missing or unexpected:
        which = (f"missing {missing[0]}" if missing else f"unexpected {unexpected[0]}")
        raise error(f"{refusal} ({which}; {len(missing)} missing, {len(unexpected)} "
                    f"unexpected)")
    for name, tensor in expected.items():
        got = state[name]
        if not isinstance(got, torch.Tensor) or got.shape != tensor.shape:
            shape = tuple(got.shape) if isinstance(got, torch.Tensor) else type(got).__name__
            raise error(f"{refusal} ({name}: {shape} in the file, {tuple(tensor.shape)} in the "
                        f"model)")


def check_finite(state: dict[str, torch.Tensor], where: str, advice: str,
                 error: type[Exception] = ValueError) -> None:
    """Refuse weights that hold NaN or infinite values, naming the first such weight: a model
    built from them translates every sentence into nothing or garbage, without a word."""
    for name, tensor in state.items():
        if tensor.is_floating_point() and not torch.isfinite(tensor).all():
            raise error(f"{where}: its weight {name} holds NaN or infinite values; {advice}")


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
