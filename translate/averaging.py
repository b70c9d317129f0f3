"""`translate average`: the mean of a run's last step checkpoints, as one checkpoint.

Averaging the parameters of the last few checkpoints (Vaswani et al., 2017, averaged the last 5
or 20) smooths the noise of the final updates much as an EMA does, at no training cost. The
run must have kept them: `train.keep_last` step checkpoints are kept (1 in the Multi30k
recipes), so train with `--set train.keep_last=N` to average N.

Each checkpoint's `model` weights are averaged: the EMA ones where training kept an EMA. With
`raw=True` (`--raw`) the optimizer's own weights are averaged instead, which is the classic
recipe (an average of points along the trajectory, in place of an EMA of them). The result
keeps the newest checkpoint's recipe, tokenizer and step and records which checkpoints it
averages and the run it comes from; it has no optimizer or training state, so nobody resumes
from it by mistake, and it loads wherever a checkpoint does (`decode`, `evaluate`, `export`,
`Translator.load`).

Nothing the user has is overwritten: an output file that exists is refused, and with `force`
replaced only if it is itself an average (a checkpoint `translate average` wrote) and a regular
file; without `force` only this run's average of the same checkpoints and weights (the one its
`train.pick` wrote, say) is written again. A run's own checkpoint names (best.pt, last.pt,
step_<N>.pt) are refused as outputs always, since `--resume` and `decode` take files of those
names for the run's, and so is any name for one of the run's checkpoints (a hard or symbolic
link to it). The inputs must be one
run's (their run ids), distinct (no step twice, no copies) and finite.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator

import torch

from translate.checkpoint import (FORMAT_VERSION, CheckpointError, read_checkpoint, step_number,
                                  write_checkpoint)
from translate.files import describe, output_clash, output_kind
from translate.locate import OWN_NAMES, Location, check_output_free, run_files
from translate.model_folder import unique_tensors
from translate.run_folder import check_own_checkpoint, run_id

RUN_CHECKPOINT_NAMES = ("best.pt", "last.pt")  # and step_<N>.pt


@dataclass
class Averaged:
    path: Path
    inputs: list[Path]  # oldest first
    step: int  # the newest input's


def step_checkpoints(run_dir: Path) -> list[Path]:
    """The run's step_<N>.pt files, by step number (oldest first)."""
    return sorted((p for p in run_dir.glob("step_*.pt") if step_number(p) >= 0), key=step_number)


def average_state_dicts(states: Iterable[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """The element-wise mean of state dicts with the same names and shapes, summed in float64
    and cast back. One state is read at a time (an iterator keeps one in memory). Names that
    share one tensor in the first (tied embeddings) share the mean."""
    states = iter(states)
    first = next(states, None)
    if first is None:
        raise ValueError("no state dicts to average")
    unique, aliases = unique_tensors(first)
    sums = {n: t.to(torch.float64) if t.is_floating_point() else t for n, t in unique.items()}
    count = 1
    for state in states:
        for name, total in sums.items():
            if total.is_floating_point():
                total += state[name].to(torch.float64)
            elif not torch.equal(state[name], total):  # integer buffers (none today)
                raise CheckpointError(f"{name} is an integer tensor that differs between the "
                                      f"checkpoints; it cannot be averaged")
        count += 1
    mean = {n: (sums[n] / count).to(t.dtype) if t.is_floating_point() else t.clone()
            for n, t in unique.items()}
    return {n: mean[aliases.get(n, n)] for n in first}


def _check_alike(base: dict, base_path: Path, data: dict, path: Path) -> None:
    """One model: the same architecture, tokenizer, parameter names and shapes."""
    pair = f"{base_path.name} and {path.name}"
    model_a, model_b = base["recipe"].get("model", {}), data["recipe"].get("model", {})
    for key in sorted(set(model_a) | set(model_b)):
        if model_a.get(key) != model_b.get(key):
            raise CheckpointError(f"{pair} have different recipes (model.{key}: "
                                  f"{model_a.get(key)!r} and {model_b.get(key)!r}); only "
                                  f"checkpoints of one model average")
    if any(not torch.equal(base["tokenizer"][s], data["tokenizer"][s]) for s in ("src", "tgt")):
        raise CheckpointError(f"{pair} have different tokenizers; only checkpoints of one "
                              f"model average")
    a, b = base["model"], data["model"]
    if set(a) != set(b):
        raise CheckpointError(f"{pair} have different parameters "
                              f"({sorted(set(a) ^ set(b))[0]} is in one only)")
    for name, tensor in a.items():
        if tensor.shape != b[name].shape:
            raise CheckpointError(f"{pair} have different shapes for {name} "
                                  f"({tuple(tensor.shape)} and {tuple(b[name].shape)})")


def _weights(data: dict, raw: bool) -> dict:
    """A checkpoint's weights to average: `model` (the EMA's where there is one), or with `raw`
    the optimizer's own (`train_model`, saved beside an EMA; `model` itself without one)."""
    return data.get("train_model", data["model"]) if raw else data["model"]


def check_output(path: Path, force: bool, run_dir: Path | None = None) -> None:
    """Refuse an output that would replace a file without `force`, or with it anything but an
    earlier average; a name a run gives its own checkpoints; and any name for one of the run's
    checkpoints."""
    if path.name in RUN_CHECKPOINT_NAMES or step_number(path) >= 0:
        raise CheckpointError(f"{path}: {path.name} is a name a run gives its own checkpoints, "
                              f"which --resume, decode and average take for the run's; write "
                              f"the average under another name")
    kind = output_kind(path)
    if kind == "a folder":
        raise CheckpointError(f"{path} is a folder; -o takes the checkpoint file to write")
    if run_dir is not None:
        own = {p.name: p for p in (*step_checkpoints(run_dir),
                                   *(run_dir / n for n in RUN_CHECKPOINT_NAMES))}
        clash = output_clash(path, own)
        if clash:
            raise CheckpointError(f"{path} is the run's {clash} under another name (a link); "
                                  f"write the average under a name of its own")
        logs = {what: p for what, p in run_files(run_dir).items() if p.suffix != ".pt"}
        check_output_free(path, [Location("run folder", run_dir, run_dir, logs)],
                          names=[name for name in OWN_NAMES if name != "*.pt"])
    if not (path.exists() or path.is_symlink()):
        return
    if not force:
        raise CheckpointError(f"{path} exists: give another -o, or --force to replace it")
    if kind is not None or path.is_symlink():
        raise CheckpointError(f"{path} is {kind or describe(path)}; --force replaces only an "
                              f"earlier average: give another -o")
    try:
        earlier = "averaged" in read_checkpoint(path, verify=False, check_name=False)
    except CheckpointError:
        earlier = False
    if not earlier:
        raise CheckpointError(f"{path} is not an average that translate average wrote; --force "
                              f"replaces only those: give another -o")


def renews(path: Path, run_dir: Path, last: int, raw: bool) -> bool:
    """Whether `path` is a regular file holding this run's average of the same weights of its
    last `last` step checkpoints, by name (the run's pick wrote it, or an earlier `average`):
    the average is written again without --force."""
    if not path.exists() or path.is_symlink() or output_kind(path) is not None:
        return False
    try:
        earlier = read_checkpoint(path, verify=False, check_name=False)
    except CheckpointError:
        return False
    names = [p.name for p in step_checkpoints(run_dir)[-last:]]
    own_id = run_id(run_dir)
    return (earlier.get("averaged") == names and own_id is not None
            and earlier.get("averaged_weights") == ("raw" if raw else "model")
            and earlier.get("run_id") == own_id)


def _check_input(path: Path, data: dict, weights: dict, own_id: str | None, seen: dict) -> None:
    """An input must be the run's own, a step not averaged already, and its `weights` (those
    averaged) finite."""
    check_own_checkpoint(path, data, own_id, "an average takes one run's checkpoints")
    step = int(data.get("step", step_number(path)))
    if step in seen:
        raise CheckpointError(f"{seen[step].name} and {path.name} are both step {step} (a copy?)"
                              f": an average takes each step once")
    seen[step] = path
    for name, tensor in weights.items():
        if tensor.is_floating_point() and not torch.isfinite(tensor).all():
            raise CheckpointError(f"{path}: its weight {name} holds NaN or infinite values; "
                                  f"average checkpoints from before the loss diverged (--last)")


def average_checkpoints(run_dir: str | Path, last: int = 5, out: str | Path | None = None,
                        raw: bool = False, force: bool = False) -> Averaged:
    """Average the `model` weights (with `raw`, the optimizer's weights) of the run's `last`
    step checkpoints into `out` (default RUN_DIR/average_last<N>[_raw].pt), written
    atomically. An existing `out` is replaced only with `force`."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise CheckpointError(f"run folder not found: {run_dir}")
    path = Path(out) if out else run_dir / f"average_last{last}{'_raw' if raw else ''}.pt"
    check_output(path, force or renews(path, run_dir, last, raw), run_dir)
    if last < 2:
        raise CheckpointError(f"--last must be at least 2, got {last}: one checkpoint is "
                              f"its own average")
    found = step_checkpoints(run_dir)
    if len(found) < last:
        names = ", ".join(p.name for p in found) or "none"
        keeps = read_checkpoint(found[-1], follow=False)["recipe"]["train"]["keep_last"] if found else 0
        hint = (f"train with --set train.keep_last={last} to keep them" if keeps < last else
                f"the run keeps {keeps} but saved {len(found)} before it ended: train longer, "
                f"or average fewer (--last {len(found)})")
        raise CheckpointError(f"{run_dir} holds {len(found)} step checkpoint(s) ({names}), fewer "
                              f"than --last {last}: {hint}")
    paths = found[-last:]
    own_id, seen = run_id(run_dir), {}
    first = read_checkpoint(paths[0], follow=False)
    first = {"model": _weights(first, raw), **{k: first[k] for k in ("recipe", "tokenizer", "step",
                                                                     "run_id") if k in first}}
    newest = {}

    def models() -> Iterator[dict]:
        """Each checkpoint's weights, checked against the first; the newest's recipe kept."""
        for input_path in paths:
            data = first if input_path == paths[0] else read_checkpoint(input_path, follow=False)
            _check_alike(first, paths[0], data, input_path)
            model = _weights(data, raw)
            # the first input's run id stands for the run when the folder has no run.json
            _check_input(input_path, data, model, own_id or first.get("run_id"), seen)
            newest.update(recipe=data["recipe"], tokenizer=data["tokenizer"],
                          step=int(data.get("step", step_number(input_path))),
                          **({"run_id": data["run_id"]} if "run_id" in data else {}))
            del data  # its optimizer state, before the next checkpoint is read
            yield model

    model = average_state_dicts(models())
    write_checkpoint(path, {"format_version": FORMAT_VERSION, "model": model, **newest,
                            "averaged": [p.name for p in paths],
                            "averaged_weights": "raw" if raw else "model"})
    return Averaged(path, paths, newest["step"])
