"""`train`: a recipe in, a run folder out (recipe, tokenizer, checkpoints, metrics log, logs and
the test splits' translations).

Tests: tests/training/test_training.py, tests/reliability/test_nothing_lost.py,
tests/test_run_folder.py.
"""

from __future__ import annotations

import logging
import shutil
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Iterator, Optional

from translate.checkpoint import CheckpointError
from translate.config import Recipe, TrainConfig
from translate.data.read import load_split
from translate.evaluation import evaluate_split
from translate.hardware import bound_kernel_caches, keep_onednn_kernels, resident_memory
from translate.metrics import MetricsLog
from translate.ready import Ready
from translate.tokenizer import Tokenizer
from translate.run_folder import locked, owned_files, restate_recipe, run_id, start_run
from translate.training.checkpoints import check_writable, resume_point
from translate.training.distributed import World, join, together
from translate.training.graphs import check_recipe
from translate.training.batches import keeps_kernels, length_multiple
from translate.training.build import build_trainer, training_device, training_precision
from translate.training.loop import Interrupted, Trainer
from translate.training.pick import pick_on_dev, ready_on_run
from translate.training.sizes import choose_size
from translate.training.prepare import prepare_data
from translate.training.validation import Validation
from translate.utils import first_line

log = logging.getLogger(__name__)


@dataclass
class TrainResult:
    run_dir: Path
    best_checkpoint: Path
    best_step: int
    steps: int
    best_dev_bleu: float
    test_scores: dict = field(default_factory=dict)  # split -> scoring.Scores
    main: bool = True  # False on ranks other than 0 of a run across processes


def train(recipe: Recipe, run_dir: Path, device: Optional[str] = None,
          progress: bool = True, resume: bool = False, overwrite: bool = False,
          dataset: Optional[str] = None, adopt: bool = False) -> TrainResult:
    """Train a model as the recipe says, then score the best checkpoint on the test splits.

    A new run refuses a `run_dir` that holds a run, unless `overwrite` (which deletes that run's
    files). With `resume`, continue the run in `run_dir` from its newest readable checkpoint
    instead; `recipe` is then the run's own (see `training.checkpoints.load_run_recipe`). The run
    holds the folder's lock throughout (`run_folder.locked`). Under torchrun, a failure
    while the run starts, on any rank, raises `RankFailed` on every rank. A new run that fails
    before its first step leaves no run folder behind. What the run reports is logged (the
    `translate` logger), and copied into the run folder's train.log. `dataset`, if given, is
    read instead of the recipe's `data.dataset`, which the run still records (TRANSLATE_DATA).
    A resumed folder without run.json is refused unless `adopt` (`--adopt`).
    """
    _size_kernel_caches(recipe.train, device)  # before the run's first matmul
    world = join(training_device(device))  # several processes under torchrun, else one
    new_folder = world.is_main and not resume and not run_dir.exists()
    folder = None
    with ExitStack() as cleanup:
        try:
            with together(world):
                folder = _open_folder(recipe, run_dir, device, resume, overwrite, world, cleanup,
                                      adopt)
                trainer = _start(recipe, run_dir, folder, device, progress, world, cleanup,
                                 dataset)
        except BaseException:
            cleanup.close()  # the log file, before its folder goes
            if new_folder:
                shutil.rmtree(run_dir, ignore_errors=True)
            elif folder is not None and folder.claimed:  # a folder that was there before:
                for path in owned_files(run_dir):  # only what this run wrote goes
                    shutil.rmtree(path) if path.is_dir() else path.unlink()
            raise
        try:
            steps = trainer.run()
        except Interrupted as e:
            if world.is_main:
                log.warning("%s", e)
            raise
        if not world.is_main:  # rank 0 scores the test splits and reports
            return TrainResult(run_dir, run_dir / "best.pt", -1, steps, -1.0, main=False)
        validation = trainer.validation  # the run's device, precision, engine and data
        pick, best = (pick_on_dev(run_dir, validation, trainer.metrics, progress)
                      if recipe.train.pick == "dev" else
                      (run_dir / "best.pt", ready_on_run(run_dir / "best.pt", validation)))
        scores = test_scores(best, validation, run_dir, trainer.metrics, progress)
        result = TrainResult(run_dir, pick, best.step, steps, trainer.state.best_bleu, scores)
        log.info("%s", summary(result))
    return result


def _size_kernel_caches(cfg: TrainConfig, device: Optional[str]) -> None:
    """Keep oneDNN's kernels where training's batches come in a few shapes, else none
    (`batches.keeps_kernels`); oneDNN reads the caches' sizes at its first matmul."""
    chosen = training_device(device)
    if chosen.type == "cpu":  # (on CUDA the precision would start CUDA before torchrun's ranks)
        precision = training_precision(cfg, chosen)
        if keeps_kernels(chosen, precision, length_multiple(cfg, chosen, precision)):
            keep_onednn_kernels()
            return
    bound_kernel_caches()


def summary(result: TrainResult) -> str:
    """The run's outcome as `translate train` reports it: best checkpoint, test scores, folder."""
    if result.best_checkpoint.name == "best.pt":
        lines = [f"\nbest checkpoint: {result.best_checkpoint} (step {result.best_step} of "
                 f"{result.steps}, dev BLEU {result.best_dev_bleu:.2f})"]
    else:  # train.pick: dev chose the average (its dev BLEU logged above and in metrics.jsonl)
        lines = [f"\ncheckpoint picked on dev: {result.best_checkpoint} (up to step "
                 f"{result.best_step} of {result.steps})"]
    lines += [f"\n== {split} ==\n{scores.summary()}"
              for split, scores in result.test_scores.items()]
    _, peak = resident_memory()
    if peak:
        lines.append(f"\npeak resident memory: {peak / 1e9:.2f} GB")
    return "\n".join(lines + [f"\nrun folder: {result.run_dir}"])


@dataclass(frozen=True)
class OpenFolder:
    """The run folder, locked: the run's id, whether this new run claimed it (wrote its
    run.json), and for a resumed run the checkpoint it goes on from."""

    own_id: Optional[str]
    claimed: bool
    checkpoint: Optional[tuple[Path, dict, Tokenizer]] = None  # (path, contents, tokenizer)


def _open_folder(recipe: Recipe, run_dir: Path, device: Optional[str], resume: bool,
                 overwrite: bool, world: World, cleanup: ExitStack, adopt: bool) -> OpenFolder:
    """Lock and check the run folder, then claim it (a new run) or find the resume point;
    `cleanup` releases the lock afterwards."""
    if recipe.train.cuda_graphs:  # before any data is prepared
        check_recipe(recipe, training_precision(recipe.train, training_device(device)),
                     world.size)
    if world.is_main:
        check_writable(run_dir)
        cleanup.enter_context(locked(run_dir))
    if resume:
        checkpoint = resume_point(run_dir, recipe, world.is_main, adopt)  # (adopt: run.json)
        return OpenFolder(run_id(run_dir), False, checkpoint)
    if world.is_main:
        return OpenFolder(start_run(recipe, run_dir, overwrite), True)
    return OpenFolder(None, False)


def _start(recipe: Recipe, run_dir: Path, folder: OpenFolder, device: Optional[str],
           progress: bool, world: World, cleanup: ExitStack,
           dataset: Optional[str] = None) -> Trainer:
    """Prepare the data and build the Trainer (restored when resuming) in the opened folder;
    `cleanup` closes the log file and the metrics log afterwards."""
    path, checkpoint, tokenizer = folder.checkpoint or (None, None, None)
    resume, own_id = folder.checkpoint is not None, folder.own_id
    cleanup.enter_context(_log_file(run_dir / "train.log", world.is_main))
    source = replace(recipe, data=replace(recipe.data, dataset=dataset)) if dataset else recipe
    data = prepare_data(source, run_dir, tokenizer, world, progress)
    spent = 0.0
    if recipe.train.size and not resume:  # a resumed run's recipe holds the size it chose
        chosen = training_device(device)
        recipe, spent = choose_size(recipe, data, chosen, training_precision(recipe.train, chosen),
                                    world)
        if world.is_main:
            restate_recipe(run_dir, recipe, own_id)
    metrics = MetricsLog(run_dir / "metrics.jsonl", enabled=world.is_main)
    cleanup.callback(metrics.close)
    trainer = build_trainer(recipe, run_dir, data, metrics, device, progress, world)
    trainer.run_id = own_id
    trainer.state.elapsed = spent  # the sizes' timing counts against the budget
    if checkpoint is not None:
        _restore(trainer, path, checkpoint)
    return trainer


def _restore(trainer: Trainer, path: Path, checkpoint: dict) -> None:
    try:
        trainer.restore(checkpoint)
    except (RuntimeError, KeyError, TypeError, ValueError) as e:
        raise CheckpointError(f"{path}: cannot resume from it ({type(e).__name__}: "
                              f"{first_line(e)})") from None
    if trainer.world.is_main:
        log.info("resuming from %s: step %d, epoch %d, batch %d", path, trainer.state.step,
                 trainer.state.epoch, trainer.state.position)
        _say_world_change(checkpoint.get("world_size"), trainer.world.size,
                          trainer.recipe.train.accum_steps)


def _say_world_change(before: object, now: int, accum: int) -> None:
    """Warn when a run resumes on another number of processes than it trained on: a step takes
    accum_steps batches per process, so the batch grows or shrinks with them."""
    if not isinstance(before, int) or isinstance(before, bool) or before in (now, 0):
        return
    launch = (f"torchrun --nproc_per_node {before} -m translate train --resume ..."
              if before > 1 else "translate train --resume ... without torchrun")
    log.warning("this run trained on %d process(es) and goes on with %d: an optimizer step now "
                "takes %d batch(es) of train.max_tokens instead of %d (%.3gx the tokens per "
                "step), so it no longer follows the run it continues; resume with %s to keep "
                "them", before, now, accum * now, accum * before, now / before, launch)


def test_scores(ready: Ready, validation: Validation, run_dir: Path, metrics: MetricsLog,
                progress: bool) -> dict:
    """Translate each test split with the picked checkpoint, made ready (`ready_on_run`), write
    `<split>.hyp.<lang>` into `run_dir`, log the scores into `metrics` and return them. The
    model decodes on the run's device with its engine, as `validation` does, and as `translate
    evaluate` decodes it (the recipe's precision resolved for decoding), so both give the same
    scores; the splits are read from the run's data (`validation.source`)."""
    recipe, trained_in = validation.recipe, validation.precision
    precision = ready.precision
    if precision != trained_in and recipe.data.test_splits:
        log.info("test decode in %s, training ran in %s: precision %s picks each on its own "
                 "(here %s decodes faster); --precision %s decodes as trained", precision,
                 trained_in, recipe.train.precision, precision, trained_in)
    results = {}
    for split in recipe.data.test_splits:
        src, ref = load_split(validation.source, split)
        result = evaluate_split(ready, src, ref, recipe.decode, recipe.data.tgt_lang, progress)
        (run_dir / f"{split}.hyp.{recipe.data.tgt_lang}").write_text(
            "".join(h + "\n" for h in result.hypotheses), encoding="utf-8")
        scores = results[split] = result.scores
        metrics.write({"kind": "test", "step": ready.step, "split": split, "bleu": scores.bleu,
                       "chrf": scores.chrf, "legacy_bleu": scores.legacy_bleu,
                       "bleu_signature": scores.bleu_signature})
    return results


@contextmanager
def _log_file(path: Path, enabled: bool = True) -> Iterator[None]:
    """Copy the package's log records into `path` while the block runs (when `enabled`)."""
    if not enabled:
        yield
        return
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    handler.setLevel(logging.INFO)
    logger = logging.getLogger("translate")
    level = logger.level
    if logger.getEffectiveLevel() > logging.INFO:  # a caller that never set logging up
        logger.setLevel(logging.INFO)
    logger.addHandler(handler)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
        handler.close()
