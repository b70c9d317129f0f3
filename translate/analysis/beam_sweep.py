"""`translate tune-beam`: choose the beam size and length penalty on a dev split.

Every pair (beam, length penalty) of a grid decodes the split once with the checkpoint; the
setting with the highest BLEU there is the choice (ties go to the smaller beam, then the smaller
penalty: as good, and faster). Greedy search has no penalty to apply, so beam 1 decodes once and
fills its row. A test split is refused: decoding is chosen on dev, as everything else is, and
the test split is read once afterwards with the chosen setting (`translate evaluate`).
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Callable, Sequence

from translate.analysis.plots import pyplot, save_figure
from translate.analysis.report import markdown_table
from translate.config import ConfigError, decode_options
from translate.data.read import load_split
from translate.evaluation import evaluate_split, read_from
from translate.inference import translate_sentences
from translate.ready import Ready

log = logging.getLogger(__name__)
WARM_UP = 64  # sentences decoded once, untimed, before the grid


@dataclass
class SweepPoint:
    """One setting's result on the split."""

    beam: int
    lenpen: float
    bleu: float
    chrf: float
    length_ratio: float  # hypothesis length / reference length (BLEU's brevity penalty under 1)
    sentences_per_s: float

    def line(self) -> str:
        """The point as `translate tune-beam` reports it while it sweeps."""
        return (f"beam {self.beam}, length penalty {self.lenpen:g}: BLEU {self.bleu:.2f} "
                f"({self.sentences_per_s:.0f} sentences/s)")


@dataclass
class BeamSweep:
    checkpoint: str
    split: str
    sentences: int
    precision: str
    early_exit: bool
    recipe_beam: int  # the checkpoint's recipe's decode.beam and decode.lenpen
    recipe_lenpen: float
    bleu_signature: str
    points: list[SweepPoint]

    def best(self) -> SweepPoint:
        """The highest BLEU; ties to the smaller beam, then the smaller penalty."""
        return max(self.points, key=lambda p: (round(p.bleu, 2), -p.beam, -p.lenpen))

    def at(self, beam: int, lenpen: float) -> SweepPoint | None:
        return next((p for p in self.points if p.beam == beam and p.lenpen == lenpen), None)


def check_dev_split(split: str, test_splits: Sequence[str]) -> None:
    """Refuse a test split: a setting chosen on it would make its score a tuned one."""
    if split in test_splits or split.lower().startswith("test"):
        raise ConfigError(f"'{split}' is a test split: choose decoding on a dev split (--split "
                          f"dev), then read the test split once with the chosen setting "
                          f"(translate evaluate --beam B --lenpen A)")


def sweep_beams(checkpoint: str, split: str = "dev", beams: Sequence[int] = (1, 2, 4, 5, 8),
                lenpens: Sequence[float] = (0.0, 0.3, 0.6, 1.0, 1.5),
                data_path: str | None = None, device: str | None = None,
                precision: str | None = None, engine: str | None = None,
                early_exit: bool | None = None,
                report: Callable[[SweepPoint], None] = lambda point: None) -> BeamSweep:
    """Decode `split` with every (beam, length penalty) of the grid; `report` hears each result.

    Unset options come from the checkpoint's recipe and `Ready.load`, as in `translate
    evaluate`."""
    ready = Ready.load(checkpoint, device, precision, engine)
    recipe = ready.recipe
    check_dev_split(split, recipe.data.test_splits)
    data = read_from(recipe.data, data_path)
    src, ref = load_split(data, split)
    base = decode_options(recipe.decode, early_exit=early_exit)
    # untimed: the first decode builds the kernels for its shapes, which would slow the first
    # setting's sentences/s alone
    translate_sentences(ready, src[:WARM_UP], base)
    points, signature = [], ""
    for beam in sorted(set(beams)):
        greedy = None
        for lenpen in sorted(set(lenpens)):
            if greedy is not None:  # beam 1 ignores the penalty: one decode fills the row
                points.append(replace(greedy, lenpen=lenpen))
                report(points[-1])
                continue
            cfg = decode_options(base, beam=beam, lenpen=lenpen)
            result = evaluate_split(ready, src, ref, cfg, data.tgt_lang)
            s, signature = result.scores, result.scores.bleu_signature
            points.append(SweepPoint(beam, lenpen, s.bleu, s.chrf, s.length_ratio,
                                     len(src) / max(result.seconds, 1e-9)))
            report(points[-1])
            if beam == 1:
                greedy = points[-1]
    return BeamSweep(str(checkpoint), split, len(src), ready.precision, base.early_exit,
                     recipe.decode.beam, recipe.decode.lenpen, signature, points)


def sweep_table(sweep: BeamSweep) -> str:
    """A Markdown table of BLEU: a row per beam, a column per length penalty; the best bold."""
    lenpens = sorted({p.lenpen for p in sweep.points})
    best = sweep.best()
    rows = []
    for beam in sorted({p.beam for p in sweep.points}):
        row = [f"{beam}" + (" (greedy)" if beam == 1 else "")]
        for lenpen in lenpens:
            point = sweep.at(beam, lenpen)
            text = "" if point is None else f"{point.bleu:.2f}"
            row.append(f"**{text}**" if point is best else text)
        rows.append(row)
    return markdown_table(["beam ↓, length penalty →", *(f"{a:g}" for a in lenpens)], rows)


def summary(sweep: BeamSweep) -> str:
    best = sweep.best()
    recipe = sweep.at(sweep.recipe_beam, sweep.recipe_lenpen)
    lines = [f"{sweep.split}: {sweep.sentences} sentences, {sweep.precision}, BLEU "
             f"({sweep.bleu_signature})", "", sweep_table(sweep), "",
             f"best on {sweep.split}: beam {best.beam}, length penalty {best.lenpen:g}: BLEU "
             f"{best.bleu:.2f}, chrF {best.chrf:.2f}, length ratio {best.length_ratio:.3f}, "
             f"{best.sentences_per_s:.0f} sentences/s"]
    if recipe is not None:
        lines.append(f"the recipe's (beam {sweep.recipe_beam}, length penalty "
                     f"{sweep.recipe_lenpen:g}): BLEU {recipe.bleu:.2f}")
    lines.append(f"use it: translate decode/evaluate ... --beam {best.beam} --lenpen "
                 f"{best.lenpen:g}, or decode.beam / decode.lenpen in the recipe")
    return "\n".join(lines)


def write_sweep(sweep: BeamSweep, output: str | Path) -> list[Path]:
    """sweep.json, sweep.md and (with matplotlib) sweep.png in the folder `output`."""
    out = Path(output)
    out.mkdir(parents=True, exist_ok=True)
    data = {**asdict(sweep), "best": asdict(sweep.best())}
    (out / "sweep.json").write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    (out / "sweep.md").write_text(f"# Beam size and length penalty on {sweep.split}\n\n"
                                  f"`{sweep.checkpoint}`\n\n{summary(sweep)}\n", encoding="utf-8")
    written = [out / "sweep.json", out / "sweep.md"]
    try:
        written.append(plot_sweep(sweep, out / "sweep.png"))
    except ValueError as e:  # no matplotlib: the numbers are written, the figure is not
        log.warning("%s", e)
    return written


def plot_sweep(sweep: BeamSweep, output: str | Path) -> Path:
    """BLEU against the length penalty, a line per beam size; the best setting ringed."""
    plt = pyplot()
    fig, (by_lenpen, speed) = plt.subplots(1, 2, figsize=(10, 4), dpi=130)
    beams = sorted({p.beam for p in sweep.points})
    for beam in beams:
        row = sorted((p for p in sweep.points if p.beam == beam), key=lambda p: p.lenpen)
        style = dict(ls="--", color="gray") if beam == 1 else dict(marker="o", ms=4)
        by_lenpen.plot([p.lenpen for p in row], [p.bleu for p in row],
                       label="greedy" if beam == 1 else f"beam {beam}", **style)
    best = sweep.best()
    by_lenpen.plot([best.lenpen], [best.bleu], "o", ms=12, mfc="none", mec="crimson",
                   label=f"best: beam {best.beam}, α {best.lenpen:g}")
    by_lenpen.set_xlabel("length penalty α (GNMT)")
    by_lenpen.set_ylabel(f"{sweep.split} BLEU (sacreBLEU)")
    by_lenpen.set_title("BLEU by beam size and length penalty")
    at_best_lenpen = [sweep.at(beam, best.lenpen) for beam in beams]
    speed.plot(beams, [p.sentences_per_s for p in at_best_lenpen], marker="o", ms=4)
    speed.set_xlabel("beam size")
    speed.set_ylabel("sentences/s")
    speed.set_title(f"decoding speed (α {best.lenpen:g}, {sweep.precision})")
    speed.set_xticks(beams)
    for ax in (by_lenpen, speed):
        ax.grid(alpha=0.3)
    by_lenpen.legend(fontsize=8)
    fig.tight_layout()
    return save_figure(fig, output)
