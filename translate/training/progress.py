"""The training progress bar: steps out of `train.max_steps`, or, when a time budget
(`train.max_minutes`) alone ends the run, the budget's minutes, with the time left as its ETA."""

from __future__ import annotations

from translate.config import TrainConfig


class TrainingBar:
    """A tqdm bar that one call a step (`advance`) moves by a step or by the seconds it took."""

    def __init__(self, cfg: TrainConfig, step: int = 0, elapsed: float = 0.0,
                 enabled: bool = True, file=None):
        from tqdm.auto import tqdm

        self.by_time = bool(cfg.max_minutes) and not cfg.max_steps
        if self.by_time:  # n counts seconds of the budget; the step goes into the postfix
            self.bar = tqdm(total=round(cfg.max_minutes * 60), initial=round(elapsed),
                            disable=not enabled, dynamic_ncols=True, file=file,
                            bar_format="{percentage:3.0f}%|{bar}| {elapsed}<{remaining} of the "
                                       "time budget{postfix}")
        else:
            self.bar = tqdm(total=cfg.max_steps or None, initial=step, disable=not enabled,
                            unit="step", dynamic_ncols=True, file=file)
        self.step = step
        self.dev: float | None = None  # the last validation's dev BLEU, once there is one

    def advance(self, step: int, elapsed: float) -> None:
        """Training reached `step` after `elapsed` seconds of the run."""
        self.step = step
        if self.by_time:
            self.bar.update(max(0, round(elapsed) - self.bar.n))
        else:
            self.bar.update(1)

    def show(self, **figures) -> None:
        """Figures after the bar (the step too, when the bar counts time)."""
        self.bar.set_postfix(**({"step": self.step} if self.by_time else {}), **figures)

    def show_record(self, record: dict, window, epoch: int) -> None:
        """After a train `record` of the steps in `window` (a LogWindow): the loss, the rate,
        steps/s, target tokens/s, the last dev BLEU, the epoch and the resident memory."""
        steps_s = len(window.losses) / max(window.seconds, 1e-9)
        dev = {} if self.dev is None else {"dev": f"{self.dev:.1f}"}
        memory = {"mem": f"{record['rss_mb'] / 1024:.2f}G"} if "rss_mb" in record else {}
        self.show(loss=f"{record['loss']:.3f}", lr=f"{record['lr']:.2e}", steps_s=f"{steps_s:.2f}",
                  tok_s=f"{record['tok_per_s']:.0f}", **dev, ep=epoch, **memory)

    def close(self) -> None:
        self.bar.close()

