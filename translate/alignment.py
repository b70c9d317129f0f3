"""Word alignments from attention: which source words each output word was translated from.

While the decoder writes an output piece it attends over the source pieces (Bahdanau et al.,
2014 read the RNN's attention as a soft alignment; a Transformer has such a map per
cross-attention layer and head). Words are what users see, so pieces are merged to words:
SentencePiece starts each word's first piece with "▁".

    record_attention   every attention module's weights while a block runs
    attention_of_pairs each (source, output) pair's cross-attention, (L, H, T, S), from one
                       teacher-forced pass a batch
    Reading            how to read the weights: a cross-attention layer and head (or the heads
                       averaged), `shift` and `each` (below); the RNN has one map
    word_index         the word of each piece: SentencePiece marks where whitespace was
    word_links         one sentence's links from its (T, S) map and pieces
    word_weights       a map pooled to words: (output words, source words)
    align              the links of many pairs, read one way
    read_gold          a gold file's sure and possible links (Pharaoh or talp)
    alignment_error    AER, precision and recall of links against gold (Och and Ney, 2003)

A map is read one of two ways (`each`). "output": each output piece is linked to the source
piece it attends to most, and nothing when that is the source EOS (which collects the attention
of words with no counterpart); "source": each source word is linked to the output word that
attends to it most (a word's weight is its pieces' largest), so every source word has exactly
one link, which is what carrying markup needs. `shift`: row t of the weights is the decoder's
query while it *predicts* output piece t; with `shift`, piece t is read from the next row, where
the decoder has just been given piece t as its input (Chen et al., 2020 found that better for
their Transformers). Which reading aligns best is measured on a gold set's dev part
(`translate align-score`), not assumed: on gold/multi30k the defaults of `Reading`.

Links are Pharaoh's `i-j`: source word i, output word j, both from 0. Shapes: L layers, H
heads, T decoder positions, S source pieces.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Iterator, Optional, Sequence

import torch
from torch import nn

from translate.data.batch import pad
from translate.files import open_regular
from translate.models.attention import CROSS, MultiHeadAttention
from translate.models.rnn import AdditiveAttention
from translate.tokens import BOS

WORD_START = "\u2581"  # SentencePiece's mark of a piece that begins a word
Link = tuple[int, int]  # (source word, output word)


@contextmanager
def record_attention(model: nn.Module) -> Iterator[dict[str, list[torch.Tensor]]]:
    """Collect attention weights while the block runs: {module name: [weights per call]}.

    Every attention module's `record_weights` listens for the block's duration, which makes
    MultiHeadAttention run its written-out path: each call adds (B, H, T, S) weights;
    AdditiveAttention adds (B, 1, S), one per decoder step. Each module's `role` and `layer`
    say what it is. Afterwards the modules listen as they did before.
    """
    maps: dict[str, list[torch.Tensor]] = {}
    before = []
    for name, module in model.named_modules():
        if isinstance(module, (MultiHeadAttention, AdditiveAttention)):
            maps[name] = []
            before.append((module, module.record_weights))
            module.record_weights = partial(_keep_weights, maps[name])
    try:
        yield maps
    finally:
        for module, listener in before:
            module.record_weights = listener


def _keep_weights(store: list, weights: torch.Tensor) -> None:
    weights = weights.detach()
    store.append(weights[:, None] if weights.dim() == 2 else weights)  # additive: (B, 1, S)


EACH = ("source", "output")


@dataclass(frozen=True)
class Reading:
    """Where and how alignments are read: the Transformer's cross-attention `layer` (from 0;
    negative counts from the last) and `head` (None: the heads averaged); the RNN's one map
    ignores both (layer None names it). `shift`: read output piece t where the decoder was
    given it. `each`: "source" links each source word to the output word that attends to it
    most; "output" links each output word to the source word it attends to most (none when
    that is EOS). See the module docstring."""

    layer: Optional[int] = -1  # the defaults: chosen on gold/multi30k/dev (docs/results.md)
    head: Optional[int] = None
    shift: bool = False
    each: str = "source"

    def __post_init__(self):
        if self.each not in EACH:
            raise ValueError(f"each must be one of {', '.join(EACH)}, not {self.each!r}")

    def describe(self) -> str:
        way = f"{'shifted' if self.shift else 'predicting'}, each {self.each} word"
        if self.layer is None:
            return f"the attention, {way}"
        heads = "heads averaged" if self.head is None else f"head {self.head}"
        return f"layer {self.layer}, {heads}, {way}"


def word_index(pieces: Sequence[str]) -> list[int]:
    """The word of each piece (from 0), as the detokenized text's whitespace splits it: a
    piece starting with "▁" begins a new word; a piece that is only "▁" (a space the model
    wrote alone) belongs to the word after it, which may not exist (`word_count` counts those
    that do)."""
    index, words, pending = [], -1, True
    for piece in pieces:
        pending = pending or piece.startswith(WORD_START)
        if piece.strip(WORD_START):
            words, pending = words + pending, False
            index.append(words)
        else:
            index.append(words + 1)
    return index


def word_count(pieces: Sequence[str]) -> int:
    """How many words the pieces make (the detokenized text's whitespace-separated words)."""
    return 1 + max((i for i, p in zip(word_index(pieces), pieces) if p.strip(WORD_START)),
                   default=-1)


def word_links(weights: torch.Tensor, src_pieces: Sequence[str], out_pieces: Sequence[str],
               shift: bool, each: str = "source") -> list[Link]:
    """One sentence's word links, sorted, from its attention `weights` (T, S): rows are the
    decoder's positions (BOS first, T = output pieces + 1), columns the source pieces
    (`src_pieces`, EOS last); `out_pieces` are the output's pieces without EOS. `shift` and
    `each` as `Reading` says."""
    n = len(out_pieces)
    if weights.shape != (n + 1, len(src_pieces)):
        raise ValueError(f"weights of shape {tuple(weights.shape)} for {n} output and "
                         f"{len(src_pieces)} source pieces: expected ({n + 1}, "
                         f"{len(src_pieces)})")
    rows = weights[1: n + 1] if shift else weights[:n]  # (n, S): one row per output piece
    src_word, out_word = word_index(src_pieces[:-1]), word_index(out_pieces)
    n_src, n_out = word_count(src_pieces[:-1]), word_count(out_pieces)
    if each == "output":  # each output piece's strongest source piece; EOS: none
        eos = len(src_pieces) - 1
        return sorted({(src_word[s], out_word[t]) for t, s in enumerate(rows.argmax(-1).tolist())
                       if s != eos and src_word[s] < n_src and out_word[t] < n_out})
    if not n_src or not n_out:
        return []
    words = word_weights(rows, src_pieces, out_pieces)  # (output words, source words)
    return [(i, j) for i, j in enumerate(words.argmax(dim=0).tolist())]


def word_weights(rows: torch.Tensor, src_pieces: Sequence[str], out_pieces: Sequence[str]
                 ) -> torch.Tensor:
    """(output words, source words): the attention `rows` (output pieces, S) pooled to words,
    a pair of words weighing their pieces' largest weight; the EOS column dropped."""
    src_word, out_word = word_index(src_pieces[:-1]), word_index(out_pieces)
    n_src, n_out = word_count(src_pieces[:-1]), word_count(out_pieces)
    # a space piece past the last word goes to a spare row or column, dropped after
    src_idx = torch.tensor([min(w, n_src) for w in src_word], dtype=torch.long)  # (S - 1,)
    out_idx = torch.tensor([min(w, n_out) for w in out_word], dtype=torch.long)  # (n,)
    cell = out_idx[:, None] * (n_src + 1) + src_idx[None, :]  # (n, S - 1)
    words = torch.zeros((n_out + 1) * (n_src + 1)).scatter_reduce(
        0, cell.flatten(), rows[:, :-1].float().flatten(), "amax")
    return words.view(n_out + 1, n_src + 1)[:n_out, :n_src]


def cross_attention(recorded: dict[str, list[torch.Tensor]], model: nn.Module) -> torch.Tensor:
    """The (B, L, H, T, S) weights the decoder gave the source during one teacher-forced pass,
    from what `record_attention` recorded: each cross-attention layer's heads (the
    Transformer), or the one map of the RNN's additive attention (L = H = 1, one call a
    step)."""
    modules = dict(model.named_modules())
    cross = sorted((name for name in recorded if isinstance(modules[name], MultiHeadAttention)
                    and modules[name].role == CROSS), key=lambda name: modules[name].layer)
    if cross:
        return torch.stack([recorded[name][0] for name in cross], dim=1)  # (B, L, H, T, S)
    (name,) = [n for n in recorded if isinstance(modules[n], AdditiveAttention)]
    return torch.cat(recorded[name], dim=1)[:, None, None]  # (B, 1, 1, T, S)


def read_map(weights: torch.Tensor, reading: Reading) -> torch.Tensor:
    """One pair's (T, S) map that `reading` names out of its (L, H, T, S) weights: a layer's
    heads averaged, or one head; a single map (the RNN's) is itself whatever the reading."""
    layers, heads = weights.shape[:2]
    if layers == heads == 1:
        return weights[0, 0]
    if reading.layer is None:
        raise ValueError(f"the model has {layers} cross-attention layers: name one")
    if not -layers <= reading.layer < layers:
        raise ValueError(f"layer {reading.layer}: the model has {layers} cross-attention "
                         f"layers (0 to {layers - 1}, or -1 for the last)")
    layer = weights[reading.layer]  # (H, T, S)
    if reading.head is None:
        return layer.mean(dim=0)
    if not 0 <= reading.head < heads:
        raise ValueError(f"head {reading.head}: the model's attention has {heads} heads "
                         f"(0 to {heads - 1}); none averages them")
    return layer[reading.head]


@torch.no_grad()
def attention_of_pairs(model: nn.Module, sources: Sequence[Sequence[int]],
                       outputs: Sequence[Sequence[int]], batch_size: int = 64
                       ) -> Iterator[torch.Tensor]:
    """Each (source, output) pair's cross-attention weights (L, H, T, S), T = output pieces + 1,
    S = source pieces, while the model re-reads the output (teacher forcing), in order.

    Args:
        sources: source ids, EOS last, as the encoder reads them.
        outputs: output ids without BOS or EOS (a translation, a reference).
    """
    model.eval()
    device = next(model.parameters()).device
    for start in range(0, len(sources), batch_size):
        src_ids = sources[start: start + batch_size]
        out_ids = outputs[start: start + batch_size]
        src = pad([torch.tensor(ids) for ids in src_ids]).to(device)  # (B, S)
        tgt_in = pad([torch.tensor([BOS, *ids]) for ids in out_ids]).to(device)  # (B, T)
        with record_attention(model) as recorded:
            model(src, tgt_in)  # row t predicts output piece t; the last row, EOS
        weights = cross_attention(recorded, model).float().cpu()  # (B, L, H, T, S)
        for b, (s, o) in enumerate(zip(src_ids, out_ids)):
            yield weights[b, :, :, : len(o) + 1, : len(s)]


def align(model: nn.Module, sources: Sequence[Sequence[int]], outputs: Sequence[Sequence[int]],
          src_pieces: Sequence[Sequence[str]], out_pieces: Sequence[Sequence[str]],
          reading: Reading = Reading(), batch_size: int = 64) -> list[list[Link]]:
    """Word links of each (source, output) pair, read as `reading` says from the attention of
    one teacher-forced pass (`attention_of_pairs`); pieces are the ids' as the tokenizer's
    id_to_piece gives them."""
    return [word_links(read_map(weights, reading), src_pieces[i], out_pieces[i], reading.shift,
                       reading.each)
            for i, weights in enumerate(attention_of_pairs(model, sources, outputs,
                                                           batch_size))]


def pharaoh(links: Sequence[Link]) -> str:
    """Links as one line of Pharaoh's format: `i-j` pairs, source word first, from 0."""
    return " ".join(f"{i}-{j}" for i, j in links)


@dataclass
class Gold:
    """One sentence pair's gold links: `sure` ones, and `possible` ones (sure included)."""

    sure: frozenset[Link]
    possible: frozenset[Link]


GOLD_FORMATS = ("pharaoh", "talp")


def read_gold(path: str | Path, fmt: str = "pharaoh",
              words: Optional[Sequence[tuple[int, int]]] = None) -> list[Gold]:
    """A gold alignment file: one line per sentence pair, links `i-j` (sure) and `ipj`
    (possible), source word first; pharaoh counts from 0, talp from 1. With `words` (the
    source and target word counts of each pair), the lines must match the pairs one for one
    and every index must fall inside its sentence; anything else is a ValueError naming the
    line."""
    if fmt not in GOLD_FORMATS:
        raise ValueError(f"gold format {fmt!r}: use one of {', '.join(GOLD_FORMATS)}")
    base = 1 if fmt == "talp" else 0
    with open_regular(Path(path), what="gold alignment file") as f:
        try:
            lines = f.read().decode("utf-8").splitlines()
        except UnicodeDecodeError as e:
            raise ValueError(f"{path}: not UTF-8 text (byte {e.start})") from None
    if words is not None and len(lines) != len(words):
        raise ValueError(f"{path}: {len(lines)} lines of links for {len(words)} sentence pairs")
    gold = []
    for number, line in enumerate(lines, 1):
        sure, possible = set(), set()
        for item in line.split():
            link, is_sure = _parse_link(item, base, f"{path}:{number}")
            if words is not None:
                n_src, n_tgt = words[number - 1]
                if not (link[0] < n_src and link[1] < n_tgt):
                    first = base
                    raise ValueError(f"{path}:{number}: link {item} is outside the pair's "
                                     f"{n_src} source and {n_tgt} target words (indices from "
                                     f"{first} to {n_src - 1 + first} and {n_tgt - 1 + first})")
            (sure if is_sure else possible).add(link)
        gold.append(Gold(frozenset(sure), frozenset(sure | possible)))
    return gold


def _parse_link(item: str, base: int, where: str) -> tuple[Link, bool]:
    """`i-j` (sure) or `ipj` (possible) as a 0-based link and whether it is sure."""
    for mark, sure in (("-", True), ("p", False)):
        left, found, right = item.partition(mark)
        if found and left.isdigit() and right.isdigit() and left.isascii() and right.isascii():
            i, j = int(left) - base, int(right) - base
            if i < 0 or j < 0:
                raise ValueError(f"{where}: link {item} counts from {base}")
            return (i, j), sure
    raise ValueError(f"{where}: {item!r} is not a link (i-j for sure, ipj for possible)")


@dataclass(frozen=True)
class AlignmentScores:
    """AER (lower is better), precision against the possible links and recall of the sure
    ones, in percent, and how many links were predicted and how many are sure."""

    aer: float
    precision: float
    recall: float
    predicted: int
    sure: int


def alignment_error(links: Sequence[Sequence[Link]], gold: Sequence[Gold]) -> AlignmentScores:
    """AER = 1 - (|A & S| + |A & P|) / (|A| + |S|) over every sentence pair (A predicted, S
    sure, P possible with the sure links in it), with precision |A & P| / |A| and recall
    |A & S| / |S|."""
    if len(links) != len(gold):
        raise ValueError(f"{len(links)} aligned sentences against {len(gold)} gold ones")
    a = s = a_s = a_p = 0
    for predicted, g in zip(links, gold):
        predicted = set(predicted)
        a, s = a + len(predicted), s + len(g.sure)
        a_s, a_p = a_s + len(predicted & g.sure), a_p + len(predicted & g.possible)
    aer = 1 - (a_s + a_p) / (a + s) if a + s else 0.0
    return AlignmentScores(100 * aer, 100 * a_p / a if a else 0.0, 100 * a_s / s if s else 0.0,
                           a, s)


def diagonal_links(n_src: int, n_out: int) -> list[Link]:
    """The baseline that knows no words: output word j linked to the source word at the same
    relative position."""
    if not n_src or not n_out:
        return []
    return [(round(j * (n_src - 1) / max(n_out - 1, 1)), j) for j in range(n_out)]
