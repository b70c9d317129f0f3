"""The checkpoint a run ends with (`train.pick`), chosen on dev when the recipe says so.

Two candidates stand at the end of a run: `best.pt`, the EMA weights of the validation with the
best greedy dev BLEU, and the raw average of the last `train.keep_last` step checkpoints (the
classic recipe: Vaswani et al., 2017). Which translates better differs from run to run and
machine to machine (on Multi30k the EMA won on an AMD EPYC, the average on an Intel Xeon:
docs/results.md), so with `pick: dev` the run translates dev with both at the decoding beam
and keeps the better one; a tie keeps `best.pt`. The test splits are then scored with the pick,
made ready once (`ready_on_run`): the run's end loads no checkpoint twice.
"""

from __future__ import annotations

import logging
from pathlib import Path

from translate.averaging import average_checkpoints, step_checkpoints
from translate.checkpoint import CheckpointError
from translate.evaluation import evaluate_split
from translate.loading import load_checkpoint
from translate.metrics import MetricsLog
from translate.ready import Ready
from translate.training.validation import Validation

log = logging.getLogger(__name__)


def candidates(run_dir: Path, keep_last: int) -> list[Path]:
    """best.pt, then the raw average of the last `keep_last` step checkpoints (written as
    average_last<N>_raw.pt) when the run kept at least two; fewer than `keep_last` (a short
    run) are averaged as they are. Where the average cannot be made (a file that is no average
    in its place, a damaged step checkpoint) best.pt stands alone, with a warning that says why."""
    last = min(keep_last, len(step_checkpoints(run_dir)))
    if last < 2:
        log.info("pick: best.pt alone (%d step checkpoint(s) kept; an average needs 2)", last)
        return [run_dir / "best.pt"]
    try:
        average = average_checkpoints(run_dir, last, raw=True, force=True)
    except CheckpointError as e:  # a file of the user's in its place, a damaged checkpoint
        log.warning("pick: best.pt alone, the average could not be made: %s", e)
        return [run_dir / "best.pt"]
    return [run_dir / "best.pt", average.path]


def ready_on_run(path: Path, validation: Validation) -> Ready:
    """The run's checkpoint at `path` made ready on the run's device with its engine, as
    `validation` decodes, and in the recipe's precision resolved for decoding, as `translate
    evaluate` would (`Ready.prepare`)."""
    loaded = load_checkpoint(path, validation.device)
    return Ready.prepare(loaded.model, loaded.tokenizer, validation.device,
                         validation.recipe.train.precision, validation.engine, loaded.recipe,
                         loaded.step)


def pick_on_dev(run_dir: Path, validation: Validation, metrics: MetricsLog,
                progress: bool = False) -> tuple[Path, Ready]:
    """The candidate (`candidates`) with the highest dev BLEU at `decode.beam`, each decoded on
    the run's device as `translate evaluate` would, and its Ready; the scores go into `metrics`
    ("pick")."""
    recipe = validation.recipe
    paths = candidates(run_dir, recipe.train.keep_last)
    if len(paths) == 1:
        return paths[0], ready_on_run(paths[0], validation)
    bleu, readies = {}, {}
    for path in paths:
        ready = readies[path.name] = ready_on_run(path, validation)
        bleu[path.name] = evaluate_split(ready, validation.dev.src, validation.dev.tgt,
                                         recipe.decode, recipe.data.tgt_lang, progress).scores.bleu
    pick = max(paths, key=lambda p: bleu[p.name])  # the first of equals: best.pt
    metrics.write({"kind": "pick", "step": readies[pick.name].step, "beam": recipe.decode.beam,
                   "dev_bleu": bleu, "pick": pick.name})
    log.info("pick on dev at beam %d: %s (%s)", recipe.decode.beam, pick.name,
             ", ".join(f"{name} {score:.2f}" for name, score in bleu.items()))
    return pick, readies[pick.name]
