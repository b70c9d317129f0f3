"""Figures drawn from run folders' metrics logs (matplotlib, written as PNG)."""

from __future__ import annotations

import json
from pathlib import Path


class MetricsError(ValueError):
    """A missing or unreadable metrics log; the message names the file."""


def read_metrics(run_dir: str | Path) -> list[dict]:
    """All records of a run's metrics.jsonl, in order."""
    path = Path(run_dir) / "metrics.jsonl"
    if not path.is_file():
        raise MetricsError(f"no metrics log at {path}")
    records = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            raise MetricsError(f"{path}: line {number} is not valid JSON (truncated log?)") from None
    return records


def plot_learning_curves(run_dirs: list[str | Path], output: str | Path,
                         monitor: str = "test_2016_flickr") -> Path:
    """Dev BLEU (solid) and, where logged, a monitored split's BLEU (dashed) against minutes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=130)
    for run_dir in run_dirs:
        valid = [r for r in read_metrics(run_dir) if r["kind"] == "valid"]
        if not valid:
            raise MetricsError(f"{Path(run_dir) / 'metrics.jsonl'}: no validation records")
        minutes = [r["elapsed"] / 60 for r in valid]
        name = Path(run_dir).name
        line, = ax.plot(minutes, [r["dev_bleu"] for r in valid], marker="o", ms=3,
                        label=f"{name}: dev BLEU")
        key = f"{monitor}_bleu"
        if all(key in r for r in valid):
            ax.plot(minutes, [r[key] for r in valid], ls="--", color=line.get_color(),
                    label=f"{name}: {monitor} BLEU")
    ax.set_xlabel("training wall-clock (minutes, validation included)")
    ax.set_ylabel("sacreBLEU (detokenized, cased, greedy)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    output = Path(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(output)
    plt.close(fig)
    return output
