"""Learning-rate schedules: inverse square root, and linear/cosine/wsd decays that end with the
budget; the rate a pure function of the step, the budget used and when warm-up ended
(`optim.lr_scale`), written into the optimizers by the trainer."""

import json
import math

import pytest
import torch

from helpers.training import TINY_OVERRIDES, tiny_trainer, train_tiny
from translate.config import ConfigError, TrainConfig, load_recipe
from translate.training import TrainState, train
from translate.training.optim import lr_scale, warmup_ended
from translate.training.state import budget_used


def rates(cfg: TrainConfig, steps_and_used: list[tuple[int, float]]) -> list[float]:
    """`lr_scale` after each (step, budget used) in turn, warmup_end recorded as the trainer
    records it (`warmup_ended`)."""
    warmup_end, scales = None, []
    for step, used in steps_and_used:
        warmup_end = warmup_ended(cfg, step, used, warmup_end)
        scales.append(lr_scale(cfg, step, used, warmup_end))
    return scales


@pytest.mark.parametrize("kind, at_0_4", [("linear", 0.75), ("cosine", 0.5 + 0.5 * math.cos(math.pi / 4))])
def test_budget_schedules_warm_up_then_decay_to_zero(kind, at_0_4):
    cfg = TrainConfig(lr_schedule=kind, warmup=10)
    assert lr_scale(cfg, 0, 0.0, None) == 0.1 and lr_scale(cfg, 5, 0.1, None) == 0.5  # steps
    assert warmup_ended(cfg, 9, 0.18, None) is None  # still warming up
    end = warmup_ended(cfg, 10, 0.2, None)  # warm-up ends with a fifth of the budget used ...
    assert end == 0.2 and lr_scale(cfg, 10, 0.2, end) == 1.0
    assert warmup_ended(cfg, 20, 0.4, end) == 0.2  # recorded once
    assert math.isclose(lr_scale(cfg, 20, 0.4, end), at_0_4)  # ... so the decay spans the rest
    assert math.isclose(lr_scale(cfg, 30, 0.6, end), 0.5)  # both are halfway down halfway through
    assert lr_scale(cfg, 40, 1.0, end) == 0.0


def test_wsd_holds_the_peak_then_decays_to_zero_over_the_budgets_last_fraction():
    cfg = TrainConfig(lr_schedule="wsd", warmup=10, decay_fraction=0.2)
    assert rates(cfg, [(0, 0.0), (5, 0.01)]) == [0.1, 0.5]  # warm-up counts steps
    # stable at the peak, then a quarter of the decay done (1 - sqrt(1/4)), then the end
    scales = rates(cfg, [(10, 0.05), (20, 0.5), (30, 0.8), (31, 0.85), (40, 1.0)])
    assert scales[:3] == [1.0, 1.0, 1.0] and math.isclose(scales[3], 0.5) and scales[4] == 0.0


def test_wsd_on_a_time_budget_decays_in_its_last_minutes():
    """The trainer computes the budget used (`budget_used`): with max_minutes alone the decay
    starts at (1 - decay_fraction) of the minutes, however many steps were taken."""
    cfg = TrainConfig(lr_schedule="wsd", decay_fraction=0.25, warmup=10, max_minutes=40)

    def rate(step: int, minutes: float) -> float:
        used = budget_used(cfg, TrainState(step=step, elapsed=minutes * 60), 0.0, 1)
        return lr_scale(cfg, step, used, warmup_end=1 / 40)  # warm-up ended after a minute

    assert rate(10, 1) == rate(5000, 29.9) == rate(50, 30) == 1.0  # fast or slow: the peak
    assert math.isclose(rate(60, 35), 1 - math.sqrt(0.5))  # half the last 10 minutes
    assert rate(70, 40) == 0.0


def test_wsd_decays_from_the_end_of_warm_up_when_that_is_later():
    cfg = TrainConfig(lr_schedule="wsd", warmup=10, decay_fraction=0.2)
    end = warmup_ended(cfg, 10, 0.9, None)  # warm-up ends past the stable part's end
    assert end == 0.9 and lr_scale(cfg, 10, 0.9, end) == 1.0  # no jump down
    assert math.isclose(lr_scale(cfg, 11, 0.925, end), 0.5)


def test_the_rate_is_a_function_of_the_step_the_budget_and_the_end_of_warm_up():
    """What a resumed run needs to go on where it stood is the state's warmup_end: the same
    step and budget give the same rate, whatever came before."""
    cfg = TrainConfig(lr_schedule="wsd", warmup=4, decay_fraction=0.5)
    ran = rates(cfg, [(step, step / 10) for step in range(0, 9)])
    assert warmup_ended(cfg, 4, 0.4, None) == 0.4
    assert lr_scale(cfg, 8, 0.8, warmup_end=0.4) == ran[-1]
    assert math.isclose(ran[-1], 1 - math.sqrt(0.6))  # from 0.5 (the stable part's end) on


def test_inverse_sqrt_ignores_the_budget():
    cfg = TrainConfig(lr_schedule="inverse_sqrt", warmup=100)
    assert lr_scale(cfg, 50, 0.9, None) == 0.5 and math.isclose(lr_scale(cfg, 400, 0.9, None), 0.5)
    assert warmup_ended(cfg, 400, 0.9, None) is None  # nothing to record


def test_a_budget_that_ends_in_warm_up_decays_nothing_after():
    cfg = TrainConfig(lr_schedule="linear", warmup=10)
    assert rates(cfg, [(9, 1.0), (10, 1.0)]) == [0.9, 0.0]


def test_muon_follows_adamws_schedule_from_its_own_peak(recipe_path, small_data, tmp_path):
    """`Updater.set_lr` writes one scale into both optimizers' parameter groups, times each
    one's peak: train.lr for AdamW, train.muon_lr for Muon."""
    trainer = tiny_trainer(recipe_path, small_data, tmp_path / "run", "train.optimizer=muon")
    trainer.updater.set_lr(0.25)
    assert [g["lr"] for g in trainer.updater.optimizer.param_groups] == \
        [0.25 * trainer.cfg.lr] * len(trainer.updater.optimizer.param_groups)
    assert [g["lr"] for g in trainer.updater.muon.param_groups] == \
        [0.25 * trainer.cfg.muon_lr] * len(trainer.updater.muon.param_groups)
    assert trainer.updater.lr == 0.25 * trainer.cfg.lr


def lr_records(run_dir) -> list[tuple[int, float]]:
    lines = (run_dir / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
    return [(r["step"], r["lr"]) for r in map(json.loads, lines) if r["kind"] == "train"]


def test_linear_schedule_reaches_zero_at_max_steps(recipe_path, small_data, tmp_path):
    result = train_tiny(recipe_path, [*TINY_OVERRIDES, "train.lr_schedule=linear",
                                      "train.eval_every=40", "data.test_splits=[]"],
                        small_data, 40, tmp_path / "run")
    lrs = lr_records(result.run_dir)
    assert [step for step, _ in lrs] == [10, 20, 30, 40]
    # each record: the rate its step used, set from the budget used before it. Warm-up takes
    # 30 steps to 3e-3; the decay, the last quarter of the budget (steps 31-40) down to 0.
    expected = [3e-3 * 9 / 30, 3e-3 * 19 / 30, 3e-3 * 29 / 30, 3e-3 * (1 - 9 / 10)]
    for (_, lr), want in zip(lrs, expected):
        assert math.isclose(lr, want, rel_tol=1e-6, abs_tol=1e-12)
    saved = torch.load(result.run_dir / "last.pt", weights_only=True)  # the safe loader
    assert saved["trainer"]["warmup_end"] == 0.75 and "scheduler" not in saved  # 30 of 40
    assert saved["optimizer"]["param_groups"][0]["lr"] == 0.0  # a resumed step would use 0


def test_time_budget_drives_the_decay(recipe_path, small_data, tmp_path):
    cfg = load_recipe(recipe_path, [*TINY_OVERRIDES, "train.lr_schedule=cosine",
                                    "train.warmup=1", "train.max_minutes=0.1",
                                    "train.eval_every=0", "train.log_every=5", "data.test_splits=[]",
                                    f"data.dataset={small_data}"])
    result = train(cfg, tmp_path / "run", device="cpu", progress=False)
    saved = torch.load(result.run_dir / "last.pt", weights_only=True)  # the training state
    assert saved["trainer"]["warmup_end"] == 0.0  # one step of warm-up: over at the start
    assert saved["optimizer"]["param_groups"][0]["lr"] == 0.0  # stopped as the budget ran out
    lrs = [lr for _, lr in lr_records(result.run_dir)]
    assert lrs == sorted(lrs, reverse=True) and lrs[0] < 3e-3  # down from the first step


def test_budget_schedule_needs_a_budget(recipe_path, small_data, tmp_path):
    with pytest.raises(ConfigError, match="set train.max_steps, max_minutes or max_epochs"):
        cfg = load_recipe(recipe_path, [*TINY_OVERRIDES, "train.lr_schedule=linear",
                                        "train.max_minutes=0", f"data.dataset={small_data}"])
        train(cfg, tmp_path / "run", device="cpu", progress=False)
    assert not (tmp_path / "run" / "best.pt").exists()


def test_unknown_schedule_is_refused(recipe_path):
    with pytest.raises(ConfigError, match="'warmup_stable' is not one of inverse_sqrt, linear"):
        load_recipe(recipe_path, ["train.lr_schedule=warmup_stable"])


@pytest.mark.parametrize("value", ["0", "-0.1", "1.5"])
def test_decay_fraction_is_a_fraction_of_the_budget(recipe_path, value):
    with pytest.raises(ConfigError, match=f"train.decay_fraction: must .*got {value}"):
        load_recipe(recipe_path, ["train.lr_schedule=wsd", f"train.decay_fraction={value}"])
    assert load_recipe(recipe_path, ["train.decay_fraction=1"]).train.decay_fraction == 1.0
