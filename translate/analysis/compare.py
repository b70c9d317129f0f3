"""Compare trained systems on one test split: a Markdown report with tables, figures and JSON.

`compare(run_paths, split, output)` decodes the split with each run folder's best.pt (or a
checkpoint named in its place, an average of the last checkpoints say), scores it with sacreBLEU,
runs sacreBLEU's paired bootstrap resampling against the first run (the baseline), gives runs of
several seeds (`RUN-seed1`, `RUN-seed2`, ...) as groups with their mean and spread
(`analysis.seeds`), splits BLEU by source length, draws learning curves and attention maps
(`analysis.attention`), scores each system's attention as word alignments on a gold set
(`analysis.align_score`), and writes report.md, results.json, the figures and every system's
hypotheses into `output`.
"""

from __future__ import annotations

import json
import logging
import statistics
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Sequence

import torch

from translate.analysis.align_score import PROJECT_GOLD, compare_alignments
from translate.analysis.attention import attention_maps, heatmap
from translate.analysis.plots import (MetricsError, plot_dev_curves, plot_heatmaps,
                                      plot_length_buckets, pyplot, read_metrics)
from translate.analysis.report import render_report
from translate.analysis.seeds import seed_groups
from translate.checkpoint import CheckpointError
from translate.config import DataConfig
from translate.data.read import load_split
from translate.evaluation import evaluate_split, read_from
from translate.inference import translate_sentences
from translate.models import count_parameters
from translate.models.attention import DECODER_SELF, ENCODER_SELF
from translate.ready import Ready
from translate.scoring import bleu_by_length, paired_bootstrap

log = logging.getLogger(__name__)

ATTENTION_SENTENCES = 3
WARMUP = 8  # sentences decoded before the timed decode


@dataclass
class Run:
    """A run folder opened for comparison."""

    name: str
    run_dir: Path
    ready: Ready  # its checkpoint's model, ready to decode; its recipe and step
    records: list[dict]  # its metrics log
    summary: dict  # training_summary(records)
    checkpoint: Path  # what decodes: best.pt unless another checkpoint was named


def locate(run: str | Path) -> tuple[Path, Path]:
    """(run folder, checkpoint) of a run folder (its best.pt) or of a checkpoint file inside
    one (an averaged checkpoint, say); a CheckpointError names a path that is neither."""
    path = Path(run)
    if path.is_dir():
        return path, path / "best.pt"
    if path.suffix == ".pt":
        if not path.is_file():
            raise CheckpointError(f"checkpoint not found: {path}")
        return path.parent, path
    if path.exists():
        raise CheckpointError(f"neither a run folder nor a .pt checkpoint: {path}")
    raise CheckpointError(f"run folder not found: {path}")


def open_run(run_dir: Path, checkpoint: Path, name: str, device: str | None = None,
             engine: str | None = None) -> Run:
    """The run's metrics log, and its checkpoint ready to decode in the precision its recipe
    names (`Ready.load`), or a MetricsError / CheckpointError naming the file."""
    records = read_metrics(run_dir)
    summary = training_summary(records, run_dir / "metrics.jsonl")
    return Run(name, run_dir, Ready.load(checkpoint, device, None, engine), records, summary,
               checkpoint)


def training_summary(records: list[dict], path: Path) -> dict:
    """Wall-clock minutes, steps, median training target tokens/s and best dev BLEU of a run."""
    try:
        train = [r for r in records if r["kind"] == "train"]
        valid = [r for r in records if r["kind"] == "valid"]
        if not valid:
            raise MetricsError(f"{path}: no validation records")
        tok_per_s = statistics.median(r["tok_per_s"] for r in train) if train else None
        return {"train_minutes": [r["elapsed"] for r in records if "elapsed" in r][-1] / 60,
                "steps": max(r["step"] for r in train + valid), "train_tok_per_s": tok_per_s,
                "best_dev_bleu": max(r["dev_bleu"] for r in valid)}
    except KeyError as e:
        raise MetricsError(f"{path}: a record has no {e} field") from None


def spread(items: Sequence[int], k: int) -> list[int]:
    """k items evenly spaced over `items`, first and last included."""
    k = min(k, len(items))
    return [items[round(j * (len(items) - 1) / max(k - 1, 1))] for j in range(k)]


def pick_sentences(src: Sequence[str], k: int, shortest: int = 6, longest: int = 12) -> list[int]:
    """k indices spread over the sentences of shortest..longest words (else the shortest ones)."""
    fits = [i for i, s in enumerate(src) if shortest <= len(s.split()) <= longest]
    if len(fits) >= k:
        return spread(fits, k)
    return sorted(sorted((i for i, s in enumerate(src) if s.strip()),
                         key=lambda i: len(src[i].split()))[:k])



def _unique_names(located: Sequence[tuple[Path, Path]]) -> list[str]:
    """Each run folder's name, with a checkpoint other than best.pt: `RUN-average_last5_raw`."""
    names = [run_dir.resolve().name + ("" if ckpt.name == "best.pt" else f"-{ckpt.stem}")
             for run_dir, ckpt in located]
    return [f"{n}-{i + 1}" if names.count(n) > 1 else n for i, n in enumerate(names)]


def _decode(run: Run, src: list[str], refs: list[str], progress: bool, beam: int
            ) -> tuple[list[str], dict]:
    """The run's hypotheses and its row of the systems table."""
    recipe = run.ready.recipe
    cfg = replace(recipe.decode, beam=beam)  # every system the same beam, whatever its recipe
    log.info("decoding %d sentences with %s", len(src), run.name)
    # warm up untimed, so the first run does not pay for one-time setup in its speed
    translate_sentences(run.ready, src[:WARMUP], cfg)
    result = evaluate_split(run.ready, src, refs, cfg, recipe.data.tgt_lang, progress)
    scores = result.scores
    return result.hypotheses, {
        "name": run.name, "arch": recipe.model.arch, "run_dir": str(run.run_dir),
        "checkpoint": run.checkpoint.name,
        "parameters": count_parameters(run.ready.model), "step": run.ready.step, **run.summary,
        "bleu": scores.bleu, "chrf": scores.chrf, "bleu_signature": scores.bleu_signature,
        "chrf_signature": scores.chrf_signature, "precision": run.ready.precision,
        "decode_seconds": result.seconds, "sentences_per_s": len(src) / result.seconds}


def compare(run_paths: Sequence[str | Path], split: str, output: str | Path,
            data: str | None = None, device: str | None = None, samples: int = 5,
            progress: bool = False, n_bootstrap: int = 1000, engine: str | None = None,
            beam: int = 5, gold: str | Path | None = None) -> dict:
    """Decode `split` with every run's checkpoint and write the report; returns results.json's
    dict.

    Args:
        run_paths: run folders (their best.pt and metrics.jsonl) or checkpoint files inside run
            folders (with the folder's metrics.jsonl); the first is the significance baseline.
        split: the split to decode, read through the first run's data config.
        output: the report folder.
        data: a dataset (folder or hub name) instead of the first run's `data.dataset`.
        device, engine: as `Ready.load` takes them (None: its defaults); each run decodes in
            its recipe's precision, as its own test decode and `translate evaluate` do.
        samples: sample translations to show.
        beam: every system's beam size (1: greedy); each recipe's length penalty.
        gold: a word alignment gold set folder (dev.* and test.*, `analysis.align_score`) to
            score each system's attention as alignments on; None: the project's gold/multi30k
            where the systems translate English to German and the folder is there.
    """
    pyplot()  # fail before decoding when matplotlib is missing
    located = [locate(path) for path in run_paths]
    runs = [open_run(*where, name, device, engine)
            for where, name in zip(located, _unique_names(located))]
    data_cfg = _shared_data(runs, data)
    src, refs = load_split(data_cfg, split)
    if not src:
        raise ValueError(f"split '{split}' of {data_cfg.dataset} has no sentences")
    output = Path(output)
    output.mkdir(parents=True, exist_ok=True)

    hyps, rows = {}, []
    for run in runs:
        hyps[run.name], row = _decode(run, src, refs, progress, beam)
        row["hypotheses"] = f"{run.name}.{split}.hyp.{data_cfg.tgt_lang}"
        (output / row["hypotheses"]).write_text("".join(h + "\n" for h in hyps[run.name]),
                                                encoding="utf-8")
        rows.append(row)
    buckets = bleu_by_length(src, refs, hyps)
    results = {
        "split": split, "dataset": data_cfg.dataset, "sentences": len(src),
        "device": str(runs[0].ready.device), "threads": torch.get_num_threads(),
        "decoding": "greedy" if beam == 1 else f"beam {beam}", "systems": rows,
        "significance": paired_bootstrap(list(hyps), list(hyps.values()), refs, n_bootstrap),
        "seed_groups": seed_groups(rows),
        "length_buckets": buckets,
        "samples": [{"index": i, "source": src[i], "reference": refs[i],
                     "hypotheses": {name: h[i] for name, h in hyps.items()}}
                    for i in spread(range(len(src)), samples)],
        "figures": {"learning_curves": "learning_curves.png",
                    "bleu_by_length": "bleu_by_length.png"},
    }
    _draw_figures(runs, buckets, output)
    results["attention"] = [_attention_example(runs, k, i, src[i], output)
                            for k, i in enumerate(pick_sentences(src, ATTENTION_SENTENCES), 1)]
    gold_folder = _gold_folder(gold, data_cfg)
    if gold_folder is not None:
        results["alignment"] = compare_alignments({run.name: run.ready for run in runs},
                                                  gold_folder, output)
    _write_report(results, output)
    return results


def _gold_folder(gold: str | Path | None, data_cfg: DataConfig) -> Path | None:
    """The alignment gold set to score on: `gold` as given, else the project's where it fits."""
    if gold is not None:
        return Path(gold)
    fits = (data_cfg.src_lang, data_cfg.tgt_lang) == ("en", "de")
    return PROJECT_GOLD if fits and (PROJECT_GOLD / "test.links").is_file() else None


def _shared_data(runs: Sequence[Run], dataset: str | None) -> DataConfig:
    """The first run's data config, `dataset` in place of its own if given, once every run is
    found to translate the same language pair; a ValueError names two runs that do not."""
    data_cfg = runs[0].ready.recipe.data
    for run in runs[1:]:
        other = run.ready.recipe.data
        if (other.src_lang, other.tgt_lang) != (data_cfg.src_lang, data_cfg.tgt_lang):
            raise ValueError(f"{run.run_dir} translates {other.src_lang}->{other.tgt_lang}, "
                             f"{runs[0].run_dir} {data_cfg.src_lang}->{data_cfg.tgt_lang}")
    return read_from(data_cfg, dataset)


def _draw_figures(runs: Sequence[Run], buckets: list[dict], output: Path) -> None:
    """The figures results.json lists: learning_curves.png, every run's dev BLEU, and
    bleu_by_length.png, every run's BLEU in `buckets` (as `bleu_by_length` returns them)."""
    plot_dev_curves({run.name: [r for r in run.records if r["kind"] == "valid"] for run in runs},
                    output / "learning_curves.png")
    plot_length_buckets([b["words"] for b in buckets], [b["sentences"] for b in buckets],
                        {run.name: [b["bleu"][run.name] for b in buckets] for run in runs},
                        output / "bleu_by_length.png")


def _write_report(results: dict, output: Path) -> None:
    """results.json and report.md, its Markdown rendering."""
    (output / "results.json").write_text(json.dumps(results, indent=2, ensure_ascii=False) + "\n",
                                         encoding="utf-8")
    (output / "report.md").write_text(render_report(results), encoding="utf-8")


def _attention_example(runs: list[Run], k: int, index: int, sentence: str, output: Path) -> dict:
    """Figure attention_<k>.png: every run's source-target attention for one test sentence.

    Rows of two maps: first each run's heads-averaged maps (the RNN's alignment, each Transformer
    decoder layer's cross-attention), then each Transformer's last layer per head; a run's maps
    start a new row.
    """
    averaged, per_head, translations = [], [], {}
    for run in runs:
        maps = attention_maps(run.ready.model, run.ready.tokenizer, sentence,
                              run.ready.recipe.decode, run.ready.device)
        translations[run.name] = maps.translation
        cross = [m for m in maps.weights if maps.roles[m][0] not in (ENCODER_SELF, DECODER_SELF)]
        prefix = f"{run.name} ({run.ready.recipe.model.arch})\n"
        averaged.append([heatmap(maps, m, prefix=prefix) for m in cross])
        last = maps.weights[cross[-1]]  # (H, T, S)
        if last.size(0) > 1:
            per_head.append([heatmap(maps, cross[-1], h, prefix) for h in range(last.size(0))])
    figure = f"attention_{k}.png"
    plot_heatmaps([*averaged, *per_head], output / figure,
                  f"test sentence {index + 1}: {sentence}", max_columns=2)
    return {"index": index, "source": sentence, "figure": figure, "translations": translations}

