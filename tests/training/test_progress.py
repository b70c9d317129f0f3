"""The training progress bar counts steps, or the time budget's seconds with the time left."""

import io

from translate.config import TrainConfig
from translate.training.progress import TrainingBar


def test_a_time_budget_bar_counts_its_seconds_and_shows_the_eta():
    out = io.StringIO()
    bar = TrainingBar(TrainConfig(max_minutes=2, max_steps=0), step=40, elapsed=30.0, file=out)
    assert bar.by_time and bar.bar.total == 120 and bar.bar.n == 30  # a resumed run's time
    bar.advance(41, 31.4)
    bar.advance(42, 33.0)
    bar.show(loss="3.210")
    bar.close()
    assert bar.bar.n == 33
    last = out.getvalue().split("\r")[-1]
    assert last.startswith(" 28%|") and "of the time budget" in last and "<" in last
    assert "step=42" in last and "loss=3.210" in last


def test_a_step_limit_bar_counts_steps():
    out = io.StringIO()
    bar = TrainingBar(TrainConfig(max_minutes=60, max_steps=500), step=10, file=out)
    assert not bar.by_time and bar.bar.total == 500
    bar.advance(11, 99.0)
    assert bar.bar.n == 11
    endless = TrainingBar(TrainConfig(max_minutes=0, max_steps=0), file=out)
    assert endless.bar.total is None
