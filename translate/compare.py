"""Compare trained systems on one test split: a Markdown report with tables, figures and JSON.

`compare(run_dirs, split, output)` decodes the split with each run folder's best.pt, scores it with
sacreBLEU, runs sacreBLEU's paired bootstrap resampling against the first run (the baseline), splits
BLEU by source length, draws learning curves and attention maps, and writes report.md,
results.json, the figures and every system's hypotheses into `output`.

`attention_maps` records one sentence's attention weights while the model re-reads its own greedy
translation (teacher forcing); `attention_figure` draws them.

Shapes: H heads, S source pieces, T target pieces.
"""

from __future__ import annotations

import bisect
import json
import logging
import statistics
import time
from contextlib import contextmanager
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Iterator, Sequence

import torch
from torch import nn

from translate.checkpoint import CheckpointError, Loaded, load_checkpoint
from translate.config import DecodeConfig
from translate.data import load_split, resolve_dataset
from translate.engine import resolve_engine
from translate.evaluation import score, translate_sentences
from translate.models import count_parameters
from translate.models.attention import CROSS, DECODER_SELF, ENCODER_SELF, MultiHeadAttention
from translate.models.rnn import AdditiveAttention
from translate.plots import (Heatmap, MetricsError, plot_dev_curves, plot_heatmaps,
                             plot_length_buckets, pyplot, read_metrics)
from translate.report import render_report
from translate.search import greedy_search, max_output_length
from translate.tokenizer import Tokenizer
from translate.tokens import BOS, EOS
from translate.utils import pick_device, resolve_precision

log = logging.getLogger(__name__)

BUCKET_LIMITS = (10, 15, 20, 25)  # largest source length (words) of each bucket; then "26+"
ATTENTION_SENTENCES = 3
WARMUP = 8  # sentences decoded before the timed decode


@dataclass
class Run:
    """A run folder opened for comparison."""

    name: str
    run_dir: Path
    loaded: Loaded
    records: list[dict]  # its metrics log
    summary: dict  # training_summary(records)


def open_run(run_dir: str | Path, name: str, device: torch.device) -> Run:
    """The run's metrics log and best.pt, or a MetricsError / CheckpointError naming the file."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        problem = "is not a run folder" if run_dir.exists() else "not found"
        raise CheckpointError(f"run folder {problem}: {run_dir}")
    records = read_metrics(run_dir)
    summary = training_summary(records, run_dir / "metrics.jsonl")
    return Run(name, run_dir, load_checkpoint(run_dir / "best.pt", device), records, summary)


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


def paired_bootstrap(names: Sequence[str], hyps: Sequence[Sequence[str]], refs: Sequence[str],
                     n_samples: int = 1000) -> dict:
    """sacreBLEU's paired bootstrap resampling, as `sacrebleu REF -i A B ... --paired-bs`.

    The first system is the baseline; every system is scored on the same references. Returns the
    test's signatures and, per system and metric, the score, bootstrap mean, 95% CI half-width
    and p-value (None for the baseline).
    """
    from sacrebleu.metrics import BLEU, CHRF
    from sacrebleu.significance import PairedTest

    test = PairedTest(list(zip(names, hyps)), {"BLEU": BLEU(), "chrF": CHRF()},
                      references=[list(refs)], test_type="bs", n_samples=n_samples)
    signatures, columns = test()
    metrics = [m for m in columns if m != "System"]  # "BLEU", "chrF2"
    systems = [{"name": name, **{m: {"score": float(columns[m][i].score),
                                     "mean": float(columns[m][i].mean),
                                     "ci": float(columns[m][i].ci),
                                     "p_value": columns[m][i].p_value} for m in metrics}}
               for i, name in enumerate(columns["System"])]
    return {"baseline": names[0], "n_samples": test.n_samples, "metrics": metrics,
            "signatures": {m: str(s) for m, s in signatures.items()}, "systems": systems}


def bucket_labels() -> list[str]:
    lows = (1, *(limit + 1 for limit in BUCKET_LIMITS))
    return [f"{lo}-{hi}" for lo, hi in zip(lows, BUCKET_LIMITS)] + [f"{lows[-1]}+"]


def bleu_by_length(src: Sequence[str], refs: Sequence[str], hyps: dict[str, list[str]]
                   ) -> list[dict]:
    """Corpus BLEU of each system within each source-length bucket (whitespace-split words)."""
    from sacrebleu.metrics import BLEU

    groups: list[list[int]] = [[] for _ in range(len(BUCKET_LIMITS) + 1)]
    for i, sentence in enumerate(src):
        groups[bisect.bisect_left(BUCKET_LIMITS, len(sentence.split()))].append(i)
    return [{"words": label, "sentences": len(idx),
             "bleu": {name: BLEU().corpus_score([h[i] for i in idx], [[refs[i] for i in idx]]).score
                      if idx else None for name, h in hyps.items()}}
            for label, idx in zip(bucket_labels(), groups)]


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


# ---------------------------------------------------------------------------------------------
# Attention maps


@contextmanager
def record_attention(model: nn.Module) -> Iterator[dict[str, list[torch.Tensor]]]:
    """Collect attention weights while the block runs: {module name: [weights per call]}.

    MultiHeadAttention calls are made to return their weights and add (B, H, T, S) tensors;
    AdditiveAttention calls add (B, 1, S), one per decoder step. Each module's `role` and
    `layer` say what it is.
    """
    maps: dict[str, list[torch.Tensor]] = {}
    hooks = []
    for name, module in model.named_modules():
        if isinstance(module, (MultiHeadAttention, AdditiveAttention)):
            maps[name] = []
            hooks.append(module.register_forward_hook(partial(_keep_weights, maps[name])))
        if isinstance(module, MultiHeadAttention):
            hooks.append(module.register_forward_pre_hook(_ask_for_weights, with_kwargs=True))
    try:
        yield maps
    finally:
        for hook in hooks:
            hook.remove()


def _ask_for_weights(module: nn.Module, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    return args, {**kwargs, "need_weights": True}


def _keep_weights(store: list, module: nn.Module, args: tuple, output: tuple) -> None:
    weights = output[1].detach()
    store.append(weights[:, None] if weights.dim() == 2 else weights)  # additive: (B, 1, S)


@dataclass
class AttentionMaps:
    """One sentence's attention weights, recorded while the model re-reads its greedy output."""

    translation: str
    src_pieces: list[str]  # S source pieces, EOS last
    tgt_in_pieces: list[str]  # T decoder inputs: BOS, then the output pieces
    out_pieces: list[str]  # T pieces predicted at each position (EOS last when the output ended)
    weights: dict[str, torch.Tensor]  # attention module -> (H, T_query, T_key); the RNN has H = 1
    roles: dict[str, tuple[str, int]]  # attention module -> its role and layer


@torch.no_grad()
def attention_maps(model: nn.Module, tokenizer: Tokenizer, sentence: str, cfg: DecodeConfig,
                   device: torch.device | str = "cpu") -> AttentionMaps:
    """Translate `sentence` greedily, then record every attention module on that translation."""
    if not sentence.strip():
        raise ValueError("the sentence to translate is empty")
    model.eval()
    src_ids = tokenizer.encode_src([sentence])[0]
    limit = model.cfg.max_positions - 1
    if len(src_ids) > limit:
        raise ValueError(f"the sentence has {len(src_ids)} pieces, over the model's limit of "
                         f"{limit}")
    src = torch.tensor([src_ids], device=device)  # (1, S)
    max_len = max_output_length(src, cfg.max_len_a, cfg.max_len_b, limit)
    hyp = greedy_search(model, src, max_len)[0]
    tgt_in = torch.tensor([[BOS] + hyp], device=device)  # (1, T)
    with record_attention(model) as recorded:
        logits = model(src, tgt_in)  # (1, T, V)
    # row t predicts hyp[t]; the last row EOS, unless the length limit stopped the search
    out_ids = hyp + [EOS if len(hyp) < max_len else int(logits[0, -1].argmax())]
    weights = {}
    for module, calls in recorded.items():
        # one (1, H, T, S) call per Transformer module; the RNN's (1, 1, S) per step -> (T, S)
        w = torch.cat(calls, dim=-2)[0].float().cpu()
        weights[module] = w if w.dim() == 3 else w[None]  # (H, T_query, T_key)
    src_piece, tgt_piece = tokenizer.src.id_to_piece, tokenizer.tgt.id_to_piece
    modules = dict(model.named_modules())
    roles = {name: (modules[name].role, modules[name].layer) for name in weights}
    return AttentionMaps(tokenizer.decode_tgt([hyp])[0], [src_piece(i) for i in src_ids],
                         [tgt_piece(i) for i in tgt_in[0].tolist()],
                         [tgt_piece(i) for i in out_ids], weights, roles)


def heatmap(maps: AttentionMaps, module: str, head: int | None = None, prefix: str = ""
            ) -> Heatmap:
    """One module's weights, averaged over heads unless `head` is given, with token labels."""
    w = maps.weights[module]  # (H, T_query, T_key)
    role, layer = maps.roles[module]
    if role == ENCODER_SELF:
        axes = (maps.src_pieces, maps.src_pieces, "source (keys)", "source (queries)")
    elif role == DECODER_SELF:
        axes = (maps.tgt_in_pieces, maps.tgt_in_pieces, "target input (keys)",
                "target input (queries)")
    else:
        axes = (maps.src_pieces, maps.out_pieces, "source", "predicted target")
    title = role if role != DECODER_SELF else "decoder causal self-attention"
    if role in (ENCODER_SELF, DECODER_SELF, CROSS):
        title += f", layer {layer + 1}"
    if w.size(0) > 1:
        title += ", heads averaged" if head is None else f", head {head + 1}"
    matrix = w.mean(0) if head is None else w[head]  # (T_query, T_key)
    return Heatmap(prefix + title, matrix.numpy(), *axes)


def attention_figure(maps: AttentionMaps, output: str | Path, title: str) -> Path:
    """Every attention module of one translation: a row per role, a column per layer."""
    rows: dict[str, list[Heatmap]] = {}
    for module in maps.weights:
        rows.setdefault(maps.roles[module][0], []).append(heatmap(maps, module))
    return plot_heatmaps(list(rows.values()), output, title, max_columns=4)


# ---------------------------------------------------------------------------------------------
# The comparison


def _unique_names(run_dirs: Sequence[str | Path]) -> list[str]:
    names = [Path(d).resolve().name for d in run_dirs]
    return [f"{n}-{i + 1}" if names.count(n) > 1 else n for i, n in enumerate(names)]


def _decode(run: Run, src: list[str], refs: list[str], device: torch.device, progress: bool,
            engine) -> tuple[list[str], dict]:
    """The run's hypotheses and its row of the systems table."""
    recipe, model, tokenizer = run.loaded.recipe, run.loaded.model, run.loaded.tokenizer
    cfg = replace(recipe.decode, beam=1)  # every system greedy, whatever its recipe says
    precision = resolve_precision(recipe.train.precision, device)
    log.info("decoding %d sentences with %s", len(src), run.name)
    # warm up untimed, so the first run does not pay for one-time setup in its speed
    translate_sentences(model, tokenizer, src[:WARMUP], cfg, device, precision, engine=engine)
    start = time.perf_counter()
    hyps = translate_sentences(model, tokenizer, src, cfg, device, precision, progress, engine)
    seconds = time.perf_counter() - start
    scores = score(hyps, refs, recipe.data.tgt_lang)
    return hyps, {
        "name": run.name, "arch": recipe.model.arch, "run_dir": str(run.run_dir),
        "parameters": count_parameters(model), "step": run.loaded.step, **run.summary,
        "bleu": scores.bleu, "chrf": scores.chrf, "bleu_signature": scores.bleu_signature,
        "chrf_signature": scores.chrf_signature, "precision": precision,
        "decode_seconds": seconds, "sentences_per_s": len(src) / seconds}


def compare(run_dirs: Sequence[str | Path], split: str, output: str | Path,
            data: str | None = None, device: str | None = None, samples: int = 5,
            progress: bool = False, n_bootstrap: int = 1000, engine: str = "auto") -> dict:
    """Decode `split` with every run's best.pt and write the report; returns results.json's dict.

    Args:
        run_dirs: run folders (best.pt, metrics.jsonl); the first is the significance baseline.
        split: the split to decode, read through the first run's data config.
        output: the report folder.
        data: a dataset (folder or hub name) instead of the first run's `data.dataset`.
        samples: sample translations to show.
        engine: auto, fast or plain (`translate.engine`).
    """
    pyplot()  # fail before decoding when matplotlib is missing
    dev = pick_device(device)
    runs = [open_run(d, n, dev) for d, n in zip(run_dirs, _unique_names(run_dirs))]
    decoder = resolve_engine(engine, dev)
    for run in runs:
        decoder.prepare(run.loaded.model)
    data_cfg = runs[0].loaded.recipe.data
    for run in runs[1:]:
        other = run.loaded.recipe.data
        if (other.src_lang, other.tgt_lang) != (data_cfg.src_lang, data_cfg.tgt_lang):
            raise ValueError(f"{run.run_dir} translates {other.src_lang}->{other.tgt_lang}, "
                             f"{runs[0].run_dir} {data_cfg.src_lang}->{data_cfg.tgt_lang}")
    if data:
        data_cfg = replace(data_cfg, dataset=data)
    src, refs = load_split(data_cfg, split)
    if not src:
        raise ValueError(f"split '{split}' of {resolve_dataset(data_cfg)} has no sentences")
    output = Path(output)
    output.mkdir(parents=True, exist_ok=True)

    hyps, rows = {}, []
    for run in runs:
        hyps[run.name], row = _decode(run, src, refs, dev, progress, decoder)
        row["hypotheses"] = f"{run.name}.{split}.hyp.{data_cfg.tgt_lang}"
        (output / row["hypotheses"]).write_text("".join(h + "\n" for h in hyps[run.name]),
                                                encoding="utf-8")
        rows.append(row)
    buckets = bleu_by_length(src, refs, hyps)
    results = {
        "split": split, "dataset": resolve_dataset(data_cfg), "sentences": len(src),
        "device": str(dev),
        "threads": torch.get_num_threads(), "decoding": "greedy", "systems": rows,
        "significance": paired_bootstrap(list(hyps), list(hyps.values()), refs, n_bootstrap),
        "length_buckets": buckets,
        "samples": [{"index": i, "source": src[i], "reference": refs[i],
                     "hypotheses": {name: h[i] for name, h in hyps.items()}}
                    for i in spread(range(len(src)), samples)],
        "figures": {"learning_curves": "learning_curves.png",
                    "bleu_by_length": "bleu_by_length.png"},
    }
    plot_dev_curves({run.name: [r for r in run.records if r["kind"] == "valid"] for run in runs},
                    output / "learning_curves.png")
    plot_length_buckets([b["words"] for b in buckets], [b["sentences"] for b in buckets],
                        {name: [b["bleu"][name] for b in buckets] for name in hyps},
                        output / "bleu_by_length.png")
    results["attention"] = [_attention_example(runs, k, i, src[i], dev, output)
                            for k, i in enumerate(pick_sentences(src, ATTENTION_SENTENCES), 1)]
    (output / "results.json").write_text(json.dumps(results, indent=2, ensure_ascii=False) + "\n",
                                         encoding="utf-8")
    (output / "report.md").write_text(render_report(results), encoding="utf-8")
    return results


def _attention_example(runs: list[Run], k: int, index: int, sentence: str, device: torch.device,
                       output: Path) -> dict:
    """Figure attention_<k>.png: every run's source-target attention for one test sentence.

    Rows of two maps: first each run's heads-averaged maps (the RNN's alignment, each Transformer
    decoder layer's cross-attention), then each Transformer's last layer per head; a run's maps
    start a new row.
    """
    averaged, per_head, translations = [], [], {}
    for run in runs:
        maps = attention_maps(run.loaded.model, run.loaded.tokenizer, sentence,
                              run.loaded.recipe.decode, device)
        translations[run.name] = maps.translation
        cross = [m for m in maps.weights if maps.roles[m][0] not in (ENCODER_SELF, DECODER_SELF)]
        prefix = f"{run.name} ({run.loaded.recipe.model.arch})\n"
        averaged.append([heatmap(maps, m, prefix=prefix) for m in cross])
        last = maps.weights[cross[-1]]  # (H, T, S)
        if last.size(0) > 1:
            per_head.append([heatmap(maps, cross[-1], h, prefix) for h in range(last.size(0))])
    figure = f"attention_{k}.png"
    plot_heatmaps([*averaged, *per_head], output / figure,
                  f"test sentence {index + 1}: {sentence}", max_columns=2)
    return {"index": index, "source": sentence, "figure": figure, "translations": translations}

