"""Learning-rate schedules: inverse square root, and linear/cosine decays that end with the budget."""

import json
import math

import pytest
import torch

from conftest import TINY_OVERRIDES, train_tiny
from translate.config import ConfigError, load_recipe
from translate.training import train
from translate.training.optim import LRSchedule


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
                                                   "progress": 1.0, "decay_from": 0.75}
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
