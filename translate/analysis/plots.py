"""Figures (matplotlib, Agg backend, written as PNG): learning curves from run folders' metrics
logs, BLEU by sentence length, attention heatmaps.

Tests: tests/analysis/test_curve.py, tests/analysis/test_reach.py,
tests/analysis/test_attention_figures.py.
"""

from __future__ import annotations

import io
import json
import math
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

import numpy as np

from translate.files import open_regular, output_kind
from translate.utils import atomic_write, install_hint

# how the image files a figure may replace begin: PNG, PDF, SVG, JPEG, PostScript
IMAGE_STARTS = (b"\x89PNG", b"%PDF", b"<?xml", b"<svg", b"\xff\xd8\xff", b"%!PS")


class MetricsError(ValueError):
    """A missing or unreadable metrics log; the message names the file."""


def read_metrics(run_dir: str | Path) -> list[dict]:
    """All records of a run's metrics.jsonl, in order, each checked (`_check_record`); a log
    that is a FIFO or a device is refused unread (an UnsafeFileError naming what it is)."""
    path = Path(run_dir) / "metrics.jsonl"
    try:
        with open_regular(path, follow=True, what="metrics log") as f:  # never a FIFO or /dev/zero
            data = f.read()
    except FileNotFoundError:
        raise MetricsError(f"no metrics log at {path}") from None
    records = []
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise MetricsError(f"{path}: not valid UTF-8 (byte {e.start})") from None
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            raise MetricsError(f"{path}: line {number} is not valid JSON (truncated log?)") from None
        _check_record(record, f"{path}: line {number}")
        records.append(record)
    return records


# The numbers each kind of record must hold for the curves and the comparison report.
RECORD_NUMBERS = {"train": ("step", "elapsed", "tok_per_s"), "valid": ("step", "elapsed", "dev_bleu"),
                  "test": ("step", "bleu")}


# The fields that hold seconds of wall-clock; those that hold a BLEU end in "bleu" ("dev_bleu",
# "bleu", "<split>_bleu").
SECONDS_KEYS = ("elapsed", "train_seconds")


def _check_record(record, where: str) -> None:
    if not isinstance(record, dict) or not isinstance(record.get("kind"), str):
        raise MetricsError(f"{where} is not a metrics record (a JSON object with a 'kind')")
    for key in RECORD_NUMBERS.get(record["kind"], ()):
        value = record.get(key)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise MetricsError(f"{where}: its {record['kind']} record has {value!r} under "
                               f"'{key}', not a number")
    for key, value in record.items():  # a number no run can log (NaN fails every comparison)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        if key.endswith("bleu") and not 0 <= value <= 100:
            raise MetricsError(f"{where}: its {record['kind']} record has {value!r} under "
                               f"'{key}', not a BLEU from 0 to 100")
        if key in SECONDS_KEYS and not 0 <= value < math.inf:
            raise MetricsError(f"{where}: its {record['kind']} record has {value!r} under "
                               f"'{key}', not a time in seconds (finite, not negative)")


# What a learning curve's x axis can be: the value read from a "valid" record, and its label.
CURVE_AXES = {
    "minutes": (lambda r: r["elapsed"] / 60, "training wall-clock (minutes, validation included)"),
    "steps": (lambda r: r["step"], "training steps (optimizer updates)"),
}


def learning_curve(valid: list[dict], x: str = "minutes", key: str = "dev_bleu"
                   ) -> tuple[list[float], list[float]]:
    """The points of one run's curve: `x` ("minutes" or "steps") and `key`'s value of each
    "valid" record."""
    position = CURVE_AXES[x][0]
    return [position(r) for r in valid], [r[key] for r in valid]


def plot_learning_curves(run_dirs: list[str | Path], output: str | Path,
                         monitor: str = "test_2016_flickr", x: str = "minutes",
                         thresholds: Sequence[float] = ()) -> Path:
    """Dev BLEU (solid) and, where logged, a monitored split's BLEU (dashed) against minutes or
    steps (`x`): steps compare runs made on machines of different speed. Each of `thresholds`
    is a dotted horizontal line."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=130)
    for run_dir in run_dirs:
        valid = [r for r in read_metrics(run_dir) if r["kind"] == "valid"]
        if not valid:
            raise MetricsError(f"{Path(run_dir) / 'metrics.jsonl'}: no validation records")
        name = Path(run_dir).name
        line, = ax.plot(*learning_curve(valid, x), marker="o", ms=3, label=f"{name}: dev BLEU")
        key = f"{monitor}_bleu"
        if all(key in r for r in valid):
            ax.plot(*learning_curve(valid, x, key), ls="--", color=line.get_color(),
                    label=f"{name}: {monitor} BLEU")
    for threshold in thresholds:
        ax.axhline(threshold, ls=":", lw=1, color="grey")
    ax.set_xlabel(CURVE_AXES[x][1])
    ax.set_ylabel("sacreBLEU (detokenized, cased, greedy)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return save_figure(fig, output)


def pyplot():
    """matplotlib.pyplot on the file-only Agg backend, or a ValueError saying how to install it."""
    try:
        import matplotlib
    except ImportError:
        raise ValueError(f"figures need matplotlib: {install_hint('plots')}") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig, output: str | Path) -> Path:
    """Write `fig` to `output` (its format from the suffix; PNG without one) whole or not at
    all; a FIFO or a device is written into, and an existing file is replaced only if it is an
    image (never a checkpoint, a log or a text of the user's)."""
    output, buffer = Path(output), io.BytesIO()
    try:
        check_figure_output(output)
        fig.savefig(buffer, format=output.suffix[1:].lower() or "png")
    finally:
        pyplot().close(fig)
    output.parent.mkdir(parents=True, exist_ok=True)
    if output_kind(output) is not None:  # a FIFO or a device: never replaced
        with open(output, "wb") as f:
            f.write(buffer.getbuffer())
    else:
        with atomic_write(output.resolve()) as f:
            f.write(buffer.getbuffer())
    return output


def check_figure_output(output: Path) -> None:
    """Refuse a figure's output that exists and is not an image, a FIFO or a device."""
    kind = output_kind(output)
    if kind == "a folder":
        raise ValueError(f"{output} is a folder; -o takes the image file to write")
    if kind is not None and kind not in ("a FIFO (named pipe)", "a character device"):
        raise ValueError(f"{output} is {kind}; give an image file to write")
    if kind is None and output.exists():
        with open(output, "rb") as f:
            start = f.read(16)
        if start and not start.lstrip().startswith(IMAGE_STARTS):
            raise ValueError(f"{output} exists and is not an image (a checkpoint, a log, a "
                             f"text?); a figure replaces only an image: give another -o")


def plot_dev_curves(curves: dict[str, list[dict]], output: str | Path) -> Path:
    """Dev BLEU against training wall-clock (left) and against steps (right), one line per run.

    Args:
        curves: run name -> its "valid" records (with step, elapsed, dev_bleu).
    """
    plt = pyplot()
    fig, (by_time, by_step) = plt.subplots(1, 2, figsize=(11, 4.2), dpi=130, sharey=True)
    for name, valid in curves.items():
        by_time.plot(*learning_curve(valid, "minutes"), marker="o", ms=3, label=name)
        by_step.plot(*learning_curve(valid, "steps"), marker="o", ms=3, label=name)
    by_time.set_xlabel(CURVE_AXES["minutes"][1])
    by_step.set_xlabel(CURVE_AXES["steps"][1])
    by_time.set_ylabel("dev BLEU (sacreBLEU, greedy)")
    by_time.set_title("dev BLEU vs wall-clock")
    by_step.set_title("dev BLEU vs steps")
    by_time.set_ylim(bottom=0)
    for ax in (by_time, by_step):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    return save_figure(fig, output)


def plot_length_buckets(labels: Sequence[str], counts: Sequence[int],
                        bleu: dict[str, Sequence[float | None]], output: str | Path) -> Path:
    """Corpus BLEU per source-length bucket, one line per system (as Bahdanau et al. 2014, Fig. 2).

    Args:
        labels, counts: each bucket's name ("11-15") and number of sentences.
        bleu: system name -> BLEU per bucket (None for an empty bucket).
    """
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=130)
    x = np.arange(len(labels))
    for name, values in bleu.items():
        y = [np.nan if v is None else v for v in values]
        ax.plot(x, y, marker="o", label=name)
    ax.set_xticks(x, [f"{label}\n({n} sent.)" for label, n in zip(labels, counts)])
    ax.set_xlabel("source sentence length (words)")
    ax.set_ylabel("corpus BLEU within the bucket")
    ax.set_ylim(bottom=0)
    ax.set_title("BLEU by source sentence length")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return save_figure(fig, output)


@dataclass
class Heatmap:
    """One attention matrix to draw: rows are queries, columns keys."""

    title: str
    weights: np.ndarray  # (rows, columns), each row a distribution over the columns
    x_labels: list[str]  # the keys' pieces
    y_labels: list[str]  # the queries' pieces
    x_name: str = "source"
    y_name: str = "target"
    hidden: Optional[np.ndarray] = None  # (rows, columns) True where a mask hides the cell


def heatmap_grid(rows: list[list[Heatmap]], title: str, max_columns: int = 3):
    """A figure of attention heatmaps with token tick labels on one colour scale, 0 to 1 (a
    weight is a probability), with one colorbar; cells a mask hides are grey, not dark: they
    hold no weight at all, which a weight of zero would not say.

    Each inner list is one row of the grid (wrapped after `max_columns`); the panels are sized
    by the largest matrix so every label stays readable at 7 pt.
    """
    plt = pyplot()
    rows = [row[i: i + max_columns] for row in rows for i in range(0, len(row), max_columns)]
    n_rows, n_cols = len(rows), max(len(row) for row in rows)
    longest = max(max(len(h.x_labels), len(h.y_labels)) for row in rows for h in row)
    cell = 1.2 + 0.12 * longest  # inches per panel side: about 0.12 per token at 7 pt
    fig, axes = plt.subplots(n_rows, n_cols, figsize=(cell * n_cols + 1.0, cell * n_rows + 0.6),
                             dpi=100, squeeze=False, layout="constrained")
    image = None
    for ax_row, row in zip(axes, rows):
        for ax, heatmap in zip(ax_row, row + [None] * (n_cols - len(row))):
            if heatmap is None:
                ax.axis("off")
                continue
            image = draw_heatmap(ax, heatmap)
    fig.colorbar(image, ax=axes, shrink=min(0.8, 3 / n_rows + 0.2),
                 label="attention weight (grey: masked)")
    fig.suptitle("\n".join(textwrap.wrap(title, int(11 * cell * n_cols))), fontsize=10)
    return fig


def draw_heatmap(ax, heatmap: Heatmap, cmap: str = "viridis", vmin: float = 0.0,
                 vmax: float = 1.0):
    """One heatmap on the axes `ax`, with its token tick labels, axis names and title; cells a
    mask hides grey. Returns the image, for a colorbar."""
    colours = pyplot().get_cmap(cmap).with_extremes(bad="#d0d0d0")
    shown = np.ma.masked_array(heatmap.weights,
                               mask=heatmap.hidden if heatmap.hidden is not None else False)
    image = ax.imshow(shown, cmap=colours, vmin=vmin, vmax=vmax, aspect="auto",
                      interpolation="nearest")
    ax.set_xticks(range(len(heatmap.x_labels)), heatmap.x_labels, rotation=90, fontsize=7)
    ax.set_yticks(range(len(heatmap.y_labels)), heatmap.y_labels, fontsize=7)
    ax.set_xlabel(heatmap.x_name, fontsize=8)
    ax.set_ylabel(heatmap.y_name, fontsize=8)
    ax.set_title(heatmap.title, fontsize=8)
    return image


def plot_heatmaps(rows: list[list[Heatmap]], output: str | Path, title: str,
                  max_columns: int = 3) -> Path:
    """`heatmap_grid`, written to `output`."""
    return save_figure(heatmap_grid(rows, title, max_columns), output)
