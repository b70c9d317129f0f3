"""The ladder figure of docs/results.md: each size's recorded greedy dev BLEU against its steps and
against the training compute they took, the translation counterpart of a scaling-law plot.

    python scripts/ladder_figure.py -o docs/figures/multi30k_transformer_ladder.png

The sizes are the packaged curves (translate/training/curves/) that name one, grouped by their
ladder (`training.sizes`). A step's compute is its target tokens (the mean of the size's
recorded runs' `step_tokens`) times the floating-point operations of one target token in a
training step (forward and backward), counted by torch.utils.flop_counter on a batch of
64 sentence pairs of 16 pieces each. Writes the PNG and, beside it, a JSON of the figures.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import torch
from torch.utils.flop_counter import FlopCounterMode

from translate.analysis.plots import pyplot, save_figure
from translate.config import load_recipe
from translate.models import build_model
from translate.training.promise import CURVES, RecordedCurve, recorded_curves

REPO = Path(__file__).resolve().parents[1]
PAIRS, PIECES = 64, 16  # the batch whose training step is counted


def flops_per_target_token(rung: RecordedCurve, recipe_path: Path) -> float:
    """Forward and backward operations of one training step of `rung`'s model, per target token."""
    recipe = load_recipe(recipe_path)
    tok = recipe.tokenizer
    model = build_model(recipe.model, tok.vocab_size, tok.vocab_size, tok.joint).train()
    generator = torch.Generator().manual_seed(0)
    src, tgt = (torch.randint(4, tok.vocab_size, (PAIRS, PIECES), generator=generator)
                for _ in range(2))
    with FlopCounterMode(display=False) as counter:
        logits = model(src, tgt)  # (B, T, V)
        torch.nn.functional.cross_entropy(logits.flatten(0, 1), tgt.flatten()).backward()
    return counter.get_total_flops() / (PAIRS * PIECES)


def step_tokens(run: Path) -> float:
    """The mean target tokens of a recorded run's steps."""
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return statistics.fmean(r["step_tokens"] for r in rows if r["kind"] == "train")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-o", "--out", type=Path, required=True)
    args = parser.parse_args()
    rungs = sorted((c for c in recorded_curves(CURVES) if c.size), key=lambda c: c.parameters)
    figures = []
    for rung in rungs:
        raw = json.loads(next(p for p in CURVES.glob("*.json")
                              if json.loads(p.read_text())["name"] == rung.name).read_text())
        runs = [REPO / run for run in raw["runs"]]
        per_token = flops_per_target_token(rung, runs[0] / "recipe.yaml")
        tokens = statistics.fmean(step_tokens(run) for run in runs)
        figures.append({"size": rung.size, "parameters": rung.parameters,
                        "flops_per_target_token": per_token, "target_tokens_per_step": tokens,
                        "flops_per_step": per_token * tokens, "points": rung.points})
    plt = pyplot()
    fig, (by_step, by_compute) = plt.subplots(1, 2, figsize=(11, 4.2))
    for each in figures:
        steps, bleu = zip(*each["points"])
        label = f"{each['size']} ({each['parameters'] / 1e6:.1f}M)"
        by_step.plot(steps, bleu, marker=".", label=label)
        by_compute.plot([s * each["flops_per_step"] for s in steps[1:]], bleu[1:], marker=".",
                        label=label)
    by_step.set(xlabel="optimizer steps", ylabel="greedy dev BLEU", title="by step")
    by_compute.set(xlabel="training compute (floating-point operations)", xscale="log",
                   title="by compute")
    for axes in (by_step, by_compute):
        axes.grid(alpha=0.3)
        axes.legend()
    fig.suptitle("Multi30k EN→DE: the default recipe's size ladder (recorded curves)")
    save_figure(fig, args.out)
    args.out.with_suffix(".json").write_text(json.dumps(figures, indent=1) + "\n")
    for each in figures:
        print(f"{each['size']}: {each['parameters']:,} parameters, "
              f"{each['flops_per_step'] / 1e9:.1f} GFLOP a step "
              f"({each['target_tokens_per_step']:.0f} target tokens)")


if __name__ == "__main__":
    main()
