"""The run's metrics log: one JSON object a line (metrics.jsonl), mirrored to TensorBoard.

Tests: tests/training/test_training.py, tests/training/test_step.py.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from translate.utils import atomic_write, install_hint

log = logging.getLogger(__name__)

END_OF_RUN = ("test", "pick")  # the records a run writes once it has trained: the pick, test scores


class MetricsLog:
    """Append-only JSON lines (metrics.jsonl), mirrored to TensorBoard when it is installed."""

    def __init__(self, path: Path, enabled: bool = True):
        self.path, self.enabled = path, enabled  # disabled: a rank other than 0 writes nothing
        self.file = self.tb = None  # opened by the first write: a run that fails first leaves none
        self.purge_step: Optional[int] = None  # TensorBoard hides its events from here (resuming)
        self.told = False  # that TensorBoard is not installed

    def _tensorboard(self, purge_step: Optional[int] = None):
        """A TensorBoard writer, hiding earlier events from `purge_step` on; None without it."""
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:  # tensorboard is optional: say so once, and go on without it
            if not self.told:
                log.info("no TensorBoard events (metrics.jsonl only): %s for them",
                         install_hint("tensorboard"))
                self.told = True
            return None
        return SummaryWriter(str(self.path.parent / "tensorboard"), purge_step=purge_step)

    def write(self, record: dict) -> None:
        if not self.enabled:
            return
        if self.file is None:
            self.file = open(self.path, "a", encoding="utf-8")
            self.tb = self._tensorboard(self.purge_step)
        self.file.write(json.dumps(record) + "\n")
        self.file.flush()
        if self.tb is not None:
            for key, value in record.items():
                if isinstance(value, (int, float)) and key not in ("step", "kind"):
                    self.tb.add_scalar(f"{record['kind']}/{key}", value, record["step"])

    def truncate(self, step: int) -> None:
        """Keep only the records up to `step` (resuming from it), so no step is logged twice.

        The end-of-run records go too (the run goes on), as does a line cut short by a crash;
        TensorBoard hides its events after `step`.
        """
        if not self.enabled:
            return
        self.close()
        text = self.path.read_text(encoding="utf-8", errors="replace") if self.path.exists() else ""
        kept = []
        for line in text.splitlines():
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue
            if not isinstance(record, dict) or not isinstance(record.get("step", 0), (int, float)):
                continue  # not a record this log wrote
            if record.get("step", 0) <= step and record.get("kind") not in END_OF_RUN:
                kept.append(line + "\n")
        with atomic_write(self.path, "w") as f:
            f.write("".join(kept))
        self.purge_step = step + 1

    def close(self) -> None:
        if self.file is not None:
            self.file.close()
        if self.tb is not None:
            self.tb.close()
        self.file = self.tb = None


@dataclass
class LogWindow:
    """Steps since the last train record: averaged into the next one (and saved for resuming)."""

    losses: list = field(default_factory=list)
    tokens: int = 0
    seconds: float = 0.0
