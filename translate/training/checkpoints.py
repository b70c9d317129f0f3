"""A run's checkpoints as training sees them: what to resume from, and whether it may."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from translate.checkpoint import (CheckpointError, checkpoint_tokenizer, newest_checkpoint,
                                  read_checkpoint, step_number)
from translate.config import ConfigError, Recipe, recipe_from_dict, resume_overrides
from translate.run_folder import check_own_checkpoint, data_from, run_id
from translate.tokenizer import Tokenizer


def load_run_recipe(run_dir: Path, overrides: list[str] | tuple = (),
                    dataset: str | None = None) -> Recipe:
    """The recipe a run trains with, read from its newest checkpoint (recipe.yaml is a copy for
    people to read), with resume-safe `overrides` (`config.RESUME_KEYS`) applied and `dataset`,
    if given, as its data (the same data in another place). Only the checkpoint's pickled part
    is read: `resume_point` reads and verifies the whole file."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise ConfigError(f"run folder not found: {run_dir}")
    path, checkpoint = newest_checkpoint(run_dir, verify=False)
    check_own_checkpoint(path, checkpoint, run_id(run_dir))
    raw = resume_overrides(checkpoint["recipe"], overrides)
    recipe = data_from(recipe_from_dict(raw, f"{path} (recipe)", resolved=True), run_dir)
    return replace(recipe, data=replace(recipe.data, dataset=dataset)) if dataset else recipe


def resume_point(run_dir: Path, recipe: Recipe, clean: bool = True
                 ) -> tuple[Path, dict, Tokenizer]:
    """The run's newest readable checkpoint (path, contents) and its tokenizer, once checked
    against the recipe; with `clean`, half-written files of the crashed process are removed."""
    path, checkpoint = newest_checkpoint(run_dir)
    check_all_own(run_dir)
    check_resumable(path, checkpoint, recipe)
    tokenizer = checkpoint_tokenizer(checkpoint)
    if clean:
        for leftover in run_dir.glob(".*.tmp*"):
            leftover.unlink()
    return path, checkpoint, tokenizer


def check_resumable(path: Path, checkpoint: dict, recipe: Recipe) -> None:
    """The checkpoint (one `newest_checkpoint` found, so it holds a training state) must come
    from the recipe's model and tokenizer and have steps left."""
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


def check_all_own(run_dir: Path) -> None:
    """Every checkpoint in the folder must be the run's own: resuming beside another run's file
    would let `train.keep_last` delete or mix it. Only the checkpoints' small pickled part is
    read (`read_checkpoint` without `verify`)."""
    own = run_id(run_dir)
    if own is None:  # a run from before run.json: nothing to check against
        return
    names = ("last.pt", "best.pt", *(p.name for p in run_dir.glob("step_*.pt")
                                     if step_number(p) >= 0))
    for path in (run_dir / n for n in names):
        if not path.is_file():
            continue
        try:
            data = read_checkpoint(path, verify=False)
        except CheckpointError:  # unreadable: newest_checkpoint skips it with a warning
            continue
        check_own_checkpoint(path, data, own)


def drop_old_steps(run_dir: Path, keep_last: int, step: int) -> None:
    """Delete the run's step_N.pt files but the newest `keep_last` of those up to `step` (a
    resumed run leaves alone any a crash left beyond its checkpoint)."""
    steps = sorted((p for p in run_dir.glob("step_*.pt") if 0 <= step_number(p) <= step),
                   key=step_number)
    for path in steps[:max(len(steps) - keep_last, 0)]:
        path.unlink(missing_ok=True)
