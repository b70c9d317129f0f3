"""The figures of docs/tour.md, drawn from a trained Transformer run.

    python scripts/tour_figures.py RUN_DIR --data ../shared/data/multi30k --out docs/tour
    python scripts/tour_figures.py RUN_DIR ... --exercise     # also the scale exercise (~7 min)
    python scripts/tour_figures.py RUN_DIR ... --rnn RNN_RUN  # also the RNN's alignment
    python scripts/tour_figures.py RUN_DIR ... --export FOLDER  # the model, for the notebook
    python scripts/tour_figures.py --notes-only --out docs/tour   # stop 0's notes.png alone

Each stop draws its own figure, the stop's name in the function's docstring. The cross-attention
forming over training (forming.png) reads the run's step checkpoints, one per validation.
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

from translate.alignment import record_attention
from translate.analysis.attention import attention_maps, heatmap
from translate.analysis.plots import Heatmap, draw_heatmap, plot_heatmaps, pyplot, save_figure
from translate.loading import load_checkpoint
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


def softmax_figure(model, maps, src_ids: list[int], out: Path, p: float = 0.3) -> None:
    """Stop 4: one query's scores, their softmax, and three draws of dropout at rate `p` on
    those weights (kept weights scaled by 1 / (1 - p)), as `model.attn_dropout` would in
    training."""
    plt = pyplot()
    q, k = captured_qk(model, torch.tensor([src_ids]), 0)
    row = min(2, q.size(2) - 1)
    scores = (q[0, 0, row] @ k[0, 0].T / math.sqrt(q.size(-1))).detach()  # (S,)
    weights = torch.softmax(scores, dim=-1)
    generator = torch.Generator().manual_seed(0)
    dropped = [weights * (torch.rand(weights.shape, generator=generator) >= p) / (1 - p)
               for _ in range(3)]
    pieces = maps.src_pieces
    fig, axes = plt.subplots(1, 3, figsize=(11, 3.2), layout="constrained", sharex=True)
    x = np.arange(len(pieces))
    axes[0].bar(x, scores.numpy(), color="tab:gray")
    axes[0].set_title("scores q·k / √Dh of one query", fontsize=9)
    axes[1].bar(x, weights.numpy())
    axes[1].set_title(f"softmax: weights summing to {float(weights.sum()):.2f}", fontsize=9)
    axes[1].set_ylim(0, 1)
    for i, d in enumerate(dropped):
        axes[2].bar(x + (i - 1) * 0.27, d.numpy(), 0.27, label=f"draw {i + 1}")
    axes[2].set_title(f"dropout {p:g} in training: zeroed, the rest x {1 / (1 - p):.2f}",
                      fontsize=9)
    axes[2].legend(fontsize=7)
    for ax in axes:
        ax.set_xticks(x, pieces, rotation=90, fontsize=7)
    fig.suptitle(f"Encoder layer 1, head 1, the query “{pieces[row]}”", fontsize=9)
    save_figure(fig, out / "softmax.png")


def split_figure(maps, out: Path) -> None:
    """Stop 5: the heads of the first cross-attention layer side by side, and their average."""
    module = modules_of(maps, CROSS)[0]
    heads = maps.weights[module].size(0)
    plot_heatmaps([[heatmap(maps, module, h) for h in range(heads)] + [heatmap(maps, module)]],
                  out / "split.png", "One layer, H heads: each its own slice, its own reading",
                  max_columns=heads + 1)


def ffn_figure(model, batches: list[torch.Tensor], src_ids: list[int], pieces: list[str],
               out: Path) -> None:
    """Stop 6: the feed-forward network's hidden layer. One sentence's activations in encoder
    layer 1 (a row per position), and the share of hidden units each token switches on, by
    layer, over dev sentences."""
    plt = pyplot()
    seen: dict[int, list[torch.Tensor]] = {}
    hooks = [layer.ffn.fc1.register_forward_hook(
        lambda m, a, o, i=i: seen.setdefault(i, []).append(torch.relu(o).detach()))
        for i, layer in enumerate(model.encoder_layers)]
    with torch.no_grad():
        model.encode(torch.tensor([src_ids]))
        one = seen[0][0][0]  # (S, hidden)
        seen.clear()
        for src in batches:
            model.encode(src)
    for hook in hooks:
        hook.remove()
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.4), layout="constrained",
                             gridspec_kw={"width_ratios": [2, 1]})
    image = axes[0].imshow(one[:, :128].numpy(), aspect="auto", cmap="magma")
    axes[0].set_yticks(range(len(pieces)), pieces, fontsize=7)
    axes[0].set_xlabel("hidden unit (the first 128)")
    axes[0].set_title("encoder layer 1: ReLU(W1 x + b1), the same network at every position",
                      fontsize=9)
    fig.colorbar(image, ax=axes[0], shrink=0.8)
    for i, outputs in sorted(seen.items()):
        real = torch.cat([o[src != 0] for o, src in zip(outputs, batches)])  # (N, hidden)
        share = (real > 0).float().mean(-1).numpy()
        axes[1].hist(share, bins=30, range=(0, 0.3), alpha=0.6,
                     label=f"layer {i + 1}: median {np.median(share):.0%}")
    axes[1].set_xlabel("share of hidden units on, per source token")
    axes[1].set_ylabel("tokens")
    axes[1].legend(fontsize=7)
    save_figure(fig, out / "ffn.png")


def forming_figure(run_dir: Path, sentence: str, translation: str, out: Path) -> None:
    """Stop 11: cross-attention forming over training. The last cross-attention layer (heads
    averaged) reading `sentence` while it writes `translation` (teacher-forced), at each step
    checkpoint the run kept (one per validation), on one colour scale."""
    steps = sorted(run_dir.glob("step_*.pt"), key=lambda f: int(f.stem.split("_")[1]))
    if not steps:
        raise SystemExit(f"{run_dir} keeps no step checkpoints (step_*.pt) to draw from")
    panels = []
    for checkpoint in steps:
        loaded = load_checkpoint(checkpoint)
        maps = attention_maps(loaded.model.eval(), loaded.tokenizer, sentence,
                              loaded.recipe.decode, target=translation)
        module = modules_of(maps, CROSS)[-1]
        panels.append(replace(heatmap(maps, module), title=f"step {loaded.step}"))
    plot_heatmaps([panels], out / "forming.png",
                  "The last cross-attention layer at each validation of the run",
                  max_columns=len(panels))


def alignment_figure(rnn_run: Path, maps, sentence: str, out: Path) -> None:
    """Stop 13: the attention RNN's alignment (one distribution per output word) on the left,
    the Transformer's last cross-attention layer (heads averaged) on the right, both reading
    `sentence` while writing the Transformer's translation (teacher-forced), one colour scale."""
    loaded = load_checkpoint(rnn_run / "best.pt")
    rnn = attention_maps(loaded.model.eval(), loaded.tokenizer, sentence, loaded.recipe.decode,
                         target=maps.translation)
    [module] = rnn.weights
    left = replace(heatmap(rnn, module), title="attention RNN: vᵀ tanh(W s + U h)")
    right = replace(heatmap(maps, modules_of(maps, CROSS)[-1]),
                    title="Transformer: last cross-attention layer, heads averaged")
    plot_heatmaps([[left, right]], out / "alignment.png",
                  f"“{maps.translation}”: the RNN (left) and the Transformer (right)",
                  max_columns=2)


def encoder_figure(maps, out: Path) -> None:
    """Stop 9: every layer of the encoder's self-attention, heads averaged: no mask, every
    position reads every other."""
    modules = modules_of(maps, ENCODER_SELF)
    plot_heatmaps([[heatmap(maps, module) for module in modules]], out / "encoder.png",
                  "The encoder: no causal mask, each source piece reads the whole source",
                  max_columns=len(modules))


def words_figure(model, tok, maps, src_ids: list[int], out: Path, top: int = 6) -> None:
    """Stop 12: the distribution over the vocabulary at four output positions of one
    translation (the top pieces), and where the model's parameters are."""
    plt = pyplot()
    tgt_in = torch.tensor([[tok.tgt.piece_to_id(p) for p in maps.tgt_in_pieces]])  # BOS first
    with torch.no_grad():
        probs = model(torch.tensor([src_ids]), tgt_in)[0].float().softmax(-1)  # (T, V)
    positions = np.linspace(0, probs.size(0) - 1, 4).round().astype(int)
    fig = plt.figure(figsize=(12, 3.4), layout="constrained")
    grid = fig.add_gridspec(1, 5)
    for n, t in enumerate(positions):
        ax = fig.add_subplot(grid[0, n])
        p, ids = probs[t].topk(top)
        ax.barh(np.arange(top)[::-1], p.numpy())
        ax.set_yticks(np.arange(top)[::-1], [tok.tgt.id_to_piece(int(i)) for i in ids],
                      fontsize=7)
        ax.set_xlim(0, 1)
        ax.set_title(f"after “{maps.tgt_in_pieces[t]}”", fontsize=8)
        ax.set_xlabel("probability", fontsize=7)
    cfg = model.cfg
    D, V = cfg.d_model, model.output.weight.size(0)
    total = sum(p.numel() for p in model.parameters())
    embedding = model.output.weight.numel()
    encoder = sum(p.numel() for p in model.encoder_layers.parameters())
    decoder = sum(p.numel() for p in model.decoder_layers.parameters())
    parts = {"embeddings (tied)": embedding, "encoder layers": encoder,
             "decoder layers": decoder, "final norms": total - embedding - encoder - decoder}
    ax = fig.add_subplot(grid[0, 4])
    ax.bar(range(len(parts)), [v / 1e6 for v in parts.values()])
    ax.set_xticks(range(len(parts)), list(parts), rotation=30, ha="right", fontsize=7)
    ax.set_ylabel("million parameters", fontsize=7)
    # three short lines: a title wider than its narrow panel ran off the figure's edge
    ax.set_title(f"{total / 1e6:.1f}M parameters;\none {V:,} x {D} matrix\nreads and writes",
                 fontsize=8)
    fig.suptitle(f"“{maps.translation}”: softmax(states · Eᵀ) at four positions", fontsize=9)
    save_figure(fig, out / "words.png")


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
    """The three roles (rows) at every layer (columns), heads averaged (said once, in the
    figure's title: the panels' own titles, "decoder causal self-attention, layer 1, heads
    averaged", ran into each other)."""
    def panel(module: str) -> Heatmap:
        shown = heatmap(maps, module)
        return replace(shown, title=shown.title.removesuffix(", heads averaged"))

    plot_heatmaps([[panel(module) for module in modules_of(maps, role)] for role in ROLES],
                  out / "roles.png", f"“{maps.translation}”, heads averaged",
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


def training_figure(run_dir: Path, out: Path, epsilon: float = 0.1, vocab: int = 8000) -> None:
    """Stop 14: the run's training loss and dev BLEU, its learning rate as the schedule wrote
    it, and the label-smoothed target the loss trains towards."""
    plt = pyplot()
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in records if r["kind"] == "train"]
    valid = [r for r in records if r["kind"] == "valid"]
    fig, axes = plt.subplots(1, 4, figsize=(14, 3.2), layout="constrained")
    axes[0].plot([r["elapsed"] / 60 for r in train], [r["loss"] for r in train])
    axes[0].set_ylabel("training loss (NLL per token)")
    axes[1].plot([r["elapsed"] / 60 for r in valid], [r["dev_bleu"] for r in valid], marker="o")
    axes[1].set_ylabel("dev BLEU (greedy)")
    axes[2].plot([r["elapsed"] / 60 for r in train], [r["lr"] for r in train])
    axes[2].set_ylabel("learning rate: warm-up, then 1/√step")
    for ax in axes[:3]:
        ax.set_xlabel("minutes")
        ax.grid(alpha=0.3)
    shown = 12  # the gold piece and the first others of the V in the vocabulary
    target = np.full(shown, epsilon / vocab)
    target[3] += 1 - epsilon
    axes[3].bar(range(shown), target, color=["tab:orange" if i == 3 else "tab:blue"
                                               for i in range(shown)])
    axes[3].set_yscale("log")
    axes[3].set_xticks(range(shown), ["gold" if i == 3 else "" for i in range(shown)])
    axes[3].set_xlabel(f"pieces of the vocabulary (12 of {vocab:,})")
    axes[3].set_ylabel("target probability")
    # two lines: on one, the title ran off the figure's edge
    axes[3].set_title(f"label smoothing ε = {epsilon}:\ngold {1 - epsilon + epsilon / vocab:.4f},"
                      f" every other piece {epsilon / vocab:.1e}", fontsize=8)
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
    ap.add_argument("--rnn", type=Path, help="a trained attention-RNN run, for the alignment")
    ap.add_argument("--export", type=Path, metavar="FOLDER",
                    help="also export the run's model (bf16, about 16 MB) for the notebook's "
                         "TOUR_MODEL")
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
    src_ids = tok.encode_src([src[args.sentence]])[0]
    qkv_figure(model, maps, src_ids, args.out)
    softmax_figure(model, maps, src_ids, args.out)
    masks_figure(model, tok, maps, src[args.sentence], min(src[:40], key=len), args.out)
    split_figure(maps, args.out)
    heads_figure(maps, args.out)
    encoder_figure(maps, args.out)
    roles_figure(maps, args.out)
    forming_figure(args.run_dir, src[args.sentence], maps.translation, args.out)
    if args.rnn:
        alignment_figure(args.rnn, maps, src[args.sentence], args.out)
    words_figure(model, tok, maps, src_ids, args.out)
    ids = tok.encode_src(src[:256])
    batches = [pad([torch.tensor(i) for i in ids[b: b + 32]]) for b in range(0, 256, 32)]
    ffn_figure(model, batches, src_ids, maps.src_pieces, args.out)
    scale_figure(model, batches, args.out)
    tgt = tok.encode_tgt(ref[:256])
    tgt_in = [pad([torch.tensor([BOS] + t[:-1]) for t in tgt[b: b + 32]])
              for b in range(0, 256, 32)]
    residual_figure(model, batches, tgt_in, args.out)
    positions_figure(model, args.out)
    training_figure(args.run_dir, args.out, loaded.recipe.train.label_smoothing,
                    tok.tgt_vocab_size)
    search_figure(model, loaded, src[:500], ref[:500], args.out)
    if args.exercise:
        recipe = Path(__file__).resolve().parents[1] / "recipes/multi30k/transformer_2017.yaml"
        final = exercise_figure(recipe, args.data, args.out, args.exercise_minutes)
        print("exercise, last logged training loss:", final)
    if args.export:
        from translate.export import export
        done = export(args.run_dir / "best.pt", "inference", args.export, dtype="bf16")
        print(f"exported the model to {done.out}: TOUR_MODEL={done.out} in the notebook")
    print(f"wrote the figures to {args.out}")


if __name__ == "__main__":
    main()
