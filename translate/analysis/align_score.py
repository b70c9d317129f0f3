"""`translate align-score`: how well a model's attention aligns words, against a gold set.

A gold set is three files with one line per sentence pair: PREFIX.<src_lang> and
PREFIX.<tgt_lang> (the sentences; words are what `str.split()` separates, as everywhere in
`translate.alignment`) and PREFIX.links (the links, `translate.analysis.gold.read_gold`), each
read as `translate.analysis.gold.read_gold_lines` reads a gold file. The model re-reads each gold target
(teacher forcing), and every way of reading its attention is scored: each cross-attention
layer's heads averaged and each head alone, read where the decoder predicts a piece and where it
was given it (`shift`); the RNN's one map both ways. The diagonal baseline, which knows no
words, is scored beside them. Each AER has a 95% interval from resampling the pairs (1,000
resamples), and each reading the share of single-word tags it carries to the right word
(`markup_landing`). The project's gold set is gold/multi30k (its README gives the guidelines):
choose a reading on its dev part, report it on its test part.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Optional, Sequence

import numpy as np

from translate.alignment import (EACH, Link, Reading, Words, attention_of_pairs, read_links,
                                 read_map, text_words, word_weights)
from translate.analysis.gold import (AlignmentScores, Gold, alignment_error, diagonal_links,
                                     read_gold, read_gold_lines)
from translate.markup import restore, strip
from translate.ready import Ready

RESAMPLES = 1000


@dataclass(frozen=True)
class ReadingScore:
    """One way of reading alignments (None: the diagonal baseline), its scores and the 95%
    interval of its AER."""

    reading: Optional[Reading]
    scores: AlignmentScores
    aer_low: float
    aer_high: float
    markup: float  # % of single-word tags carried to the gold word (`markup_landing`)

    def name(self) -> str:
        return "diagonal baseline" if self.reading is None else self.reading.describe()


@dataclass
class GoldSet:
    sources: list[str]
    targets: list[str]
    gold: list[Gold]


def read_gold_set(prefix: str | Path, src_lang: str, tgt_lang: str, fmt: str = "pharaoh"
                  ) -> GoldSet:
    """PREFIX.<src_lang>, PREFIX.<tgt_lang> and PREFIX.links, checked against each other: as
    many lines each, every link inside its pair's words, no empty sentence, one pair at
    least."""
    prefix = str(prefix)
    sources = read_gold_lines(f"{prefix}.{src_lang}", "gold sentence file")
    targets = read_gold_lines(f"{prefix}.{tgt_lang}", "gold sentence file")
    if not sources and not targets:
        raise ValueError(f"the gold set {prefix} holds no sentence pairs: {prefix}.{src_lang} "
                         f"and {prefix}.{tgt_lang} are empty")
    if len(sources) != len(targets):
        raise ValueError(f"{prefix}.{src_lang} has {len(sources)} lines and {prefix}.{tgt_lang} "
                         f"{len(targets)}: a gold set has one line a pair in each file")
    for number, (src, tgt) in enumerate(zip(sources, targets), 1):
        if not src.split() or not tgt.split():
            raise ValueError(f"{prefix}: pair {number} has an empty sentence")
    words = [(len(s.split()), len(t.split())) for s, t in zip(sources, targets)]
    return GoldSet(sources, targets, read_gold(f"{prefix}.links", fmt, words))


def readings(layers: int, heads: int) -> list[Reading]:
    """Every way of reading a model's alignments: per layer the heads averaged, then each
    head, each read the four ways (`shift` or not, `each` source or output word). A single map
    (the RNN's, layers = heads = 1) once a way."""
    ways = [(shift, each) for shift in (False, True) for each in EACH]
    if layers == heads == 1:
        return [Reading(None, None, shift, each) for shift, each in ways]
    return [Reading(layer, head, shift, each) for layer in range(layers)
            for head in (None, *range(heads)) for shift, each in ways]


def interval(links: Sequence[Sequence[tuple[int, int]]], gold: Sequence[Gold],
             seed: int = 0) -> tuple[float, float]:
    """The 2.5th and 97.5th percentiles of AER over `RESAMPLES` resamples of the pairs."""
    counts = np.array([(len(set(a)), len(g.sure), len(set(a) & g.sure), len(set(a) & g.possible))
                       for a, g in zip(links, gold)], dtype=float)  # (N, 4)
    picks = np.random.default_rng(seed).integers(0, len(gold), (RESAMPLES, len(gold)))
    a, s, a_s, a_p = counts[picks].sum(axis=1).T  # (RESAMPLES,) each
    aer = 100 * (1 - (a_s + a_p) / np.maximum(a + s, 1))
    return float(np.percentile(aer, 2.5)), float(np.percentile(aer, 97.5))


@dataclass
class Attended:
    """A gold set re-read by a model: the words of each pair's pieces and its cross-attention
    (L, H, T, S)."""

    src_words: list[Words]  # the source's pieces, EOS not among them
    out_words: list[Words]  # the target's
    maps: list

    def links(self, reading: Reading) -> list[list[Link]]:
        return [read_links(read_map(w, reading), src, out, reading.shift, reading.each)
                for w, src, out in zip(self.maps, self.src_words, self.out_words)]


def attend(ready: Ready, gold_set: GoldSet) -> Attended:
    """`ready`'s model re-reads each gold target (teacher forcing); each piece belongs to the
    word of the gold sentence it was made of (`translate.alignment.text_words`)."""
    tok = ready.tokenizer
    src_ids = tok.encode_src(gold_set.sources)  # EOS last
    out_ids = [ids[:-1] for ids in tok.encode_tgt(gold_set.targets)]  # EOS dropped
    src_words = text_words(tok.src, gold_set.sources, [ids[:-1] for ids in src_ids])
    out_words = text_words(tok.tgt, gold_set.targets, out_ids)
    return Attended(src_words, out_words, list(attention_of_pairs(ready.model, src_ids,
                                                                  out_ids)))


def score_readings(ready: Ready, gold_set: GoldSet,
                   chosen: Optional[Sequence[Reading]] = None) -> list[ReadingScore]:
    """The diagonal baseline, then every reading (`readings`, or `chosen`), scored on the gold
    set."""
    attended = attend(ready, gold_set)
    layers, heads = attended.maps[0].shape[:2]
    scored = [_scored(None, [diagonal_links(len(s.split()), len(t.split()))
                             for s, t in zip(gold_set.sources, gold_set.targets)], gold_set)]
    for reading in chosen or readings(layers, heads):
        scored.append(_scored(reading, attended.links(reading), gold_set))
    return scored


def markup_landing(gold_set: GoldSet, links: Sequence[Sequence[Link]]) -> tuple[int, int]:
    """How many single-word tags land on the right word, of how many: each source word with
    one sure link, to a target word with no other sure link, is wrapped in `<b>...</b>` alone
    and carried (`translate.markup.restore`) onto the gold target by `links`; it lands when
    exactly the linked word is wrapped."""
    right = total = 0
    for src, tgt, found, g in zip(gold_set.sources, gold_set.targets, links, gold_set.gold):
        words, out = src.split(), tgt.split()
        for i in range(len(words)):
            targets = [j for a, j in g.sure if a == i]
            if len(targets) != 1 or sum(j == targets[0] for _, j in g.sure) != 1:
                continue
            marked = strip(" ".join(words[:i] + [f"<b>{words[i]}</b>"] + words[i + 1:]))
            expected = out[:targets[0]] + [f"<b>{out[targets[0]]}</b>"] + out[targets[0] + 1:]
            right += restore(marked, tgt, found).split() == expected
            total += 1
    return right, total


def _scored(reading: Optional[Reading], links, gold_set: GoldSet) -> ReadingScore:
    right, total = markup_landing(gold_set, links)
    return ReadingScore(reading, alignment_error(links, gold_set.gold),
                        *interval(links, gold_set.gold), 100 * right / max(total, 1))


def align_score(checkpoint: str, prefix: str, fmt: str = "pharaoh", device: Optional[str] = None,
                chosen: Optional[Sequence[Reading]] = None, choose_on: Optional[str] = None
                ) -> tuple[Ready, list[ReadingScore]]:
    """`translate align-score`: load CHECKPOINT in fp32 (its weights unrounded) and score its
    readings on the gold set at PREFIX, in the languages of its recipe: every reading, or
    `chosen`, or with `choose_on` (another gold set's prefix, its dev part) the reading of least
    AER there and the best with heads averaged (`choose`)."""
    ready = Ready.load(checkpoint, device, precision="fp32", engine="plain")
    data = ready.recipe.data
    gold_set = read_gold_set(prefix, data.src_lang, data.tgt_lang, fmt)
    if choose_on is not None:
        chosen = choose(score_readings(ready, read_gold_set(choose_on, data.src_lang,
                                                            data.tgt_lang, fmt)))
    return ready, score_readings(ready, gold_set, chosen)


def choose(on_dev: Sequence[ReadingScore]) -> list[Reading]:
    """From scores on a dev part (the baseline first): the reading of least AER, and the best
    one with heads averaged where that one is a single head."""
    readings_scored = on_dev[1:]
    best = min(readings_scored, key=lambda r: r.scores.aer)
    averaged = min((r for r in readings_scored if r.reading.head is None),
                   key=lambda r: r.scores.aer)
    return [best.reading] + ([averaged.reading] if averaged.reading != best.reading else [])


def score_table(scored: Sequence[ReadingScore]) -> str:
    """A Markdown table, best AER first after the baseline."""
    rows = [scored[0], *sorted(scored[1:], key=lambda r: r.scores.aer)]
    lines = ["| reading | AER (95% interval) | precision | recall | links | tags landing |",
             "|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        s = r.scores
        lines.append(f"| {r.name()} | {s.aer:.1f} ({r.aer_low:.1f}-{r.aer_high:.1f}) | "
                     f"{s.precision:.1f} | {s.recall:.1f} | {s.predicted} | {r.markup:.1f}% |")
    return "\n".join(lines)


def write_scores(scored: Sequence[ReadingScore], output: str | Path) -> Path:
    """The scores as JSON: a list of {reading, scores, aer_low, aer_high}."""
    path = Path(output)
    path.write_text(json.dumps([{"reading": None if r.reading is None else asdict(r.reading),
                                 "name": r.name(), "scores": asdict(r.scores),
                                 "aer_low": r.aer_low, "aer_high": r.aer_high,
                                 "markup": r.markup}
                                for r in scored], indent=1) + "\n", encoding="utf-8")
    return path


# the project's gold set, in a clone (gold/multi30k/README.md)
PROJECT_GOLD = Path(__file__).resolve().parents[2] / "gold" / "multi30k"


def compare_alignments(systems: dict[str, Ready], gold: str | Path, output: str | Path
                       ) -> dict:
    """`translate compare`'s alignment section: for each system the reading of least AER on
    `gold`/dev (any head or heads averaged) and the best heads-averaged one, scored on
    `gold`/test, beside the diagonal baseline; figure alignment.png draws each system's chosen
    reading on one test pair over the gold links."""
    gold, output = Path(gold), Path(output)
    rows, panels, diagonal = [], [], None
    for name, ready in systems.items():
        data = ready.recipe.data
        dev, test = (read_gold_set(gold / part, data.src_lang, data.tgt_lang)
                     for part in ("dev", "test"))
        on_dev = score_readings(ready, dev)
        dev_aer = {r.reading: r.scores.aer for r in on_dev[1:]}
        picks = choose(on_dev)
        attended = attend(ready, test)
        diagonal = _scored(None, [diagonal_links(len(s.split()), len(t.split()))
                                  for s, t in zip(test.sources, test.targets)], test)
        for reading in picks:
            r = _scored(reading, attended.links(reading), test)
            rows.append({"system": name, "arch": ready.recipe.model.arch, "reading": r.name(),
                         "chosen": reading == picks[0], "dev_aer": dev_aer[reading],
                         "scores": asdict(r.scores), "aer_low": r.aer_low,
                         "aer_high": r.aer_high, "markup": r.markup})
        panels.append((name, attended, picks[0], test))
    figure = draw_alignments(panels, output / "alignment.png")
    return {"gold": str(gold), "rows": rows, "figure": figure.name,
            "diagonal": {"scores": asdict(diagonal.scores), "aer_low": diagonal.aer_low,
                         "aer_high": diagonal.aer_high, "markup": diagonal.markup}}


def draw_alignments(panels: Sequence[tuple[str, Attended, Reading, GoldSet]], output: Path,
                    pair: Optional[int] = None) -> Path:
    """One test pair per system: its chosen reading's attention pooled to words (source words
    across, reference words down), the gold links framed (sure solid, possible dotted) and the
    system's links crossed. The pair: the first with 8 to 12 words a side, unless `pair`."""
    from matplotlib.patches import Rectangle

    from translate.analysis.plots import Heatmap, draw_heatmap, pyplot, save_figure

    test = panels[0][3]
    if pair is None:
        pair = next((k for k, (s, t) in enumerate(zip(test.sources, test.targets))
                     if 8 <= len(s.split()) <= 12 and 8 <= len(t.split()) <= 12), 0)
    plt = pyplot()
    fig, axes = plt.subplots(1, len(panels), figsize=(4.8 * len(panels), 4.6), squeeze=False)
    for ax, (name, attended, reading, gold_set) in zip(axes[0], panels):
        src, out = attended.src_words[pair], attended.out_words[pair]
        n = len(out.of_piece)
        mapped = read_map(attended.maps[pair], reading)
        rows = mapped[1: n + 1] if reading.shift else mapped[:n]
        words = word_weights(rows, src, out).numpy()  # (reference words, source words)
        src_words, out_words = gold_set.sources[pair].split(), gold_set.targets[pair].split()
        draw_heatmap(ax, Heatmap(f"{name}: {reading.describe()}", words / max(words.max(), 1e-9),
                                 src_words, out_words, "source words", "reference words"))
        g = gold_set.gold[pair]
        for i, j in g.possible:
            sure = (i, j) in g.sure
            ax.add_patch(Rectangle((i - 0.5, j - 0.5), 1, 1, fill=False, ec="white",
                                   lw=1.6 if sure else 1.0, ls="-" if sure else ":"))
        links = attended.links(reading)[pair]
        ax.scatter([i for i, _ in links], [j for _, j in links], marker="x", c="red", s=28,
                   linewidths=1.2)
    fig.suptitle("gold links framed (solid sure, dotted possible), the system's links crossed; "
                 "each map scaled to its largest word weight", fontsize=8)
    return save_figure(fig, output)
