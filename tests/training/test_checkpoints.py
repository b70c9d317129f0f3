"""The resume policy (translate/training/checkpoints.py): which checkpoint a stopped run goes on
from, checked against its recipe, and a run stopped halfway and resumed equals the run that was
never stopped. (Marked `reliability`: failures, beside their room.)"""

import json
import logging
import math
import re
import shutil
from dataclasses import replace

import pytest
import torch

from helpers.training import TINY_OVERRIDES
from translate.checkpoint import CheckpointError, read_checkpoint, write_checkpoint
from translate.config import load_recipe
from translate.training.checkpoints import load_run_recipe, newest_checkpoint
from translate.training import train

pytestmark = pytest.mark.reliability

STEPS = 40
# Dropout on, so equal losses prove the random state came back; batches of about 4000 tokens,
# so an epoch (17 steps) ends between checkpoints and the halfway point is mid-epoch.
RESUME_OVERRIDES = [*TINY_OVERRIDES, "model.dropout=0.1", "train.max_tokens=4000",
                    "train.eval_every=10", "train.save_every=5", "train.log_every=5",
                    "train.keep_last=2", "data.test_splits=[]"]


def records(run_dir, kind=None) -> list[dict]:
    lines = (run_dir / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
    return [r for r in map(json.loads, lines) if kind is None or r["kind"] == kind]


def curve(run_dir) -> list[tuple]:
    """What must not change by resuming: each train record's step, epoch, loss and lr."""
    return [(r["step"], r["epoch"], r["loss"], r["lr"]) for r in records(run_dir, "train")]


def run_tiny(recipe_path, data, steps, run_dir, *overrides):
    cfg = load_recipe(recipe_path, [*RESUME_OVERRIDES, f"data.dataset={data}",
                                    f"train.max_steps={steps}", *overrides])
    return train(cfg, run_dir, device="cpu", progress=False)


def resume_tiny(run_dir, steps):
    return train(load_run_recipe(run_dir, [f"train.max_steps={steps}"]), run_dir, device="cpu",
                 progress=False, resume=True)


@pytest.fixture(scope="module")
def data(small_data, tmp_path_factory):
    """The small Multi30k subset with a 20-pair dev split: validations are many and quick here."""
    folder = shutil.copytree(small_data, tmp_path_factory.mktemp("data") / "multi30k")
    dev = folder / "validation.jsonl"
    dev.write_text("".join(dev.read_text(encoding="utf-8").splitlines(True)[:20]),
                   encoding="utf-8")
    return folder


@pytest.fixture(scope="module")
def straight(recipe_path, data, tmp_path_factory):
    """STEPS steps in one go."""
    return run_tiny(recipe_path, data, STEPS, tmp_path_factory.mktemp("straight")).run_dir


@pytest.fixture(scope="module")
def halfway(recipe_path, data, tmp_path_factory):
    """The same recipe stopped after STEPS / 2 steps."""
    return run_tiny(recipe_path, data, STEPS // 2, tmp_path_factory.mktemp("half")).run_dir


@pytest.fixture(scope="module")
def halfway_full(recipe_path, data, tmp_path_factory):
    """The halfway run with the training state in every step checkpoint."""
    return run_tiny(recipe_path, data, STEPS // 2, tmp_path_factory.mktemp("half_full"),
                    "train.step_checkpoints=full").run_dir


def crash(halfway, tmp_path):
    """A copy of the halfway run as a crash leaves it: the log runs past the last checkpoint,
    its last line cut short, and a temporary checkpoint file was left half-written."""
    run = shutil.copytree(halfway, tmp_path / "run")
    with open(run / "metrics.jsonl", "ab") as log:
        log.write(json.dumps({"kind": "train", "step": 23, "loss": 1.0}).encode() + b"\n")
        log.write(b'{"kind": "train", "step": 24, "lo\xe2\x82')  # cut inside a character
    (run / ".last.pt.tmp999").write_bytes(b"half a checkpoint")
    return run


@pytest.fixture
def crashed(halfway, tmp_path):
    return crash(halfway, tmp_path)


@pytest.fixture
def crashed_full(halfway_full, tmp_path):
    return crash(halfway_full, tmp_path)


def test_resumed_run_equals_uninterrupted_run(straight, crashed):
    path, data = newest_checkpoint(crashed)  # validations save last.pt too
    assert path.name == "last.pt" and "optimizer" not in read_checkpoint(crashed / "step_20.pt")
    assert data["step"] == STEPS // 2 and data["trainer"]["epoch"] >= 2
    assert data["trainer"]["position"] > 0  # mid-epoch
    resume_tiny(crashed, STEPS)
    assert curve(crashed) == curve(straight)  # exact: same batches, dropout masks, updates
    assert [r["step"] for r in records(crashed, "train")] == list(range(5, STEPS + 1, 5))
    assert [(r["step"], r["dev_loss"], r["dev_bleu"]) for r in records(crashed, "valid")] == \
        [(r["step"], r["dev_loss"], r["dev_bleu"]) for r in records(straight, "valid")]
    ours, theirs = read_checkpoint(crashed / "last.pt"), read_checkpoint(straight / "last.pt")
    assert ours["step"] == theirs["step"] == STEPS
    for key in ("model", "train_model"):  # EMA and raw weights
        assert ours[key].keys() == theirs[key].keys()
        assert all(torch.equal(ours[key][k], theirs[key][k]) for k in ours[key])
    adam, their_adam = ours["optimizer"]["state"], theirs["optimizer"]["state"]
    assert all(torch.equal(adam[i]["exp_avg_sq"], their_adam[i]["exp_avg_sq"]) for i in adam)
    assert ours["trainer"]["elapsed"] > data["trainer"]["elapsed"]  # the clock went on
    assert not list(crashed.glob(".*.tmp*"))
    assert sorted(p.name for p in crashed.glob("step_*.pt")) == ["step_30.pt", "step_40.pt"]


# Muon for the hidden matrices and a wsd schedule that holds its peak from the end of warm-up
# (step 4) to the halfway point, then decays to 0 at step MUON_STEPS: a run resumed halfway must
# restore both optimizers' states and the schedule's.
MUON_STEPS = 20
MUON_OVERRIDES = ["train.optimizer=muon", "train.lr_schedule=wsd", "train.decay_fraction=0.5",
                  "train.warmup=4", "train.step_checkpoints=full"]


def test_a_resumed_muon_run_equals_the_uninterrupted_one(recipe_path, data, tmp_path):
    straight = run_tiny(recipe_path, data, MUON_STEPS, tmp_path / "straight",
                        *MUON_OVERRIDES).run_dir
    # The same run as a crash after step 10's validation leaves it (its budget the same, so
    # the schedule is too): what was written after that checkpoint is lost.
    crashed = shutil.copytree(straight, tmp_path / "crashed")
    for name in ("last.pt", f"step_{MUON_STEPS}.pt"):
        (crashed / name).unlink()
    shutil.copy(crashed / f"step_{MUON_STEPS // 2}.pt", crashed / "best.pt")  # the first is best
    assert newest_checkpoint(crashed)[1]["step"] == MUON_STEPS // 2
    resume_tiny(crashed, MUON_STEPS)
    assert curve(crashed) == curve(straight)  # exact: same batches, dropout masks, updates
    peak = 3e-3  # each record's rate: the one its step used, set from the budget before it
    assert [lr for *_, lr in curve(straight)] == pytest.approx(
        [peak, peak, peak * (1 - math.sqrt(0.4)), peak * (1 - math.sqrt(0.9))])
    last = f"step_{MUON_STEPS}.pt"  # the training state at the end (step_checkpoints=full)
    ours, theirs = read_checkpoint(crashed / last), read_checkpoint(straight / last)
    assert ours["step"] == theirs["step"] == MUON_STEPS
    for key in ("model", "train_model"):  # EMA and raw weights, bit for bit
        assert all(torch.equal(ours[key][k], theirs[key][k]) for k in theirs[key])
    for key in ("optimizer", "muon"):  # Adam's moments and step counts, Muon's momentum
        state, their_state = ours[key]["state"], theirs[key]["state"]
        assert state.keys() == their_state.keys() and len(state) > 0
        assert all(torch.equal(state[i][k], their_state[i][k]) for i in state
                   for k in their_state[i])
        assert ours[key]["param_groups"] == theirs[key]["param_groups"]
        assert theirs[key]["param_groups"][0]["lr"] == 0.0  # the budget ran out
    assert ours["trainer"]["warmup_end"] == theirs["trainer"]["warmup_end"] == 4 / MUON_STEPS


def as_written_before(data: dict) -> dict:
    """Checkpoint `data` as translate wrote it while torch's LambdaLR set the learning rates:
    the schedule's state under "scheduler" and "muon_scheduler" (its decay_from where
    trainer.warmup_end is now), and each optimizer's parameter groups holding the peak as
    initial_lr."""
    train, step = data["recipe"]["train"], data["step"]
    old = {**data, "trainer": {k: v for k, v in data["trainer"].items() if k != "warmup_end"}}
    for key, scheduler, peak in (("optimizer", "scheduler", train["lr"]),
                                 ("muon", "muon_scheduler", train["muon_lr"])):
        groups = [{**group, "initial_lr": peak} for group in data[key]["param_groups"]]
        old[key] = {**data[key], "param_groups": groups}
        old[scheduler] = {
            "base_lrs": [peak] * len(groups), "last_epoch": step, "_step_count": step + 1,
            "_get_lr_called_within_step": False, "_last_lr": [g["lr"] for g in groups],
            "lr_lambdas": [{"kind": train["lr_schedule"], "warmup": train["warmup"],
                            "decay_fraction": train["decay_fraction"],
                            "progress": step / train["max_steps"],
                            "decay_from": data["trainer"]["warmup_end"]} for _ in groups]}
    return old


def test_a_checkpoint_from_before_the_trainer_set_the_rate_resumes_exactly(recipe_path, data,
                                                                           tmp_path):
    """A checkpoint with LambdaLR's state (`training.checkpoints.upgrade_training_state`):
    a linear decay from the end of warm-up, at a fifth of the budget, goes on from there."""
    overrides = [*MUON_OVERRIDES, "train.lr_schedule=linear"]
    straight = run_tiny(recipe_path, data, MUON_STEPS, tmp_path / "straight", *overrides).run_dir
    crashed = shutil.copytree(straight, tmp_path / "crashed")
    for name in ("last.pt", f"step_{MUON_STEPS}.pt"):
        (crashed / name).unlink()
    halfway = crashed / f"step_{MUON_STEPS // 2}.pt"
    write_checkpoint(halfway, as_written_before(read_checkpoint(halfway)))
    shutil.copy(halfway, crashed / "best.pt")
    path, upgraded = newest_checkpoint(crashed)
    assert path == halfway and "scheduler" in read_checkpoint(halfway)
    assert not {"scheduler", "muon_scheduler"} & upgraded.keys()
    assert upgraded["trainer"]["warmup_end"] == 4 / MUON_STEPS
    resume_tiny(crashed, MUON_STEPS)
    assert curve(crashed) == curve(straight)  # exact: the same rates, updates and losses
    last = f"step_{MUON_STEPS}.pt"
    ours, theirs = read_checkpoint(crashed / last), read_checkpoint(straight / last)
    assert all(torch.equal(ours["model"][k], theirs["model"][k]) for k in theirs["model"])
    for key in ("optimizer", "muon"):  # initial_lr gone: today's layout
        assert ours[key]["param_groups"] == theirs[key]["param_groups"]


def test_step_checkpoints_hold_the_weights_alone_and_best_is_a_file_of_its_own(straight):
    """train.step_checkpoints: weights (the default): step_N.pt holds the EMA and the raw
    weights, for decode and average --raw, without Adam's moments; best.pt holds the same bytes
    as the improved step's file but is another file; last.pt alone holds the training state."""
    step, best, last = (straight / n for n in ("step_40.pt", "best.pt", "last.pt"))
    data = read_checkpoint(step)
    assert data["weights_only"] is True and data["step"] == STEPS
    assert {"model", "train_model"} <= data.keys() and not {"optimizer", "trainer"} & data.keys()
    assert best.read_bytes() == step.read_bytes()  # dev BLEU rose at step 40
    assert best.stat().st_ino != step.stat().st_ino and best.stat().st_nlink == 1
    storages = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes()
                for t in data["model"].values()}  # tied embeddings: one storage, three names
    weights = sum(storages.values())
    assert data["tokenizer"]["src"].untyped_storage().data_ptr() == \
        data["tokenizer"]["tgt"].untyped_storage().data_ptr()  # a joint model, stored once
    extras = data["tokenizer"]["src"].numel()  # + the recipe and the file's own structure
    assert 2 * weights < step.stat().st_size - extras < 2.1 * weights  # EMA and raw weights
    assert last.stat().st_size > 3.9 * weights  # + Adam's two moments
    assert sorted(p.name for p in straight.glob("step_*.pt")) == ["step_30.pt", "step_40.pt"]


def test_a_damaged_last_pt_with_weights_only_steps_is_one_clear_error(halfway, tmp_path, caplog):
    run = shutil.copytree(halfway, tmp_path / "run")
    last = run / "last.pt"
    last.write_bytes(last.read_bytes()[: last.stat().st_size // 2])
    kept = {p.name: p.read_bytes() for p in run.glob("*.pt")}
    with pytest.raises(CheckpointError, match="step_checkpoints: weights hold the weights alone"):
        resume_tiny(run, STEPS)
    assert {p.name: p.read_bytes() for p in run.glob("*.pt")} == kept  # nothing lost
    skipped = [r.getMessage() for r in caplog.records if r.getMessage().startswith("skipping")]
    assert len(skipped) == 1 and str(last) in skipped[0]  # the weights-only ones, silently


def test_resume_skips_corrupt_checkpoints_and_falls_back(straight, crashed_full, caplog):
    crashed = crashed_full
    last, step_20 = crashed / "last.pt", crashed / "step_20.pt"
    last.write_bytes(last.read_bytes()[: last.stat().st_size // 2])  # truncated by a crash
    step_20.write_bytes(b"\0" * 1000)
    with caplog.at_level(logging.WARNING, logger="translate"):
        path, data = newest_checkpoint(crashed)
    assert path.name == "step_10.pt" and data["step"] == 10
    skipped = [r.getMessage() for r in caplog.records if r.getMessage().startswith("skipping")]
    assert len(skipped) == 2
    assert str(last) in skipped[0] and str(step_20) in skipped[1]
    resume_tiny(crashed, 30)
    assert curve(crashed) == curve(straight)[:6]  # steps 5..30, the ones after 10 trained again
    assert read_checkpoint(step_20)["step"] == 20  # the damaged file was written again


def test_resume_with_nothing_readable_names_the_folder(halfway, tmp_path):
    run = shutil.copytree(halfway, tmp_path / "run")
    for path in run.glob("*.pt"):
        path.write_bytes(b"")
    with pytest.raises(ValueError, match=f"no readable checkpoint to resume from in {run}"):
        resume_tiny(run, STEPS)


def test_resume_refuses_a_train_split_that_changed(halfway, data, tmp_path):
    run = shutil.copytree(halfway, tmp_path / "run")
    moved = shutil.copytree(data, tmp_path / "data")
    cfg = load_run_recipe(run, [f"train.max_steps={STEPS}"])
    cfg = replace(cfg, data=replace(cfg.data, dataset=str(moved)))  # as `--resume --data` does
    train_file = moved / "train.jsonl"
    train_file.write_text(train_file.read_text(encoding="utf-8").replace("Two young", "Two old", 1),
                          encoding="utf-8")
    with pytest.raises(CheckpointError, match="the train split is not the one this run was trained"):
        train(cfg, run, device="cpu", progress=False, resume=True)


@pytest.mark.parametrize("value, says", [("half", "weights, full"), ("", "weights, full"),
                                         ("[weights]", "expected str"), ("1", "expected str")])
def test_step_checkpoints_takes_weights_or_full_only(recipe_path, value, says):
    with pytest.raises(ValueError, match=f"train.step_checkpoints: .*{re.escape(says)}"):
        load_recipe(recipe_path, [f"train.step_checkpoints={value}"])
