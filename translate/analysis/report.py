"""The comparison report: Markdown (tables, relative figure links) and factual sentences, written
from the dict that `translate.analysis.compare.compare` saves as results.json.

Tests: tests/analysis/test_compare.py.
"""

from __future__ import annotations

from typing import Sequence


def _cell(text: object) -> str:
    """Text safe inside a Markdown table cell."""
    return str(text).replace("|", "\\|").replace("\n", " ")


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A GitHub-flavoured Markdown table; `|` and line breaks in cells are escaped."""
    lines = [header, ["---"] * len(header), *rows]
    return "\n".join("| " + " | ".join(_cell(c) for c in line) + " |" for line in lines)


def _num(value: float | None, digits: int = 2) -> str:
    return "–" if value is None else f"{value:,.{digits}f}"


def _setup(results: dict) -> str:
    threads = results["threads"]
    return (f"{results.get('decoding', 'greedy')}, {results['device']}, {threads} CPU "
            f"thread{'s' if threads != 1 else ''}")


def findings(results: dict) -> list[str]:
    """Plain sentences stating who is ahead where, from the measured numbers only."""
    sig, lines = results["significance"], []
    base = sig["systems"][0]
    for other in sig["systems"][1:]:
        for metric in sig["metrics"]:
            a, b, p = base[metric]["score"], other[metric]["score"], other[metric]["p_value"]
            verdict = "significant" if p < 0.05 else "not significant"
            if a == b:
                lines.append(f"{base['name']} and {other['name']} tie at {a:.2f} {metric}.")
                continue
            (lead, x), (behind, y) = sorted([(base["name"], a), (other["name"], b)],
                                            key=lambda item: -item[1])
            lines.append(f"{lead} is ahead of {behind} by {x - y:.2f} {metric} ({x:.2f} vs "
                         f"{y:.2f}); paired bootstrap p = {p:.4f} ({verdict} at 0.05).")
    systems = results["systems"]
    best = max(systems, key=lambda s: s["bleu"])["name"]
    if len(systems) > 1:
        for bucket in results["length_buckets"]:
            scores = {n: v for n, v in bucket["bleu"].items() if v is not None}
            leader = max(scores, key=scores.get) if scores else best
            if leader != best and scores[leader] > scores[best]:
                lines.append(f"On sentences of {bucket['words']} source words "
                             f"({bucket['sentences']} sentences) {leader} is ahead of {best}: "
                             f"{scores[leader]:.2f} vs {scores[best]:.2f} BLEU.")
    groups = results.get("seed_groups") or []
    for group in groups[1:]:
        d, base = group["difference"]["bleu"], groups[0]
        lines.append(f"Over seeds, {group['group']} (n={group['bleu']['n']}) is {d['mean']:+.2f} "
                     f"BLEU from {base['group']} (n={base['bleu']['n']}), standard error "
                     f"{_num(d['se'])}.")
    fastest = sorted(systems, key=lambda s: -s["sentences_per_s"])
    lines.append(f"Decoding speed ({_setup(results)}): " + ", ".join(
        f"{s['name']} {s['sentences_per_s']:.1f} sentences/s" for s in fastest) + ".")
    if "alignment" in results:
        chosen = [r for r in results["alignment"]["rows"] if r["chosen"]]
        diagonal = results["alignment"]["diagonal"]["scores"]["aer"]
        lines.append("Word alignment AER on the gold test part (lower is better; the diagonal "
                     f"{diagonal:.1f}): " + ", ".join(
                         f"{r['system']} {r['scores']['aer']:.1f} ({r['reading']})"
                         for r in sorted(chosen, key=lambda r: r["scores"]["aer"])) + ".")
    return lines


def render_report(results: dict) -> str:
    """report.md from results.json's dict; figures are linked by relative path."""
    intro = (f"{results['sentences']} sentences of `{results['split']}` from "
             f"`{results['dataset']}`, decoded now by every system's checkpoint "
             f"({_setup(results)}). "
             "Scores are detokenized, cased sacreBLEU and chrF, every system against the same "
             "references.")
    curves = "Dev BLEU against training wall-clock and against steps, from each run's metrics log."
    return "\n".join([
        f"# Comparison on {results['split']}", "", intro, "",
        "## Findings", "", *[f"- {line}" for line in findings(results)], "",
        *_systems(results), *_seed_groups(results), *_significance(results), *_lengths(results),
        "## Learning curves", "", curves, "",
        f"![learning curves]({results['figures']['learning_curves']})", "",
        *_attention(results), *_alignment(results), *_samples(results)])


def _systems(results: dict) -> list[str]:
    systems = results["systems"]
    header = ["system", "arch", "checkpoint", "parameters", "training (min)", "steps",
              "train tgt tok/s (median)", "best dev BLEU", "test BLEU", "test chrF",
              "decoding sent/s"]
    rows = [[s["name"], s["arch"], s["checkpoint"], f"{s['parameters']:,}",
             _num(s["train_minutes"], 1), s["steps"],
             _num(s["train_tok_per_s"], 0), _num(s["best_dev_bleu"]), _num(s["bleu"]),
             _num(s["chrf"]), _num(s["sentences_per_s"], 1)] for s in systems]
    precision = ", ".join(f"{s['name']} {s['precision']}" for s in systems)
    notes = ("Training minutes: the metrics log's wall-clock, validation included. Training "
             "tokens/s: the median of the logged windows (target tokens). Decoding: the whole "
             f"split after a short warm-up ({_setup(results)}; precision: {precision}).")
    signatures = [f"- {label} signature: `{signature}`"
                  for label, key in (("BLEU", "bleu_signature"), ("chrF", "chrf_signature"))
                  for signature in dict.fromkeys(s[key] for s in systems)]
    return ["## Systems", "", markdown_table(header, rows), "", notes, "", *signatures, ""]


def _seed_groups(results: dict) -> list[str]:
    groups = results.get("seed_groups") or []  # results.json written before groups has none
    if not groups:
        return []

    def spread(s: dict) -> str:
        return f"{s['mean']:.2f} ± {_num(s['sd'])} [{s['low']:.2f}, {s['high']:.2f}]"

    def difference(d: dict | None) -> str:
        return "baseline" if d is None else f"{d['mean']:+.2f} ± {_num(d['se'])}"

    header = ["group", "systems", "n", "BLEU mean ± sd [min, max]", "BLEU difference ± se",
              "chrF mean ± sd [min, max]", "chrF difference ± se"]
    rows = [[g["group"], ", ".join(g["systems"]), g["bleu"]["n"], spread(g["bleu"]),
             difference(g.get("difference", {}).get("bleu")), spread(g["chrf"]),
             difference(g.get("difference", {}).get("chrf"))] for g in groups]
    method = ("Runs whose folders differ only in their `-seedN` ending (`translate train --seeds`) "
              "form a group. sd: the sample standard deviation over the group's runs (n - 1; – "
              "for one run). Difference: the group's mean less the first group's, ± its standard "
              "error sqrt(sd_a²/n_a + sd_b²/n_b); differences within about twice it are within "
              "the runs' spread.")
    return ["## Seeds: mean and spread per group", "", method, "", markdown_table(header, rows),
            ""]


def _significance(results: dict) -> list[str]:
    sig = results["significance"]
    header, rows = ["system"], []
    for metric in sig["metrics"]:
        header += [metric, f"{metric} mean ± 95% CI", f"{metric} p-value"]
    for system in sig["systems"]:
        row = [system["name"]]
        for metric in sig["metrics"]:
            r = system[metric]
            p = "baseline" if r["p_value"] is None else f"{r['p_value']:.4f}"
            row += [f"{r['score']:.2f}", f"{r['mean']:.2f} ± {r['ci']:.2f}", p]
        rows.append(row)
    n, names = sig["n_samples"], " ".join(s["name"] for s in sig["systems"])
    method = (f"sacreBLEU's paired bootstrap test with {n} resamples, as `sacrebleu REF -i {names} "
              f"--paired-bs`; the baseline is {sig['baseline']}. The mean and 95% confidence "
              "interval are over the resamples; the p-value estimates the chance of a difference "
              f"this large if the systems were equal (the smallest possible is 1/{n + 1}).")
    return ["## Significance: paired bootstrap resampling", "", method, "",
            markdown_table(header, rows), "",
            *[f"- {metric} signature: `{v}`" for metric, v in sig["signatures"].items()], ""]


def _lengths(results: dict) -> list[str]:
    names = [s["name"] for s in results["systems"]]
    rows = [[b["words"], b["sentences"], *(_num(b["bleu"][n]) for n in names)]
            for b in results["length_buckets"]]
    method = ("Corpus BLEU within buckets of source length in words (whitespace-split), as in "
              "Bahdanau et al. (2014), Fig. 2.")
    return ["## BLEU by source sentence length", "", method, "",
            f"![BLEU by source length]({results['figures']['bleu_by_length']})", "",
            markdown_table(["source words", "sentences", *names], rows), ""]


def _attention(results: dict) -> list[str]:
    method = ("Each system translates the sentence greedily, then re-reads its own translation "
              "(teacher forcing) while its attention weights are recorded. First the "
              "heads-averaged maps: the RNN's additive alignment, each Transformer decoder "
              "layer's cross-attention; then each Transformer's last layer per head. Source "
              "pieces on the x axis, the predicted target pieces on the y axis; each map has its "
              "own colour scale.")
    out = ["## Attention", "", method, ""]
    for example in results["attention"]:
        line = example["index"] + 1
        out += [f"**Line {line}**: {example['source']}", "",
                *[f"- {name}: {text}" for name, text in example["translations"].items()], "",
                f"![attention maps, line {line}]({example['figure']})", ""]
    return out


def _alignment(results: dict) -> list[str]:
    if "alignment" not in results:
        return []
    section = results["alignment"]
    method = (f"Each system re-reads the reference translations of the gold set "
              f"`{section['gold']}` (teacher forcing) and its attention is read as word links "
              "(`translate align-score`). The reading is chosen on the set's dev part (least "
              "AER over every layer, head or heads averaged, and way of reading), then scored on "
              "its test part; a Transformer's best heads-averaged reading beside its best one. "
              "AER is lower-better, with a 95% interval from resampling the pairs; tags "
              "landing: single-word tags carried to the right reference word.")
    header = ["system", "reading (chosen on dev)", "dev AER", "test AER (95%)", "precision",
              "recall", "tags landing"]
    rows = [[r["system"], r["reading"] + (" (chosen)" if r["chosen"] else ""),
             _num(r["dev_aer"], 1),
             f"{r['scores']['aer']:.1f} ({r['aer_low']:.1f}-{r['aer_high']:.1f})",
             _num(r["scores"]["precision"], 1), _num(r["scores"]["recall"], 1),
             f"{r['markup']:.1f}%"] for r in section["rows"]]
    d = section["diagonal"]
    rows.append(["diagonal baseline", "-", "-",
                 f"{d['scores']['aer']:.1f} ({d['aer_low']:.1f}-{d['aer_high']:.1f})",
                 _num(d["scores"]["precision"], 1), _num(d["scores"]["recall"], 1),
                 f"{d['markup']:.1f}%"])
    return ["## Word alignment", "", method, "", markdown_table(header, rows), "",
            f"![alignments over attention]({section['figure']})", ""]


def _samples(results: dict) -> list[str]:
    names = [s["name"] for s in results["systems"]]
    header = ["line", "source", "reference", *names]
    rows = [[s["index"] + 1, s["source"], s["reference"], *(s["hypotheses"][n] for n in names)]
            for s in results["samples"]]
    table = markdown_table(header, rows) if rows else "None requested."
    return ["## Sample translations", "", table, ""]
