"""Training speed of two revisions of this repository, measured against each other step by step.

    python benchmarks/ab_train.py REV_A REV_B --data ../shared/data/multi30k \
        --precisions fp32,auto --rounds 7 --steps 6 --json ab_train.json
    python benchmarks/ab_train.py REV_A REV_B ... --recipe recipes/multi30k/rnn_bahdanau.yaml
    python benchmarks/ab_train.py REV_A REV_B ... --set model.positions=rope   # an option on
    python benchmarks/ab_train.py FOLDER_A FOLDER_B --device cuda --precisions bf16 ...

A revision may also be a folder holding a copy of the repository (`git archive REV translate
recipes | tar -x -C FOLDER`), for a machine without the git history such as a lent GPU. On a GPU
each step ends by reading its figures, so the time is the step's, not the queue's.

Each revision's `translate/` package is exported (`git archive`, as `ab_decode.py` does) and builds
its own `Trainer` from its own copy of the recipe (transformer_2017.yaml unless `--recipe`), so each
step is exactly what `translate train` runs at that revision: forward, loss, backward, clipping,
AdamW, the schedule and the weight average. B starts from A's initial weights (through B's
checkpoint upgrade) and both train on the same `--steps` batches of A's epoch 1: once untimed (so
that oneDNN's kernels for each batch's shapes exist before the first timed step, whoever takes it),
then once a round, taking turns batch by batch (who goes first alternates), so the VM's noise,
which drifts over seconds, hits both alike. Printed per precision: target tokens/s of each, B's
speed over A's in every round and their median, and the largest difference between their losses
(their dropout draws differ, so the losses drift apart a little).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import inspect
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ab_decode import ROOT, benchmark_threads, export, first_module, speeds  # noqa: E402

# The 2017 recipe: every option of the training-methods ablations off. A revision from before
# it had a file of its own has the same recipe as recipes/multi30k/transformer.yaml.
RECIPE = "recipes/multi30k/transformer_2017.yaml"
BEFORE_THE_SPLIT = {RECIPE: "recipes/multi30k/transformer.yaml"}


def recipe_text(rev: str, recipe: str) -> bytes:
    """Revision (or folder) `rev`'s copy of `recipe`; the 2017 recipe's former path where `rev`
    predates it."""
    for path in (recipe, BEFORE_THE_SPLIT.get(recipe)):
        if path is None:
            continue
        if Path(rev).is_dir():
            if (Path(rev) / path).is_file():
                return (Path(rev) / path).read_bytes()
            continue
        shown = subprocess.run(["git", "-C", str(ROOT), "show", f"{rev}:{path}"],
                               capture_output=True)
        if shown.returncode == 0:
            return shown.stdout
    raise SystemExit(f"{rev} has no {recipe}")


def trainer(name: str, rev: str, data: str, precision: str, run_dir: Path, recipe: str = RECIPE,
            device: str = "cpu", overrides: tuple[str, ...] = ()):
    """Revision `rev`'s Trainer (exported as package `name`) for its copy of `recipe`, with the
    recipe `overrides` ("key=value")."""
    recipe_file = run_dir / "recipe.in.yaml"
    recipe_file.write_bytes(recipe_text(rev, recipe))
    config = importlib.import_module(f"{name}.config")
    training = importlib.import_module(f"{name}.training")
    recipe = config.load_recipe(recipe_file, [f"data.dataset={data}",
                                              f"train.precision={precision}", *overrides])
    if hasattr(training, "build_trainer") or "data" in inspect.signature(
            training.Trainer).parameters:  # prepared data passed in
        build = getattr(training, "build_trainer", training.Trainer)
        metrics = importlib.import_module(f"{name}.metrics").MetricsLog(run_dir / "metrics.jsonl")
        prepared = training.prepare_data(recipe, run_dir)
        return build(recipe, run_dir, prepared, metrics, device=device, progress=False)
    return training.Trainer(recipe, run_dir, device=device, progress=False)


def resolved_precision(trainer) -> str:
    """The precision `trainer` runs in (`auto` resolved): the Trainer kept it before the batch
    loss did."""
    if hasattr(trainer, "precision"):
        return trainer.precision
    return trainer.updater.batch_loss.precision


def same_weights(a, b, b_name: str) -> None:
    """Give trainer b trainer a's weights (and weight average), upgraded to b's format."""
    room = "weights" if importlib.util.find_spec(f"{b_name}.weights") else "checkpoint"  # moved
    upgrade = getattr(importlib.import_module(f"{b_name}.{room}"), "upgrade_state_dict",
                      lambda state: state)
    (model_a, ema_a), (model_b, ema_b) = weights_of(a), weights_of(b)
    model_b.load_state_dict(upgrade(model_a.state_dict()))
    if ema_a is not None:
        ema_b.load_state_dict(upgrade(ema_a.state_dict()))


def weights_of(trainer) -> tuple:
    """A trainer's model and weight average (None without one): its Updater's, or, in
    revisions before the Updater, its own."""
    holder = getattr(trainer, "updater", trainer)
    return holder.model, holder.ema


def step_loss(trainer, batch) -> float:
    """One training step on `batch`; its loss per target token."""
    if hasattr(trainer, "updater"):  # revisions whose Trainer takes steps through an Updater
        trainer.updater.step([batch], batch.num_tgt_tokens, trainer.state)
        trainer.updater.settle(trainer.state)  # the step's figures, from the device to the log
    else:
        result = trainer.train_step([batch])
        if isinstance(result, tuple):  # revisions whose step returned (loss, tokens)
            return result[0]
        trainer.settle()
    return getattr(trainer, "state", trainer).window.losses.pop()


def ab_rounds(trainers: dict, batches: list, rounds: int) -> dict:
    """Each trainer takes a step on every batch, every round, taking turns batch by batch (who
    goes first alternates)."""
    seconds = {label: [0.0] * rounds for label in trainers}
    losses = {label: [] for label in trainers}
    tokens = sum(b.num_tgt_tokens for b in batches)
    for r in range(rounds):
        for i, batch in enumerate(batches):
            for label in ("A", "B") if (r + i) % 2 == 0 else ("B", "A"):
                start = time.perf_counter()
                losses[label].append(step_loss(trainers[label], batch))
                seconds[label][r] += time.perf_counter() - start
    ratios = [a / b for a, b in zip(seconds["A"], seconds["B"])]
    return {"tok_per_s": {label: tokens / statistics.median(secs)
                          for label, secs in seconds.items()},
            "b_over_a_per_round": ratios, "b_over_a": statistics.median(ratios),
            "max_loss_difference": max(abs(a - b) for a, b in zip(losses["A"], losses["B"])),
            "losses": losses}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("rev_a")
    ap.add_argument("rev_b")
    ap.add_argument("--data", default="../shared/data/multi30k")
    ap.add_argument("--precisions", default="fp32,auto", help="comma-separated: fp32, bf16, auto")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--steps", type=int, default=6,
                    help="batches, each trained on by both revisions every round")
    ap.add_argument("--recipe", default=RECIPE, help="path in the repository (default: %(default)s)")
    ap.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                    help="a recipe override for both revisions, e.g. model.positions=rope")
    ap.add_argument("--threads", type=int, default=benchmark_threads(),
                    help="CPU threads (default: OMP_NUM_THREADS, else 2)")
    ap.add_argument("--device", default="cpu", help="cpu, or cuda (a GPU)")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()

    import torch

    tmp = Path(tempfile.mkdtemp(prefix="ab_train-"))
    sys.path.insert(0, str(tmp))
    names = {"A": "translate_a", "B": "translate_b"}
    for label, rev in (("A", args.rev_a), ("B", args.rev_b)):
        export(rev, names[label], tmp)
    # where collate lives: translate.data.batch, translate.batching, or translate.data before
    batching = first_module(names["A"], "data.batch", "batching", "data")
    report = {"rev_a": args.rev_a, "rev_b": args.rev_b, "device": args.device,
              "overrides": args.overrides, "results": {}}
    for precision in args.precisions.split(","):
        trainers = {}
        for label, name in names.items():
            run_dir = tmp / f"{precision}-{label}"
            run_dir.mkdir()
            trainers[label] = trainer(name, getattr(args, f"rev_{label.lower()}"),
                                      str(Path(args.data).resolve()), precision, run_dir,
                                      args.recipe, args.device, tuple(args.overrides))
        same_weights(trainers["A"], trainers["B"], names["B"])
        torch.set_num_threads(args.threads)  # a recipe's train.threads may have changed it
        a = trainers["A"]
        if hasattr(a, "batcher"):  # revisions whose Trainer batches through a TrainBatcher
            order, pairs = a.batcher.epoch(a.state.epoch)[: args.steps], a.batcher.pairs
        else:
            order, pairs = a.epoch_batches()[: args.steps], a.train_pairs
        batches = [batching.collate([pairs.src[i] for i in idx],
                                    [pairs.tgt[i] for i in idx]) for idx in order]
        for label in ("A", "B"):  # warm-up: every batch's shapes seen once (oneDNN's kernels)
            for batch in batches:
                step_loss(trainers[label], batch)
        row = ab_rounds(trainers, batches, args.rounds)
        row["precision"] = resolved = resolved_precision(a)
        report["results"][precision] = row
        print(f"{precision} ({resolved}): {speeds(row, 'tok_per_s', 'target tok/s', 0)}; "
              f"largest loss difference {row['max_loss_difference']:.2e}", flush=True)
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
