"""`train_seeds`: one recipe trained once per seed, each into a run folder of its own.

Runs of one recipe that differ only in `train.seed` differ by a few tenths of BLEU; training
several seeds is how a figure gets its spread (`translate.analysis.seeds`). Each seed's folder
is `RUN_DIR-seedN`, a sibling of the others and an ordinary run folder: decode, evaluate,
resume, average and compare take it as they take any run.
"""

from __future__ import annotations

import logging
from dataclasses import fields, replace
from pathlib import Path
from typing import Optional, Sequence

from translate.config import Recipe, TrainConfig
from translate.run_folder import check_names_free, owned_files, run_files
from translate.training.distributed import launched_together
from translate.training.run import TrainResult, train

log = logging.getLogger(__name__)

MAX_SEEDS = 32  # more runs than anyone trains in one command: a slip of the keyboard
SEED_MAX = next(f for f in fields(TrainConfig) if f.name == "seed").metadata["max"]


def seed_run_dir(run_dir: Path, seed: int) -> Path:
    """The run folder of `seed`: RUN_DIR-seedN, beside the other seeds' folders."""
    return run_dir.parent / f"{run_dir.name}-seed{seed}"


def check_seeds(seeds: Sequence[int], run_dir: Path, recipe: Recipe,
                overwrite: bool = False) -> list[Path]:
    """Each seed's run folder, once the seeds are found to be distinct integers in train.seed's
    range (at most MAX_SEEDS of them) and, without `overwrite`, none of the folders to exist
    (with it, each that exists to be one a run of `recipe` may start over in); a ValueError
    names the first value or folder that is not."""
    if not seeds:
        raise ValueError("--seeds: give one or more seeds, e.g. --seeds 1,2,3")
    if len(seeds) > MAX_SEEDS:
        raise ValueError(f"--seeds: {len(seeds)} seeds, at most {MAX_SEEDS} in one command")
    for seed in seeds:
        if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= SEED_MAX:
            raise ValueError(f"--seeds: {seed!r} is not a seed (an integer 0..{SEED_MAX})")
        if list(seeds).count(seed) > 1:
            raise ValueError(f"--seeds: seed {seed} is given {list(seeds).count(seed)} times")
    if not run_dir.name:
        raise ValueError(f"--seeds: run folder {str(run_dir)!r} has no name to add -seedN to")
    folders = [seed_run_dir(run_dir, seed) for seed in seeds]
    for folder in folders:
        if folder.exists() and not overwrite:
            raise ValueError(f"{folder} exists: give another --run-dir, or --overwrite to start "
                             f"over in the seeds' folders")
        if folder.is_dir():
            check_start_over(folder, recipe)
    return folders


def check_start_over(folder: Path, recipe: Recipe) -> None:
    """Refuse, before any seed trains, a folder that its seed's run would refuse as it starts
    (`run_folder.start_run`): one holding a run's files without a run.json naming the run, or
    a link, a FIFO or another run's checkpoint under a name the run writes."""
    if run_files(folder):
        owned_files(folder)  # a RunFolderError where no run.json names the run
    check_names_free(folder, recipe)


def train_seeds(recipe: Recipe, run_dir: Path, seeds: Sequence[int],
                device: Optional[str] = None, progress: bool = True, overwrite: bool = False,
                dataset: Optional[str] = None) -> list[TrainResult]:
    """Train `recipe` once per seed, one run after another, with `train.seed` set to it.

    Every seed and folder is checked before the first run starts (`check_seeds`). A seed's run
    that fails or is interrupted stops the others; its folder resumes as any run does
    (`translate train --resume RUN_DIR-seedN`), and the seeds not yet trained start with
    another `--seeds`. The other arguments are `train`'s.
    """
    if launched_together():
        raise ValueError("--seeds trains one run after another in one process: under torchrun "
                         "train each seed on its own (--set train.seed=N --run-dir ...)")
    folders = check_seeds(seeds, run_dir, recipe, overwrite)
    results = []
    for seed, folder in zip(seeds, folders):
        log.info("seed %d (of seeds %s): %s", seed, ",".join(map(str, seeds)), folder)
        results.append(train(replace(recipe, train=replace(recipe.train, seed=seed)), folder,
                             device, progress, overwrite=overwrite, dataset=dataset))
    return results
