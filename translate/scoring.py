"""Scoring: corpus metrics of detokenized hypotheses against references, with sacreBLEU.

`score` gives cased, detokenized sacreBLEU (13a) and chrF with their signatures, and, labelled
"legacy", the BLEU most Multi30k papers report: lowercased, Moses-tokenized text scored with
tokenize=none. `paired_bootstrap` runs sacreBLEU's significance test between systems;
`bleu_by_length` splits BLEU by source length.

Tests: tests/test_evaluation.py, tests/analysis/test_compare.py.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import Iterable, Sequence

BUCKET_LIMITS = (10, 15, 20, 25)  # largest source length (words) of each bucket; then "26+"


@dataclass
class Scores:
    bleu: float
    chrf: float
    legacy_bleu: float
    bleu_signature: str
    chrf_signature: str
    legacy_signature: str
    bleu_detail: str
    sentences: int
    length_ratio: float  # hypothesis length / reference length, in BLEU's tokens

    def summary(self) -> str:
        return (f"BLEU {self.bleu:.2f}  chrF {self.chrf:.2f}  ({self.sentences} sentences)\n"
                f"  {self.bleu_detail}\n"
                f"  sacreBLEU signature: {self.bleu_signature}\n"
                f"  chrF signature:      {self.chrf_signature}\n"
                f"legacy BLEU {self.legacy_bleu:.2f} (lowercased, Moses-tokenized, "
                f"for comparison with papers only)\n"
                f"  signature: {self.legacy_signature} + lowercase + sacremoses tokenization")


def score(hypotheses: Sequence[str], references: Sequence[str], tgt_lang: str = "de") -> Scores:
    """Corpus BLEU, chrF and legacy BLEU of hypotheses against one reference each."""
    from sacrebleu.metrics import BLEU, CHRF

    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses but {len(references)} references")
    if not hypotheses:
        raise ValueError("nothing to score: no hypotheses and no references (an empty split "
                         "or file?)")
    hyps, refs = list(hypotheses), [list(references)]
    bleu, chrf = BLEU(), CHRF()
    b, c = bleu.corpus_score(hyps, refs), chrf.corpus_score(hyps, refs)
    legacy = BLEU(tokenize="none", force=True)
    lb = legacy.corpus_score(_moses_lower(hyps, tgt_lang), [_moses_lower(refs[0], tgt_lang)])
    return Scores(b.score, c.score, lb.score, str(bleu.get_signature()), str(chrf.get_signature()),
                  str(legacy.get_signature()), str(b), len(hyps), b.sys_len / max(b.ref_len, 1))


def _moses_lower(lines: Iterable[str], lang: str) -> list[str]:
    from sacremoses import MosesTokenizer

    tok = MosesTokenizer(lang=lang)
    return [tok.tokenize(line.lower(), return_str=True, escape=False) for line in lines]


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
