"""A run's checkpoints as training sees them: whether the disk holds them, which one to resume
from and whether it may, and which step checkpoints to drop.

    check_writable, check_free_space   before any work: the run folder takes files, and the
                                       disk two checkpoints
    newest_checkpoint                  the newest checkpoint that reads and holds a training
                                       state (`missing_state`: RESUME_STATE, and TrainState's
                                       counters under "trainer"), in today's layout
                                       (`upgrade_training_state`)
    load_run_recipe, resume_point      the recipe a resumed run trains with; the checkpoint
                                       it resumes from, checked against it
    drop_old_steps                     train.keep_last

Tests: tests/training/test_checkpoints.py (the resume policy),
tests/reliability/test_checkpoint_input.py.
"""

from __future__ import annotations

import logging
import math
import shutil
from dataclasses import fields, replace
from pathlib import Path

import torch
from torch import nn

from translate.checkpoint import (CheckpointError, checkpoint_tokenizer, read_checkpoint,
                                  step_number)
from translate.config import ConfigError, Recipe, data_from, recipe_from_dict, resume_overrides
from translate.run_folder import (RUN_FILE, check_own_checkpoint, check_plain_files, run_id,
                                  write_run_id)
from translate.tokenizer import Tokenizer
from translate.training.state import TrainState
from translate.weights import check_finite

log = logging.getLogger(__name__)

# What a checkpoint needs to resume from (Trainer.save writes them all): these entries (and
# "muon" with train.optimizer muon), and under "trainer" every counter of TrainState but the
# step, saved beside it (`TrainState.to_checkpoint`).
RESUME_STATE = ("step", "optimizer", "rng", "trainer")
TRAINER_STATE = tuple(f.name for f in fields(TrainState) if f.name != "step")


def check_writable(run_dir: Path) -> None:
    """Fail before any work if the run folder cannot be written."""
    probe = run_dir / ".write_probe"
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        probe.write_bytes(b"\0" * 1024)
        probe.unlink()
    except OSError as e:
        raise OSError(f"cannot write to the run folder {run_dir}: {e.strerror}") from None


def checkpoint_bytes(model: nn.Module, with_ema: bool) -> int:
    """About the size of one checkpoint: the weights, Adam's two moments and the EMA."""
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    return weights * (4 if with_ema else 3)


def check_free_space(run_dir: Path, checkpoint_size: int) -> None:
    """Fail before training if the disk cannot hold two checkpoints (one being replaced)."""
    free = shutil.disk_usage(run_dir).free
    if free < 2 * checkpoint_size:
        raise OSError(f"only {free / 2**20:.1f} MiB free for the run folder {run_dir}; its "
                      f"checkpoints need about {2 * checkpoint_size / 2**20:.1f} MiB")


def newest_checkpoint(run_dir: Path, verify: bool = True) -> tuple[Path, dict]:
    """The run's newest checkpoint that reads: last.pt or step_<N>.pt, highest step first, then
    best.pt; each unreadable one is skipped with a warning naming the file. Without `verify`
    (`read_checkpoint`), a damaged file whose pickled part still reads is taken."""
    last = run_dir / "last.pt"
    last_data = _resumable(last, verify) if last.exists() else None
    newer_than = int(last_data["step"]) if last_data else -1
    steps = sorted((p for p in run_dir.glob("step_*.pt") if step_number(p) > newer_than),
                   key=step_number, reverse=True)
    for path in steps:
        if (data := _resumable(path, verify)) is not None:
            return path, data
    if last_data is not None:
        return last, last_data
    best = run_dir / "best.pt"
    if best.exists() and (data := _resumable(best, verify)) is not None:
        return best, data
    raise CheckpointError(f"no readable checkpoint to resume from in {run_dir} (looked for "
                          f"last.pt, step_*.pt and best.pt; those written with "
                          f"train.step_checkpoints: weights hold the weights alone)")


def _resumable(path: Path, verify: bool) -> dict | None:
    """The checkpoint's dict when it can be resumed from, else None after a warning naming it."""
    try:
        data = read_checkpoint(path, verify, follow=False)
    except CheckpointError as e:
        log.warning("skipping %s", e)
        return None
    if data.get("weights_only") is True:  # train.step_checkpoints: weights, as intended
        return None
    data = upgrade_training_state(data)
    if (missing := missing_state(data)) is not None:
        log.warning("skipping %s: it holds no %s to resume from", path, missing)
        return None
    return data


def missing_state(data: dict) -> str | None:
    """The first part of a training state the checkpoint lacks (None: it can be resumed from);
    a checkpoint for decoding (an average, an export's) has none."""
    train = data["recipe"].get("train")
    muon = isinstance(train, dict) and train.get("optimizer") == "muon"
    missing = [key for key in (*RESUME_STATE, *(("muon",) if muon else ())) if key not in data]
    if missing:
        return missing[0]
    if not isinstance(data["trainer"], dict):
        return "trainer"
    return next((f"trainer.{key}" for key in TRAINER_STATE if key not in data["trainer"]), None)


def upgrade_training_state(data: dict) -> dict:
    """A checkpoint's training state in today's layout.

    Checkpoints written while torch's LambdaLR scheduled the learning rate hold its state
    ("scheduler", and "muon_scheduler" with Muon) instead of the trainer's warmup_end. Of that
    state a resume needs one value: the budget's fraction used when warm-up ended, the
    schedule's saved "decay_from" (None where the schedule was a plain function, which saved
    none: inverse_sqrt alone, before train.lr_schedule). It becomes trainer.warmup_end, and the
    scheduler entries go. Both layouts hold the next step's learning rates in the optimizers'
    parameter groups; the "initial_lr" LambdaLR added to each (the peak, which the recipe
    holds) goes too. A "scheduler" entry that is not LambdaLR's state is left as it is: the
    checkpoint then holds no trainer.warmup_end, and resuming skips it, saying so.
    """
    trainer = data.get("trainer")
    if "scheduler" not in data or not isinstance(trainer, dict) or "warmup_end" in trainer:
        return data
    saved = data["scheduler"]
    schedules = saved.get("lr_lambdas") if isinstance(saved, dict) else None
    if not (isinstance(schedules, list) and schedules and
            (schedules[0] is None or isinstance(schedules[0], dict))):
        return data
    warmup_end = schedules[0].get("decay_from") if schedules[0] is not None else None
    upgraded = {key: value for key, value in data.items()
                if key not in ("scheduler", "muon_scheduler")}
    upgraded["trainer"] = {**trainer, "warmup_end": warmup_end}
    for key in ("optimizer", "muon"):
        groups = data[key].get("param_groups") if isinstance(data.get(key), dict) else None
        if isinstance(groups, list):
            upgraded[key] = {**data[key], "param_groups": [
                {k: v for k, v in group.items() if k != "initial_lr"}
                if isinstance(group, dict) else group for group in groups]}
    return upgraded


def load_run_recipe(run_dir: Path, overrides: list[str] | tuple = (),
                    dataset: str | None = None, adopt: bool = False) -> Recipe:
    """The recipe a run trains with, read from its newest checkpoint (recipe.yaml is a copy for
    people to read), with resume-safe `overrides` (`config.RESUME_KEYS`) applied and `dataset`,
    if given, as its data (the same data in another place). Only the checkpoint's pickled part
    is read: `resume_point` reads and verifies the whole file. A folder without run.json is
    refused unless `adopt` (`check_run_named`)."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise ConfigError(f"run folder not found: {run_dir}")
    path, checkpoint = newest_checkpoint(run_dir, verify=False)
    check_run_named(run_dir, path, checkpoint, adopt)
    check_own_checkpoint(path, checkpoint, run_id(run_dir))
    raw = resume_overrides(checkpoint["recipe"], overrides)
    recipe = data_from(recipe_from_dict(raw, f"{path} (recipe)", resolved=True), run_dir)
    return replace(recipe, data=replace(recipe.data, dataset=dataset)) if dataset else recipe


def check_run_named(run_dir: Path, path: Path, checkpoint: dict, adopt: bool) -> None:
    """A resumed folder must name its run (run.json): without it nothing shows that the newest
    checkpoint is this folder's run's rather than one copied in. `adopt` takes it as the run's."""
    if adopt or run_id(run_dir) is not None:
        return
    theirs = checkpoint.get("run_id")
    says = f"it says run {theirs}" if theirs else "it carries no run id"
    raise CheckpointError(f"{run_dir} has no {RUN_FILE} naming its run, so nothing shows that "
                          f"{path.name} ({says}) is this folder's run's; if it is, resume with "
                          f"--adopt, which takes that run as the folder's and writes "
                          f"{RUN_FILE} anew")


def resume_point(run_dir: Path, recipe: Recipe, clean: bool = True, adopt: bool = False
                 ) -> tuple[Path, dict, Tokenizer]:
    """The run's newest readable checkpoint (path, contents) and its tokenizer, once checked
    against the recipe; with `clean`, half-written files of the crashed process are removed
    (and with `adopt`, a missing run.json written from the checkpoint's run id)."""
    check_plain_files(run_dir, recipe)
    path, checkpoint = newest_checkpoint(run_dir)
    check_run_named(run_dir, path, checkpoint, adopt)
    check_counters(path, checkpoint)
    if adopt and clean and run_id(run_dir) is None and checkpoint.get("run_id"):
        write_run_id(run_dir, checkpoint["run_id"], recipe, adopted=True)
    check_all_own(run_dir)
    check_resumable(path, checkpoint, recipe)
    tokenizer = checkpoint_tokenizer(checkpoint)
    if clean:
        for leftover in run_dir.glob(".*.tmp*"):
            leftover.unlink()
    return path, checkpoint, tokenizer


def check_counters(path: Path, checkpoint: dict) -> None:
    """The training counters must be ones a run can have reached: whole numbers and seconds
    that are not negative (a crafted or damaged file would resume at step -5)."""
    trainer = checkpoint["trainer"]
    counters = {"step": checkpoint["step"], **{f"trainer.{k}": trainer.get(k) for k in
                ("epoch", "position", "bad_evals", "bad_losses")}}
    for name, value in counters.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise CheckpointError(f"{path}: its {name} is {value!r}, not a count a run reaches "
                                  f"(a whole number, 0 or more); resume from another checkpoint")
    for name in ("elapsed", "train_seconds", "best_bleu"):
        value = trainer.get(name)
        low, high = (-1.0, 100.0) if name == "best_bleu" else (0.0, math.inf)  # -1: no BLEU yet
        if isinstance(value, bool) or not isinstance(value, (int, float)) or \
                not math.isfinite(value) or not low <= value <= high:
            reach = "-1 to 100" if name == "best_bleu" else "a finite number of seconds, 0 or more"
            raise CheckpointError(f"{path}: its trainer.{name} is {value!r}, outside what a run "
                                  f"reaches ({reach}); resume from another checkpoint")
    warmup_end = trainer.get("warmup_end")
    if warmup_end is not None and (isinstance(warmup_end, bool) or
                                   not isinstance(warmup_end, (int, float)) or
                                   not 0.0 <= warmup_end <= 1.0):
        raise CheckpointError(f"{path}: its trainer.warmup_end is {warmup_end!r}, outside what a "
                              f"run reaches (a fraction of the budget, 0 to 1, or None); resume "
                              f"from another checkpoint")
    if checkpoint["step"] == 0 and trainer.get("epoch", 0) > 1:
        raise CheckpointError(f"{path}: it is at step 0 but in epoch {trainer['epoch']}; resume "
                              f"from another checkpoint")
    check_state_finite(path, checkpoint)


def check_state_finite(path: Path, checkpoint: dict) -> None:
    """The weights a run resumes with (the EMA's, the optimizer's own) and the optimizer's
    moments hold no NaN or infinity: a run resumed from them would train on garbage."""
    advice = "the loss diverged before it was saved? Use a checkpoint from before that"
    check_finite(checkpoint["model"], str(path), advice, CheckpointError)
    check_finite(checkpoint.get("train_model", {}), str(path), advice, CheckpointError)
    for name, moment in _tensors(checkpoint.get("optimizer", {}), "optimizer"):
        if moment.is_floating_point() and not torch.isfinite(moment).all():
            raise CheckpointError(f"{path}: its {name} holds NaN or infinite values (the loss "
                                  f"diverged before it was saved?); resume from a checkpoint "
                                  f"from before that")


def _tensors(value, name: str):
    """(name, tensor) of every tensor in nested dicts and lists."""
    if isinstance(value, torch.Tensor):
        yield name, value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _tensors(item, f"{name}.{key}")
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            yield from _tensors(item, f"{name}.{index}")


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
            data = read_checkpoint(path, verify=False, check_name=False, follow=False)
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
