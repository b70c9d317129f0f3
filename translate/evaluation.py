"""Decode a split and score it: what training's dev and test decodes, `translate evaluate` and
`translate compare` all do, written once; and `translate evaluate`'s own scoring and report."""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Sequence

from translate.config import DataConfig, DecodeConfig
from translate.decode_io import read_lines
from translate.data import DataError
from translate.inference import translate_sentences
from translate.ready import Ready
from translate.scoring import Scores, score


@dataclass
class SplitResult:
    """A split's translations (line i for source i), their scores and the decoding time."""

    hypotheses: list[str]
    scores: Scores
    seconds: float


def evaluate_split(ready: Ready, sources: Sequence[str], references: Sequence[str],
                   cfg: DecodeConfig, tgt_lang: str, progress: bool = False) -> SplitResult:
    """Translate `sources` with `ready` as `translate_sentences` does and score them against
    `references`."""
    if len(sources) != len(references):
        raise ValueError(f"{len(sources)} sources but {len(references)} references")
    start = time.perf_counter()
    hyps = translate_sentences(ready, sources, cfg, progress)
    seconds = time.perf_counter() - start
    return SplitResult(hyps, score(hyps, references, tgt_lang), seconds)


def read_from(data: DataConfig, dataset: str | None) -> DataConfig:
    """Where a checkpoint's splits are read: its recipe's data, with `dataset` (--data,
    TRANSLATE_DATA) in place of its own if given."""
    return replace(data, dataset=dataset) if dataset else data


def score_checkpoint(checkpoint: str, splits: Sequence[str] = (), data_path: str | None = None,
                     device: str | None = None, beam: int | None = None,
                     lenpen: float | None = None, precision: str | None = None,
                     engine: str | None = None, progress: bool = False,
                     early_exit: bool | None = None) -> dict[str, Scores]:
    """`translate evaluate CHECKPOINT`: the checkpoint's scores on `splits` (default: its
    recipe's test splits), read from `data_path` instead of the recipe's dataset if given.
    Unset decoding options come from the recipe; device, precision and engine from
    `Ready.load`."""
    from translate.config import decode_options
    from translate.data.read import load_split

    ready = Ready.load(checkpoint, device, precision, engine)
    data = read_from(ready.recipe.data, data_path)
    decode_cfg = decode_options(ready.recipe.decode, beam=beam, lenpen=lenpen,
                                early_exit=early_exit)
    results = {}
    for split in splits or data.test_splits:
        src, ref = load_split(data, split)
        results[split] = evaluate_split(ready, src, ref, decode_cfg, data.tgt_lang,
                                        progress).scores
    return results


def score_files(hyp: str, ref: str, lang: str | None = None) -> dict[str, Scores]:
    """`translate evaluate --hyp --ref`: a hypothesis file scored against its references (`lang`,
    default de: the target language of the legacy tokenization), keyed by the file's name."""
    hyps, refs = read_lines(hyp), read_lines(ref)
    if not hyps:
        raise DataError(f"{hyp} is empty: nothing to score")
    if len(hyps) != len(refs):
        raise DataError(f"{hyp} has {len(hyps)} lines, {ref} has {len(refs)}")
    return {Path(hyp).name: score(hyps, refs, lang or "de")}


def scores_report(results: dict[str, Scores], as_json: bool = False) -> list[str]:
    """`translate evaluate`'s report, a block to print for each name's scores, or one JSON block
    for all of them."""
    if as_json:
        return [json.dumps({k: asdict(v) for k, v in results.items()}, indent=2)]
    return [f"== {name} ==\n{s.summary()}" for name, s in results.items()]
