"""Attention maps: record one sentence's attention weights and draw them.

`attention_maps` translates a sentence greedily, then records every attention module while the
model re-reads its own translation (teacher forcing), or a translation it is given (`target`: a
beam candidate, a reference); each module's `role` and `layer` say what it is.
`attention_figure` draws them: a row per role, a column per layer. `draw_attention` does both
for a checkpoint (`translate attention`).

Shapes: H heads, S source pieces, T target pieces.

Tests: tests/analysis/test_attention_maps.py, tests/analysis/test_attention_figures.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
import torch
from torch import nn

from translate.alignment import record_attention
from translate.analysis.plots import Heatmap, plot_heatmaps
from translate.config import DecodeConfig
from translate.models.attention import CROSS, DECODER_SELF, ENCODER_SELF
from translate.ready import Ready
from translate.search import greedy_search, max_output_length
from translate.tokenizer import Tokenizer
from translate.tokens import BOS, EOS, PAD


@dataclass
class AttentionMaps:
    """One sentence's attention weights, recorded while the model re-reads a translation: its
    greedy output, or a translation it was given (`forced`), teacher-forced."""

    translation: str
    src_pieces: list[str]  # S source pieces, EOS last
    tgt_in_pieces: list[str]  # T decoder inputs: BOS, then the output pieces
    out_pieces: list[str]  # T pieces predicted at each position (EOS last when the output ended)
    weights: dict[str, torch.Tensor]  # attention module -> (H, T_query, T_key); the RNN has H = 1
    roles: dict[str, tuple[str, int]]  # attention module -> its role and layer
    forced: bool = False  # the translation was given, not searched


def output_limit(src_pieces: int, cfg: DecodeConfig, max_positions: int) -> int:
    """The most pieces (EOS excluded) the model may write for a source of `src_pieces` pieces
    (EOS included): what greedy search allows, and so what a given translation may have."""
    src = torch.ones(1, src_pieces, dtype=torch.long)  # (1, S), no padding
    return max_output_length(src, cfg.max_len_a, cfg.max_len_b, max_positions - 1)


def target_ids(tokenizer: Tokenizer, target: str | Sequence[int], limit: int) -> list[int]:
    """A given translation's pieces (EOS excluded), checked against `limit` (`output_limit`):
    a string is segmented by the target tokenizer, a list of ids taken as it is."""
    if isinstance(target, str):
        if not target.strip():
            raise ValueError("the target translation is empty")
        ids = tokenizer.encode_tgt([target])[0][:-1]
    else:
        ids = [int(i) for i in target]
        bad = [i for i in ids if i in (PAD, BOS, EOS) or not 0 <= i < tokenizer.tgt_vocab_size]
        if bad:
            raise ValueError(f"target id {bad[0]} is not an output piece: give ids below "
                             f"{tokenizer.tgt_vocab_size}, without padding, BOS or EOS")
    if len(ids) > limit:
        raise ValueError(f"the target has {len(ids)} pieces, over the limit of {limit} for this "
                         f"source (the longest translation the model may give it)")
    return ids


@torch.no_grad()
def attention_maps(model: nn.Module, tokenizer: Tokenizer, sentence: str, cfg: DecodeConfig,
                   device: torch.device | str = "cpu", target: str | Sequence[int] | None = None
                   ) -> AttentionMaps:
    """Record every attention module on `sentence`'s translation: its greedy translation, or
    `target` (a string, or target ids without EOS) fed to the decoder (teacher forcing)."""
    if not sentence.strip():
        raise ValueError("the sentence to translate is empty")
    model.eval()
    src_ids = tokenizer.encode_src([sentence])[0]
    limit = model.cfg.max_positions - 1
    if len(src_ids) > limit:
        raise ValueError(f"the sentence has {len(src_ids)} pieces, over the model's limit of "
                         f"{limit}")
    src = torch.tensor([src_ids], device=device)  # (1, S)
    max_len = output_limit(len(src_ids), cfg, model.cfg.max_positions)
    forced = target is not None
    if forced:
        hyp = target_ids(tokenizer, target, max_len)
    else:
        hyp = greedy_search(model, src, max_len)[0]
    tgt_in = torch.tensor([[BOS] + hyp], device=device)  # (1, T)
    with record_attention(model) as recorded:
        logits = model(src, tgt_in)  # (1, T, V)
    # row t predicts hyp[t]; the last row EOS, unless greedy search stopped at the length limit
    ended = forced or len(hyp) < max_len
    out_ids = hyp + [EOS if ended else int(logits[0, -1].argmax())]
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
                         [tgt_piece(i) for i in out_ids], weights, roles, forced)


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
    matrix = (w.mean(0) if head is None else w[head]).numpy()  # (T_query, T_key)
    hidden = np.triu(np.ones(matrix.shape, dtype=bool), k=1) if role == DECODER_SELF else None
    return Heatmap(prefix + title, matrix, *axes, hidden=hidden)


def attention_figure(maps: AttentionMaps, output: str | Path, title: str) -> Path:
    """Every attention module of one translation: a row per role, a column per layer."""
    rows: dict[str, list[Heatmap]] = {}
    for module in maps.weights:
        rows.setdefault(maps.roles[module][0], []).append(heatmap(maps, module))
    return plot_heatmaps(list(rows.values()), output, title, max_columns=4)


def draw_attention(checkpoint: str, text: str, output: str | Path, device: str | None = None
                   ) -> tuple[AttentionMaps, Path]:
    """`translate attention`: the maps of `checkpoint`'s translation of `text` (a file or run
    folder), drawn into `output`; returns them (with the translation) and the figure's path."""
    # the model as loaded (the plain engine changes nothing), in fp32: its weights unrounded
    ready = Ready.load(checkpoint, device, precision="fp32", engine="plain")
    maps = attention_maps(ready.model, ready.tokenizer, text, ready.recipe.decode, ready.device)
    title = f"{ready.recipe.model.arch}: {text.strip()}  →  {maps.translation}"
    return maps, attention_figure(maps, output, title)
