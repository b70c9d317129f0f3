"""Where training stands: `TrainState`, the one list of counters a checkpoint saves and a resume
restores, and the budget they are measured against.

Tests: tests/training/test_schedule.py.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields

from translate.config import TrainConfig
from translate.hardware import resident_memory
from translate.metrics import LogWindow


class TrainingError(RuntimeError):
    """Training cannot go on (say, the loss diverged); the message says why and what to change."""


@dataclass
class TrainState:
    """The counters that resume a run exactly. The batch order is a function of the seed and the
    epoch alone, so `epoch` and `position` say which batch comes next."""

    step: int = 0  # optimizer steps taken
    epoch: int = 0  # 1-based once training has started
    position: int = 0  # index of the next batch in this epoch's order
    elapsed: float = 0.0  # wall-clock seconds of training so far (validations included)
    train_seconds: float = 0.0  # seconds spent in optimizer steps
    best_bleu: float = -1.0  # the best dev BLEU so far
    bad_evals: int = 0  # validations since the best one (patience)
    bad_losses: int = 0  # steps skipped for a NaN/inf loss
    window: LogWindow = field(default_factory=LogWindow)  # steps since the last train record
    # the budget's fraction used when warm-up ended: where the schedules that decay with the
    # budget start (`optim.lr_scale`); None before then, and for inverse_sqrt
    warmup_end: float | None = None

    def to_checkpoint(self, corpus: str) -> dict:
        """The checkpoint's "trainer" entry (the step is saved beside it, as every checkpoint
        holds one); `corpus` names the encoded train split, which a resume must find again."""
        state = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "step"}
        return {**state, "window": asdict(self.window), "corpus": corpus}

    @classmethod
    def from_checkpoint(cls, data: dict, corpus: str) -> "TrainState":
        """The state `to_checkpoint` saved in checkpoint `data`; refuses another train split."""
        state = data["trainer"]
        if state.get("corpus", corpus) != corpus:
            raise TrainingError("the train split is not the one this run was trained on (a file's "
                                "size or content changed since the checkpoint); restore it, or "
                                "start a new run to train on the new data")
        saved = {f.name: state[f.name] for f in fields(cls) if f.name not in ("step", "window")}
        return cls(step=int(data["step"]), window=LogWindow(**state["window"]), **saved)


def budget_used(cfg: TrainConfig, state: TrainState, ahead: float, epoch_batches: int) -> float:
    """The fraction of the training budget used: of max_steps, max_minutes (`ahead` seconds, the
    last validation's time, counted ahead as the stopping rule does) or max_epochs, whichever is
    furthest along; 0.0 with no budget."""
    used = [0.0]
    if cfg.max_steps:
        used.append(state.step / cfg.max_steps)
    if cfg.max_minutes:
        used.append((state.elapsed + ahead) / (cfg.max_minutes * 60))
    if cfg.max_epochs:
        done = state.epoch - 1 + state.position / max(epoch_batches, 1)
        used.append(done / cfg.max_epochs)
    return min(max(used), 1.0)


def out_of_budget(cfg: TrainConfig, state: TrainState, ahead: float) -> bool:
    """Steps or minutes spent; minutes early enough that a validation taking `ahead` seconds
    ends within them (epochs end in `Trainer.end_epoch`)."""
    out_of_time = cfg.max_minutes and state.elapsed + ahead >= cfg.max_minutes * 60
    return bool(out_of_time or (cfg.max_steps and state.step >= cfg.max_steps))


def validation_due(cfg: TrainConfig, state: TrainState, since_eval: float) -> bool:
    """Every `eval_every` steps, or `eval_every_minutes` after the last validation."""
    by_steps = cfg.eval_every and state.step % cfg.eval_every == 0
    return bool(by_steps or (cfg.eval_every_minutes and since_eval >= cfg.eval_every_minutes * 60))


def train_record(state: TrainState, lr: float, world_size: int) -> dict:
    """The metrics log's train record: the averages of the window's settled steps, and this
    process's resident memory now and at its peak (MiB; absent where the platform does not say)."""
    w = state.window
    rss, peak = resident_memory()
    memory = {name: round(value / 2**20, 1) for name, value in (("rss_mb", rss),
              ("peak_rss_mb", peak)) if value is not None}
    return {"kind": "train", "step": state.step, "epoch": state.epoch,
            "loss": sum(w.losses) / len(w.losses), "lr": lr,
            "tok_per_s": w.tokens / max(w.seconds, 1e-9), "elapsed": state.elapsed,
            "train_seconds": state.train_seconds, "world_size": world_size,
            "step_tokens": w.tokens / len(w.losses), **memory}  # step_tokens: all ranks


def valid_record(state: TrainState, losses: dict, bleus: dict, improved: bool) -> dict:
    """The metrics log's valid record: a validation's dev loss and BLEUs (`improved`: the best
    dev BLEU so far), at the state it was taken in."""
    return {"kind": "valid", "step": state.step, "epoch": state.epoch, **losses,
            "best": improved, "elapsed": state.elapsed, "train_seconds": state.train_seconds,
            **bleus}
