"""The figures of docs/tour.md, drawn from a trained Transformer run.

    python scripts/tour_figures.py RUN_DIR --data ../shared/data/multi30k --out docs/tour
    python scripts/tour_figures.py RUN_DIR ... --exercise     # also the scale exercise (~7 min)
    python scripts/tour_figures.py --notes-only --out docs/tour   # stop 0's notes.png alone

Stop 0's figure (notes.png) needs no run: it draws the notes' six-word example from its numbers.

Every attention figure shares one colour scale, 0 to 1, and draws the cells a mask hides in grey:
a hidden cell is not a weight of zero, it is no weight at all. Statistics are over dev sentences
(never a test split).
"""

from __future__ import annotations

import argparse
import json
import math
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from translate.analysis.attention import attention_maps, heatmap, record_attention
from translate.analysis.plots import Heatmap, draw_heatmap, plot_heatmaps, pyplot, save_figure
from translate.checkpoint import load_checkpoint
from translate.data.batch import pad
from translate.data.read import load_split
from translate.evaluation import evaluate_split
from translate.models import attention
from translate.models.attention import CROSS, DECODER_SELF, ENCODER_SELF
from translate.ready import Ready
from translate.tokens import BOS

ROLES = (ENCODER_SELF, DECODER_SELF, CROSS)

# The notes' worked example (note 001, lines 84-91; tests/models/test_notes.py holds the same):
# "Your journey starts with one step", one 3-wide embedding per word.
NOTES_WORDS = ["Your", "journey", "starts", "with", "one", "step"]
NOTES_INPUTS = [[0.43, 0.15, 0.89], [0.55, 0.87, 0.66], [0.57, 0.85, 0.64],
                [0.22, 0.58, 0.33], [0.77, 0.25, 0.10], [0.05, 0.80, 0.55]]


def modules_of(maps, role: str) -> list[str]:
    return sorted((m for m, (r, _) in maps.roles.items() if r == role),
                  key=lambda m: maps.roles[m][1])


def captured_qk(model, src: torch.Tensor, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The (B, H, S, Dh) queries and keys of encoder layer `layer`'s self-attention."""
    attn, seen = model.encoder_layers[layer].self_attn, {}
    hook = attn.register_forward_pre_hook(lambda m, args: seen.setdefault("x", args[0]))
    with torch.no_grad():
        model.encode(src)
    hook.remove()
    return attn.split_heads(attn.q_proj(seen["x"])), attn.split_heads(attn.k_proj(seen["x"]))


def notes_figure(out: Path) -> None:
    """Stop 0: the notes' six words, no model. The weights of the unscaled dot products
    softmax(x x^T) (note 001, lines 196-201), and the same scores under the causal mask, each
    cell's weight written in it. Both through the code's attention, its 1/sqrt(d) undone."""
    plt = pyplot()
    x = torch.tensor(NOTES_INPUTS)[None, None]  # (B=1, H=1, T=6, d=3)
    q = x * math.sqrt(x.size(-1))  # the notes' first example does not scale: undo the code's
    allowed = attention.causal_mask(x.size(2))  # (6, 6), True = may attend
    _, full = attention.scaled_dot_product_attention(q, x, x)
    _, causal = attention.scaled_dot_product_attention(q, x, x, allowed)
    panels = [Heatmap("softmax(x xᵀ), unscaled, no mask: rows sum to 1", full[0, 0].numpy(),
                      NOTES_WORDS, NOTES_WORDS, "keys", "queries"),
              Heatmap("the same scores, causal mask: the future hidden", causal[0, 0].numpy(),
                      NOTES_WORDS, NOTES_WORDS, "keys", "queries", (~allowed).numpy())]
    fig, axes = plt.subplots(1, 2, figsize=(9, 4.4), layout="constrained")
    for ax, panel in zip(axes, panels):
        image = draw_heatmap(ax, panel)
        for (row, col), weight in np.ndenumerate(panel.weights):
            if panel.hidden is None or not panel.hidden[row, col]:
                ax.text(col, row, f"{weight:.4f}", ha="center", va="center", fontsize=6,
                        color="black" if weight > 0.6 else "white")
    fig.colorbar(image, ax=axes, shrink=0.8, label="attention weight (grey: masked)")
    fig.suptitle("The notes' example: “Your journey starts with one step”, "
                 "each word a 3-wide embedding", fontsize=9)
    save_figure(fig, out / "notes.png")


def qkv_figure(model, maps, src_ids: list[int], out: Path) -> None:
    """Scores q.k / sqrt(Dh), then their softmax, for one head on one sentence."""
    plt = pyplot()
    q, k = captured_qk(model, torch.tensor([src_ids]), 0)
    scores = (q @ k.transpose(-2, -1) / math.sqrt(q.size(-1)))[0, 0].detach().numpy()
    weights = np.exp(scores - scores.max(-1, keepdims=True))
    weights /= weights.sum(-1, keepdims=True)
    fig, axes = plt.subplots(1, 2, figsize=(8, 4), layout="constrained")
    bound = float(np.abs(scores).max())
    axes_of = (maps.src_pieces, maps.src_pieces, "keys", "queries")
    fig.colorbar(draw_heatmap(axes[0], Heatmap("scores q·k / √Dh (head 1)", scores, *axes_of),
                              "RdBu_r", -bound, bound), ax=axes[0], shrink=0.7)
    fig.colorbar(draw_heatmap(axes[1], Heatmap("softmax: each row sums to 1", weights, *axes_of)),
                 ax=axes[1], shrink=0.7)
    fig.suptitle("Encoder layer 1: how much each query (row) takes from each key (column)",
                 fontsize=9)
    save_figure(fig, out / "qkv.png")


def scale_figure(model, batches: list[torch.Tensor], out: Path) -> None:
    """The largest weight of each query, with and without the 1/sqrt(Dh) scale."""
    plt = pyplot()
    kept = {"with 1/√Dh (as trained)": [], "without the scale": []}
    for src in batches:
        real = (src != 0)[:, None, None, :]  # (B, 1, 1, S)
        for layer in range(len(model.encoder_layers)):
            q, k = captured_qk(model, src, layer)
            raw = (q @ k.transpose(-2, -1)).detach()  # (B, H, S, S)
            rows = real.transpose(-1, -2).expand_as(raw)[..., 0]  # (B, H, S) real queries
            for name, scores in zip(kept, (raw / math.sqrt(q.size(-1)), raw)):
                w = torch.softmax(scores.masked_fill(~real, float("-inf")), dim=-1)
                kept[name].append(w.max(-1).values[rows])
    fig, ax = plt.subplots(figsize=(6, 3.2), layout="constrained")
    for name, values in kept.items():
        v = torch.cat(values).numpy()
        ax.hist(v, bins=40, range=(0, 1), alpha=0.6, label=f"{name}: median {np.median(v):.2f}")
    ax.set_xlabel("largest attention weight of a query (encoder self-attention, all layers)")
    ax.set_ylabel("queries")
    ax.legend(fontsize=8)
    save_figure(fig, out / "scale.png")


def masks_figure(model, tokenizer, maps, sentence: str, short: str, out: Path) -> None:
    """The causal mask (decoder self-attention) and a padding mask (a short source in a batch)."""
    causal = replace(heatmap(maps, modules_of(maps, DECODER_SELF)[0]),
                     title="decoder self-attention, layer 1: the future hidden")
    ids = tokenizer.encode_src([sentence, short])
    src = pad([torch.tensor(i) for i in ids])  # (2, S): the short one padded
    with torch.no_grad(), record_attention(model) as recorded:
        model.encode(src)
    first = modules_of(maps, ENCODER_SELF)[0]
    w = recorded[first][0][1].mean(0).numpy()  # (S, S) the short sentence's
    pieces = [tokenizer.src.id_to_piece(i) if i else "<pad>" for i in src[1].tolist()]
    hidden = np.broadcast_to((src[1] == 0).numpy()[None, :], w.shape)
    padded = Heatmap("encoder self-attention of a padded source", w, pieces, pieces,
                     "source (keys)", "source (queries)", hidden)
    plot_heatmaps([[causal, padded]], out / "masks.png",
                  "The causal mask (left) and a padding mask (right)", max_columns=2)


def heads_figure(maps, out: Path) -> None:
    """Every head of every cross-attention layer, on one scale."""
    modules = modules_of(maps, CROSS)
    heads = maps.weights[modules[0]].size(0)
    plot_heatmaps([[heatmap(maps, module, h) for h in range(heads)] for module in modules],
                  out / "heads.png",
                  "Cross-attention: each head of each layer reads the source its own way",
                  max_columns=heads)


def roles_figure(maps, out: Path) -> None:
    """The three roles (rows) at every layer (columns), heads averaged."""
    plot_heatmaps([[heatmap(maps, module) for module in modules_of(maps, role)]
                   for role in ROLES], out / "roles.png", f"“{maps.translation}”",
                  max_columns=len(modules_of(maps, CROSS)))


def residual_figure(model, batches: list[torch.Tensor], tgt: list[torch.Tensor],
                    out: Path) -> None:
    """How much each sublayer adds to the residual stream: |update| / |stream| per layer."""
    plt = pyplot()
    sums: dict[tuple[str, int, str], list[float]] = {}
    hooks = []

    def keep(key, module, args, update):
        stream = module_inputs[key[:2]]
        sums.setdefault(key, []).append(float(update.norm(dim=-1).mean() /
                                              stream.norm(dim=-1).mean()))

    module_inputs: dict[tuple[str, int], torch.Tensor] = {}
    for side, layers in (("encoder", model.encoder_layers), ("decoder", model.decoder_layers)):
        for i, layer in enumerate(layers):
            hooks.append(layer.register_forward_pre_hook(
                lambda m, args, key=(side, i): module_inputs.__setitem__(key, args[0])))
            parts = [("self-attention", layer.self_attn), ("feed-forward", layer.ffn)]
            if side == "decoder":
                parts.insert(1, ("cross-attention", layer.cross_attn))
            for name, sub in parts:
                hooks.append(sub.register_forward_hook(
                    lambda m, a, o, key=(side, i, name): keep(key, m, a, o)))
    with torch.no_grad():
        for src, tgt_in in zip(batches, tgt):
            model(src, tgt_in)
    for hook in hooks:
        hook.remove()
    fig, ax = plt.subplots(figsize=(7, 3.4), layout="constrained")
    names = sorted({k[2] for k in sums}, key=["self-attention", "cross-attention",
                                              "feed-forward"].index)
    slots = sorted({k[:2] for k in sums}, key=lambda k: (k[0] != "encoder", k[1]))
    width = 0.8 / len(names)
    for j, name in enumerate(names):
        values = [np.mean(sums[(*slot, name)]) if (*slot, name) in sums else 0 for slot in slots]
        ax.bar(np.arange(len(slots)) + j * width, values, width, label=name)
    ax.set_xticks(np.arange(len(slots)) + 0.4 - width / 2,
                  [f"{side} {i + 1}" for side, i in slots], fontsize=8)
    ax.set_ylabel("|update| / |residual stream|")
    ax.legend(fontsize=8)
    ax.set_title("What each sublayer adds to the residual stream, relative to the stream",
                 fontsize=9)
    save_figure(fig, out / "residual.png")


def positions_figure(model, out: Path) -> None:
    plt = pyplot()
    table = model.tgt_embed.position_table()[:64].detach().float()  # (L, D)
    unit = table / table.norm(dim=-1, keepdim=True)
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.6), layout="constrained")
    image = axes[0].imshow(table.numpy(), cmap="RdBu_r", vmin=-1, vmax=1, aspect="auto")
    axes[0].set_xlabel("channel")
    axes[0].set_ylabel("position")
    axes[0].set_title("sinusoidal positions: fast waves left, slow right", fontsize=9)
    fig.colorbar(image, ax=axes[0], shrink=0.8)
    image = axes[1].imshow((unit @ unit.T).numpy(), cmap="viridis", vmin=0, vmax=1)
    axes[1].set_xlabel("position")
    axes[1].set_ylabel("position")
    axes[1].set_title("cosine similarity: near positions look alike", fontsize=9)
    fig.colorbar(image, ax=axes[1], shrink=0.8)
    save_figure(fig, out / "positions.png")


def training_figure(run_dir: Path, out: Path) -> None:
    plt = pyplot()
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in records if r["kind"] == "train"]
    valid = [r for r in records if r["kind"] == "valid"]
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.2), layout="constrained")
    axes[0].plot([r["elapsed"] / 60 for r in train], [r["loss"] for r in train])
    axes[0].set_ylabel("training loss (NLL per token)")
    axes[1].plot([r["elapsed"] / 60 for r in valid], [r["dev_bleu"] for r in valid], marker="o")
    axes[1].set_ylabel("dev BLEU (greedy)")
    for ax in axes:
        ax.set_xlabel("minutes")
        ax.grid(alpha=0.3)
    save_figure(fig, out / "training.png")


def search_figure(model, loaded, src: list[str], ref: list[str], out: Path) -> None:
    """Dev BLEU and speed for greedy search and beams of 2, 4 and 8."""
    plt = pyplot()
    beams, bleu, speed = (1, 2, 4, 8), [], []
    for beam in beams:
        cfg = replace(loaded.recipe.decode, beam=beam)
        start = time.perf_counter()
        result = evaluate_split(Ready(model, loaded.tokenizer), src, ref, cfg,
                                loaded.recipe.data.tgt_lang)
        speed.append(len(src) / (time.perf_counter() - start))
        bleu.append(result.scores.bleu)
    fig, ax = plt.subplots(figsize=(5.5, 3.2), layout="constrained")
    ax.plot(beams, bleu, marker="o")
    for b, s, v in zip(beams, speed, bleu):
        ax.annotate(f"{s:.0f} sent/s", (b, v), textcoords="offset points", xytext=(4, -12),
                    fontsize=7)
    ax.set_xscale("log", base=2)
    ax.set_xticks(beams, [str(b) for b in beams])
    ax.set_xlabel("beam (1: greedy)")
    ax.set_ylabel(f"dev BLEU, {len(src)} sentences")
    ax.grid(alpha=0.3)
    save_figure(fig, out / "search.png")


def unscaled_attention(q, k, v, mask=None, dropout=0.0):
    """The exercise: the written-out attention without its 1/sqrt(Dh)."""
    scores = q @ k.transpose(-2, -1)  # no / math.sqrt(q.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores.float(), dim=-1).to(q.dtype)
    return torch.nn.functional.dropout(weights, dropout) @ v, weights


def exercise_figure(recipe: Path, data: str, out: Path, minutes: float) -> dict:
    """Two textbook-engine runs of `minutes`: attention as written, and with the scale dropped."""
    from translate.config import load_recipe
    from translate.training import train

    plt = pyplot()
    curves = {}
    written = attention.scaled_dot_product_attention
    for name, function in (("as written", written), ("without 1/√Dh", unscaled_attention)):
        attention.scaled_dot_product_attention = function
        try:
            cfg = load_recipe(recipe, [f"data.dataset={data}", "train.engine=textbook",
                                       f"train.max_minutes={minutes}", "train.log_every=20",
                                       "train.eval_every_minutes=0", "train.eval_every=0",
                                       "data.test_splits=[]", "train.save_every=0"])
            run = Path("runs/tour-exercise") / ("scaled" if function is written else "unscaled")
            result = train(cfg, run, device="cpu", progress=False)
        finally:
            attention.scaled_dot_product_attention = written
        records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
        curves[name] = ([r["step"] for r in records if r["kind"] == "train"],
                        [r["loss"] for r in records if r["kind"] == "train"], result)
    fig, ax = plt.subplots(figsize=(5.5, 3.2), layout="constrained")
    for name, (steps, losses, _) in curves.items():
        ax.plot(steps, losses, label=name)
    ax.set_xlabel("step")
    ax.set_ylabel("training loss (NLL per token)")
    ax.set_title(f"--engine textbook, {minutes:g} minutes each", fontsize=9)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    save_figure(fig, out / "exercise.png")
    return {name: losses[-1] for name, (_, losses, _) in curves.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run_dir", type=Path, nargs="?", help="a trained Transformer run")
    ap.add_argument("--data", default="../shared/data/multi30k")
    ap.add_argument("--out", type=Path, default=Path("docs/tour"))
    ap.add_argument("--sentence", type=int, default=4, help="which dev sentence to draw")
    ap.add_argument("--exercise", action="store_true", help="also run the scale exercise")
    ap.add_argument("--exercise-minutes", type=float, default=3.0)
    ap.add_argument("--notes-only", action="store_true",
                    help="draw stop 0's notes.png alone, from the notes' numbers: no run needed")
    args = ap.parse_args()
    if args.notes_only:
        args.out.mkdir(parents=True, exist_ok=True)
        notes_figure(args.out)
        print(f"wrote {args.out / 'notes.png'}")
        return
    if args.run_dir is None:
        ap.error("give RUN_DIR, a trained run to draw (or --notes-only)")
    torch.manual_seed(0)
    loaded = load_checkpoint(args.run_dir / "best.pt")
    model, tok = loaded.model.eval(), loaded.tokenizer
    data = replace(loaded.recipe.data, dataset=args.data)
    src, ref = load_split(data, "validation")
    maps = attention_maps(model, tok, src[args.sentence], loaded.recipe.decode)
    print(f"drawing “{src[args.sentence]}” -> “{maps.translation}”")
    args.out.mkdir(parents=True, exist_ok=True)
    notes_figure(args.out)
    qkv_figure(model, maps, tok.encode_src([src[args.sentence]])[0], args.out)
    masks_figure(model, tok, maps, src[args.sentence], min(src[:40], key=len), args.out)
    heads_figure(maps, args.out)
    roles_figure(maps, args.out)
    ids = tok.encode_src(src[:256])
    batches = [pad([torch.tensor(i) for i in ids[b: b + 32]]) for b in range(0, 256, 32)]
    scale_figure(model, batches, args.out)
    tgt = tok.encode_tgt(ref[:256])
    tgt_in = [pad([torch.tensor([BOS] + t[:-1]) for t in tgt[b: b + 32]])
              for b in range(0, 256, 32)]
    residual_figure(model, batches, tgt_in, args.out)
    positions_figure(model, args.out)
    training_figure(args.run_dir, args.out)
    search_figure(model, loaded, src[:500], ref[:500], args.out)
    if args.exercise:
        recipe = Path(__file__).resolve().parents[1] / "recipes/multi30k/transformer.yaml"
        final = exercise_figure(recipe, args.data, args.out, args.exercise_minutes)
        print("exercise, last logged training loss:", final)
    print(f"wrote the figures to {args.out}")


if __name__ == "__main__":
    main()
