"""Learning-rate schedules: inverse square root, and linear/cosine/wsd decays that end with the
budget."""

import json
import math

import pytest
import torch

from conftest import TINY_OVERRIDES, train_tiny
from translate.config import ConfigError, TrainConfig, load_recipe
from translate.training import TrainState, train
from translate.training.optim import LRSchedule
from translate.training.state import budget_used


@pytest.mark.parametrize("kind, at_0_4", [("linear", 0.75), ("cosine", 0.5 + 0.5 * math.cos(math.pi / 4))])
def test_budget_schedules_warm_up_then_decay_to_zero(kind, at_0_4):
    schedule = LRSchedule(kind, warmup=10)
    assert schedule(0) == 0.1 and schedule(5) == 0.5  # warm-up counts steps
    schedule.progress = 0.2  # warm-up ends with a fifth of the budget used ...
    assert schedule(10) == 1.0 and schedule.decay_from == 0.2
    schedule.progress = 0.4  # ... so the decay spans the other four fifths
    assert math.isclose(schedule(20), at_0_4)
    schedule.progress = 0.6
    assert math.isclose(schedule(30), 0.5)  # both are halfway down halfway through
    schedule.progress = 1.0
    assert schedule(40) == 0.0


def test_wsd_holds_the_peak_then_decays_to_zero_over_the_budgets_last_fraction():
    schedule = LRSchedule("wsd", warmup=10, decay_fraction=0.2)
    assert schedule(0) == 0.1 and schedule(5) == 0.5  # warm-up counts steps
    for step, progress in [(10, 0.05), (20, 0.5), (30, 0.8)]:  # stable: the peak
        schedule.progress = progress
        assert schedule(step) == 1.0
    schedule.progress = 0.85  # a quarter of the decay done: 1 - sqrt(1/4)
    assert math.isclose(schedule(31), 0.5)
    schedule.progress = 1.0
    assert schedule(40) == 0.0


def test_wsd_on_a_time_budget_decays_in_its_last_minutes():
    """The trainer sets `progress` from the budget (`budget_used`): with max_minutes alone the
    decay starts at (1 - decay_fraction) of the minutes, however many steps were taken."""
    cfg = TrainConfig(lr_schedule="wsd", decay_fraction=0.25, warmup=10, max_minutes=40)
    schedule = LRSchedule(cfg.lr_schedule, cfg.warmup, cfg.decay_fraction)

    def rate(step: int, minutes: float) -> float:
        schedule.progress = budget_used(cfg, TrainState(step=step, elapsed=minutes * 60), 0.0, 1)
        return schedule(step)

    assert rate(10, 1) == rate(5000, 29.9) == rate(50, 30) == 1.0  # fast or slow: the peak
    assert math.isclose(rate(60, 35), 1 - math.sqrt(0.5))  # half the last 10 minutes
    assert rate(70, 40) == 0.0


def test_wsd_decays_from_the_end_of_warm_up_when_that_is_later():
    schedule = LRSchedule("wsd", warmup=10, decay_fraction=0.2)
    schedule.progress = 0.9  # warm-up ends past the stable part's end: no jump down
    assert schedule(10) == 1.0 and schedule.decay_from == 0.9
    schedule.progress = 0.925
    assert math.isclose(schedule(11), 0.5)


def test_a_resumed_scheduler_goes_on_where_it_stood():
    """The schedule's state is saved with the scheduler and restored from it."""
    model = torch.nn.Linear(2, 2)

    def scheduler(kind: str) -> torch.optim.lr_scheduler.LambdaLR:
        optimizer = torch.optim.AdamW(model.parameters(), lr=1.0)
        return torch.optim.lr_scheduler.LambdaLR(optimizer, LRSchedule(kind, 4, 0.5))

    ran, resumed = scheduler("wsd"), scheduler("wsd")
    for step in range(1, 8):
        ran.lr_lambdas[0].progress = step / 10
        ran.optimizer.step()  # (no gradients: nothing moves)
        ran.step()
    resumed.load_state_dict(ran.state_dict())
    assert resumed.lr_lambdas[0].__dict__ == {"kind": "wsd", "warmup": 4, "decay_fraction": 0.5,
                                               "progress": 0.7, "decay_from": 0.4}
    for schedule in (ran, resumed):
        schedule.lr_lambdas[0].progress = 0.75
        schedule.optimizer.step()
        schedule.step()
    assert ran.get_last_lr() == resumed.get_last_lr() == [1 - math.sqrt(0.5)]


def test_inverse_sqrt_ignores_the_budget():
    schedule = LRSchedule("inverse_sqrt", warmup=100)
    schedule.progress = 0.9
    assert schedule(50) == 0.5 and math.isclose(schedule(400), 0.5)


def test_a_budget_that_ends_in_warm_up_decays_nothing_after():
    schedule = LRSchedule("linear", warmup=10)
    schedule.progress = 1.0
    assert schedule(9) == 0.9 and schedule(10) == 0.0


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
    assert saved["scheduler"]["lr_lambdas"][0] == {"kind": "linear", "warmup": 30,
                                                   "decay_fraction": 0.2, "progress": 1.0,
                                                   "decay_from": 0.75}
    assert saved["optimizer"]["param_groups"][0]["lr"] == 0.0  # a resumed step would use 0


def test_time_budget_drives_the_decay(recipe_path, small_data, tmp_path):
    cfg = load_recipe(recipe_path, [*TINY_OVERRIDES, "train.lr_schedule=cosine",
                                    "train.warmup=1", "train.max_minutes=0.1",
                                    "train.eval_every=0", "train.log_every=5", "data.test_splits=[]",
                                    f"data.dataset={small_data}"])
    result = train(cfg, tmp_path / "run", device="cpu", progress=False)
    saved = torch.load(result.run_dir / "last.pt", weights_only=True)  # the training state
    state = saved["scheduler"]["lr_lambdas"][0]
    assert state["progress"] == 1.0 and state["decay_from"] == 0.0
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
