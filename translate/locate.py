"""What a path the user names as a model is, and which files belong to it.

`translate decode RUN`, `evaluate`, `export`, `align-score`, `average` and the Python API take a
run folder (its best.pt), a .pt checkpoint or an exported model folder. `locate` says which,
once for every load (translate.loading reads what it found), and lists the files that are the
model's: those a load reads and those its folder holds (a run's
recipe, logs, tokenizer and checkpoints; an export's config, weights and SentencePiece models).
Every output a command writes is checked against them (`check_output_free`): a command never
writes over a file it reads or a file of the run or export it reads from, whatever the output
is called (hard and symbolic links included), and never under a name a run writes for itself.
"""

from __future__ import annotations

import fnmatch
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Mapping

from translate.files import output_clash, same_file
from translate.model_folder import is_model_folder

RUN_FILE = "run.json"
# What `translate train` writes into a run folder: a folder holding any of these holds a run.
RUN_PATTERNS = (RUN_FILE, "recipe.yaml", "metrics.jsonl", "train.log", "spm.model", "spm.*.model",
                "*.pt", "*.hyp.*", ".*.tmp*")
OWN_NAMES = (*RUN_PATTERNS, ".lock")  # and the lock it holds while it trains


RUN, CHECKPOINT, EXPORT = "run folder", "checkpoint", "exported model"  # what a path names


class OutputClashError(ValueError):
    """An output that is (or would be) a file a command reads or a model's own file."""


@dataclass(frozen=True)
class Location:
    """A model path as a load sees it.

    kind        "run folder", "checkpoint" or "exported model"
    folder      the run or export folder the model belongs to; None for a .pt outside any run
    files       what each of the model's files is to the user -> the file (read by a load, or
                held by its folder)
    checkpoint  the .pt a load reads (a run folder's best.pt); None for an export
    recipe_base the folder the saved recipe's relative data path is read from
    """

    kind: str
    path: Path
    folder: Path | None
    files: dict[str, Path] = field(default_factory=dict)

    @property
    def checkpoint(self) -> Path | None:
        return None if self.kind == EXPORT else self.files["the checkpoint"]

    @property
    def recipe_base(self) -> Path:
        return self.path if self.kind != CHECKPOINT else self.path.parent


def holds_run(folder: Path) -> bool:
    """Whether `folder` holds a training run (its run.json, or a checkpoint of one)."""
    return (folder / RUN_FILE).exists() or (folder / "best.pt").exists() \
        or (folder / "last.pt").exists()


def run_files(folder: Path) -> dict[str, Path]:
    """The files in a run folder that its run writes, by what they are to the user."""
    found = {}
    for entry in sorted(os.scandir(folder), key=lambda e: e.name) if folder.is_dir() else ():
        if any(fnmatch.fnmatchcase(entry.name, pattern) for pattern in OWN_NAMES):
            found[f"the run's {entry.name}"] = Path(entry.path)
    return found


def export_files(folder: Path) -> dict[str, Path]:
    """Every file an exported model folder holds, by what it is to the user."""
    return {f"the exported model's {entry.name}": Path(entry.path)
            for entry in sorted(os.scandir(folder), key=lambda e: e.name)
            if not entry.is_dir()}


def locate(path: str | Path) -> Location:
    """What `path` names as a model, and its files. A path with nothing at it is a checkpoint
    that a load will refuse by name; here it has no files."""
    path = Path(path)
    if is_model_folder(path):
        return Location(EXPORT, path, path, export_files(path))
    if path.is_dir():
        return Location(RUN, path, path, {"the checkpoint": path / "best.pt", **run_files(path)})
    folder = path.parent if holds_run(path.parent) else None
    files = {"the checkpoint": path, **(run_files(folder) if folder else {})}
    return Location(CHECKPOINT, path, folder, files)


def check_output_free(output: str | Path, models: Iterable[Location] = (),
                      reads: Mapping[str, str | Path | int] | None = None,
                      option: str = "-o", names: Iterable[str] = OWN_NAMES) -> None:
    """Refuse `output` (an OutputClashError, one line) where it is, under any name, a file the
    command reads (`reads`: what each is to the user -> the path or descriptor) or one of a
    model's files; or where it is missing but named as a run writes its own files, in the run's
    folder (RUN/train.log, RUN/last.pt: a name matching one of `names`)."""
    output, models, names = Path(output), list(models), tuple(names)
    named = {what: where for model in models for what, where in model.files.items()}
    clash = output_clash(output, {**(reads or {}), **named})
    if clash:
        raise OutputClashError(f"{option} {output} is {clash}: writing there would destroy "
                               f"it; choose another {option}")
    for model in models:
        if model.kind != EXPORT and model.folder is not None \
                and same_file(output.parent, model.folder) \
                and any(fnmatch.fnmatchcase(output.name, pattern) for pattern in names):
            raise OutputClashError(f"{option} {output} is a name the run in {model.folder} "
                                   f"writes for itself; choose another {option}")
