"""A run's checkpoints as training sees them: what to resume from, and whether it may."""

from __future__ import annotations

from pathlib import Path

from translate.checkpoint import CheckpointError, checkpoint_tokenizer, newest_checkpoint
from translate.config import ConfigError, Recipe
from translate.tokenizer import Tokenizer


def resume_point(run_dir: Path, recipe: Recipe, clean: bool = True
                 ) -> tuple[Path, dict, Tokenizer]:
    """The run's newest readable checkpoint (path, contents) and its tokenizer, once checked
    against the recipe; with `clean`, half-written files of the crashed process are removed."""
    path, checkpoint = newest_checkpoint(run_dir)
    check_resumable(path, checkpoint, recipe)
    tokenizer = checkpoint_tokenizer(checkpoint)
    if clean:
        for leftover in run_dir.glob(".*.tmp*"):
            leftover.unlink()
    return path, checkpoint, tokenizer


def check_resumable(path: Path, checkpoint: dict, recipe: Recipe) -> None:
    """The checkpoint must come from the recipe's model and tokenizer and have steps left."""
    saved = checkpoint["recipe"]
    for section in ("model", "tokenizer"):
        if saved.get(section) != recipe.to_dict()[section]:
            raise CheckpointError(f"{path}: its {section} differs from the run's recipe.yaml; "
                                  f"a run resumes with the {section} it was trained with")
    max_steps, max_minutes = recipe.train.max_steps, recipe.train.max_minutes
    if max_steps and checkpoint["step"] >= max_steps:
        raise ConfigError(f"{path} is at step {checkpoint['step']}, already train.max_steps "
                          f"({max_steps}); to train on, raise it: --set train.max_steps=N")
    minutes = checkpoint["trainer"]["elapsed"] / 60
    if max_minutes and minutes >= max_minutes:
        raise ConfigError(f"{path} was saved after {minutes:.1f} minutes, already "
                          f"train.max_minutes ({max_minutes:g}); to train on, raise it: "
                          f"--set train.max_minutes=N")
