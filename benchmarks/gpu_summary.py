"""The figures of one `gpu_check.sh` run, gathered from its output folder into `summary.json`.

    python benchmarks/gpu_summary.py OUT [--commit SHA]

Every key is written; a figure whose part did not run (or failed) is null, and `missing` names
why. Ratios and MFU are against peers and a matmul peak timed in the same run.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Optional

KEYS = ("device", "multi30k_tok_s", "multi30k_vs_marian", "base_mfu", "big_mfu",
        "matmul_peak_tflops", "gpu_recipe_train_seconds", "gpu_recipe_test_2016_flickr_beam5",
        "decode_beam5_vs_hf")


def read(path: Path) -> Optional[dict]:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def best_ours(speed: dict) -> tuple[str, dict]:
    """Our fastest system of a train_speed.py result: (name, figures)."""
    ours = {n: s for n, s in speed["systems"].items() if n.startswith("ours")}
    name = max(ours, key=lambda n: ours[n]["median_tok_per_s"])
    return name, ours[name]


def speed_figures(out: Path, summary: dict, missing: dict) -> None:
    multi30k = read(out / "train_speed-multi30k.json")
    if multi30k is None:
        missing["multi30k"] = "train_speed-multi30k.json not written (part speed)"
    else:
        name, ours = best_ours(multi30k)
        summary["multi30k_tok_s"] = ours["median_tok_per_s"]
        summary["multi30k_system"] = name
        peers = [s for n, s in multi30k["systems"].items() if n.startswith("hf marian")]
        if peers:
            summary["multi30k_vs_marian"] = ours["ratio_to_peer_best"]
        else:
            missing["multi30k_vs_marian"] = "transformers not installed: no MarianMT peer"
        peak = max(multi30k["matmul_peak_gflops"].values())
        summary["matmul_peak_tflops"] = peak / 1e3
        summary["device"] = multi30k.get("gpu") or multi30k.get("cpu")
    for shape in ("base", "big"):
        result = read(out / f"train_speed-{shape}.json")
        if result is None:
            missing[shape] = f"train_speed-{shape}.json not written (part speed)"
            continue
        name, ours = best_ours(result)
        summary[f"{shape}_mfu"] = ours["mfu"]
        summary[f"{shape}_tok_s"] = ours["median_tok_per_s"]
        summary[f"{shape}_vs_marian"] = ours["ratio_to_peer_best"]


def quality_figures(out: Path, summary: dict, missing: dict) -> None:
    scores = read(out / "quality-test.json")
    run = out / "quality-run"
    if scores is None or not (run / "metrics.jsonl").is_file():
        missing["quality"] = "quality-test.json or the run's metrics not written (part quality)"
        return
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    summary["gpu_recipe_train_seconds"] = max(r.get("train_seconds", 0.0) for r in records)
    split = scores.get("test_2016_flickr")
    summary["gpu_recipe_test_2016_flickr_beam5"] = split["bleu"] if split else None
    summary["gpu_recipe_bleu_signature"] = split["bleu_signature"] if split else None
    summary["gpu_recipe_curve"] = [(r["elapsed"], r["dev_bleu"]) for r in records
                                   if r["kind"] == "valid"]


def decode_figures(out: Path, summary: dict, missing: dict) -> None:
    result = read(out / "decode.json")
    if result is None:
        missing["decode_beam5_vs_hf"] = "decode.json not written (part decode)"
        return
    against = result.get("beam5_vs_hf")
    if against is None:
        missing["decode_beam5_vs_hf"] = ("no HF generate peer timed (transformers not "
                                         "installed, or decode.py --peers without hf)")
        return
    summary["decode_beam5_vs_hf"] = against["ratio"]
    summary["decode_beam5"] = against  # which systems, and the BLEU of each
    summary["decode_sent_per_s"] = {name: s["beam5_sent_per_s"]
                                    for name, s in result["systems"].items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--commit", default=None)
    args = ap.parse_args()
    summary: dict = {key: None for key in KEYS}
    missing: dict = {}
    speed_figures(args.out, summary, missing)
    quality_figures(args.out, summary, missing)
    decode_figures(args.out, summary, missing)
    summary.update(commit=args.commit, missing=missing)
    (args.out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
