"""Word alignments from attention: which source words each output word was translated from.

While the decoder writes an output piece it attends over the source pieces (Bahdanau et al.,
2014 read the RNN's attention as a soft alignment; a Transformer has such a map per
cross-attention layer and head). Words are what users see, so pieces are merged to words.

A word, everywhere (alignments, markup, gold files), is what Python's `str.split()` separates
in the text as given: the source line as it was read, the translation as it is written. Word i
of a source line is `line.split()[i]`, whatever SentencePiece's normalization makes of it (it
drops DEL and other control characters, turns a zero-width space or a BOM into a space or
nothing), so a link never names a word the user cannot count to. A source piece belongs to the
word SentencePiece made it of, found by encoding the line word by word (`text_words`); a word
that gives no piece at all (a lone DEL) is never linked. An output piece belongs to the word of
the translation it adds characters to (`output_words`); one that adds only a space, to the word
after it.

    record_attention   every attention module's weights while a block runs
    attention_of_pairs each (source, output) pair's cross-attention, (L, H, T, S), from one
                       teacher-forced pass a batch
    Reading            how to read the weights: a cross-attention layer and head (or the heads
                       averaged), `shift` and `each` (below); the RNN has one map
    Words              a text's words and the word of each of its pieces
    text_words         Words of texts SentencePiece encoded (a source line, a gold sentence)
    output_words       Words of texts decoded from pieces (a translation)
    read_links         one sentence's links from its (T, S) map and Words
    word_weights       a map pooled to words: (output words, source words)
    align              the links of many pairs, read one way

A map is read one of two ways (`each`). "output": each output piece is linked to the source
piece it attends to most, and nothing when that is the source EOS (which collects the attention
of words with no counterpart); "source": each source word is linked to the output word that
attends to it most (a word's weight is its pieces' largest), so every source word with a piece
has exactly one link, which is what carrying markup needs. `shift`: row t of the weights is the
decoder's query while it *predicts* output piece t; with `shift`, piece t is read from the next
row, where the decoder has just been given piece t as its input (Chen et al., 2020 found that
better for their Transformers). Which reading aligns best is measured on a gold set's dev part
(`translate align-score`, with the gold files and AER of translate.analysis.gold), not
assumed: on gold/multi30k the defaults of `Reading`.

Links are Pharaoh's `i-j`: source word i, output word j, both from 0. Shapes: L layers, H
heads, T decoder positions, S source pieces.
"""

from __future__ import annotations

from bisect import bisect_right
from contextlib import contextmanager
from dataclasses import dataclass
from difflib import SequenceMatcher
from functools import partial
from itertools import accumulate
from typing import Callable, Iterator, Optional, Sequence

import sentencepiece as spm
import torch
from torch import nn

from translate.data.batch import pad
from translate.models.attention import CROSS, MultiHeadAttention
from translate.models.rnn import AdditiveAttention
from translate.tokenizer import encode
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


@dataclass(frozen=True)
class Words:
    """A text's words, `count` of them (`len(text.split())`), and the words each of its pieces
    belongs to, `of_piece` (from 0): one as a rule; none for a space with no word after it;
    two or more for a piece holding characters of several ("dogs", made of "dog\\x1fs", which
    `str.split()` splits and SentencePiece joins)."""

    of_piece: tuple[tuple[int, ...], ...]
    count: int

    def pairs(self) -> list[tuple[int, int]]:
        """Every (piece, word) that belongs together."""
        return [(piece, word) for piece, words in enumerate(self.of_piece) for word in words]

    def linkable(self) -> set[int]:
        """The words that have a piece: those a link can name."""
        return {word for words in self.of_piece for word in words}


def text_words(sp: spm.SentencePieceProcessor, texts: Sequence[str],
               ids: Sequence[Sequence[int]]) -> list[Words]:
    """The Words of each text, given the pieces `ids` that `sp` made of it (EOS excluded; a
    prefix of them where the model's input was cut): each piece belongs to the word of
    `text.split()` whose own encoding gives it. Where the whole line encodes otherwise (a
    character the two see differently: a unit separator, which `str.split()` splits at and
    SentencePiece drops, or keeps as a character), the line's pieces are matched to the words'
    pieces in order: one without a match belongs to the words that hold its characters, and
    one that only the line has (a character `str.split()` takes for a space) to none."""
    splits = [text.split() for text in texts]
    per_word = iter(encode(sp, [word for words in splits for word in words]))
    found = []
    for words, line_ids in zip(splits, ids):
        word_ids = [next(per_word) for _ in words]
        found.append(Words(tuple(_follow(list(line_ids), word_ids, partial(_length, sp))),
                           len(words)))
    return found


def _length(sp: spm.SentencePieceProcessor, piece: int) -> int:
    """The characters of text a piece stands for ("▁" not counted; an unknown piece one)."""
    return 1 if sp.is_unknown(piece) else len(sp.id_to_piece(piece).replace(WORD_START, ""))


def _follow(line_ids: list[int], word_ids: list[list[int]], length: Callable[[int], int]
            ) -> list[tuple[int, ...]]:
    """The words of each of `line_ids` (a line's pieces), from `word_ids` (each word's own)."""
    flat = [piece for pieces in word_ids for piece in pieces]
    labels = [word for word, pieces in enumerate(word_ids) for _ in pieces]
    if line_ids == flat[: len(line_ids)]:  # the usual case: the words' pieces, in order
        return [(word,) for word in labels[: len(line_ids)]]
    found: list[tuple[int, ...]] = []
    for tag, i1, i2, j1, j2 in SequenceMatcher(None, line_ids, flat, False).get_opcodes():
        after = (labels[j2],) if j2 < len(labels) else ()  # the word the next match is in
        if tag == "equal":
            found += [(word,) for word in labels[j1:j2]]
        elif tag == "delete":  # pieces only the line has: what str.split() takes for space
            found += [()] * (i2 - i1)
        elif tag == "replace":
            found += _by_characters(line_ids[i1:i2], flat[j1:j2], labels[j1:j2], after, length)
    return found


def _by_characters(pieces: list[int], others: list[int], labels: list[int],
                   after: tuple[int, ...], length: Callable[[int], int]
                   ) -> list[tuple[int, ...]]:
    """Each of `pieces` given the labels of those of `others` (the same text, segmented
    otherwise) that hold its characters, counted in proportion; a piece of no character goes
    with the next piece, or to `after`."""
    ends = list(accumulate(length(p) for p in others))
    sizes = [length(p) for p in pieces]
    total, found, end = sum(sizes), [], 0

    def label(char: int) -> int:  # the label of the other piece that holds `char`
        return labels[min(bisect_right(ends, char * ends[-1] // total), len(labels) - 1)]

    for size in sizes:
        end += size
        found.append(tuple(sorted({label(end - size), label(end - 1)})) if size else None)
    for k in reversed(range(len(found))):
        if found[k] is None:
            found[k] = found[k + 1][:1] if k + 1 < len(found) else after
    return found


def output_words(decode: Callable[[list[list[int]]], list[str]], ids: Sequence[Sequence[int]]
                 ) -> list[Words]:
    """The Words of the texts `decode` makes of `ids` (the translations as they are written):
    each piece belongs to the words it adds characters to in `decode(ids[:k + 1])`; one that
    adds only a space, or nothing (a special piece), to the word after it."""
    prefixes = [list(seq[: k + 1]) for seq in ids for k in range(len(seq))]
    texts = iter(decode(prefixes))
    found = []
    for seq, whole in zip(ids, decode([list(seq) for seq in ids])):
        count, before = len(whole.split()), ""
        of_piece: list[Optional[tuple[int, ...]]] = []
        for _ in seq:
            text = next(texts)
            added = text[len(before):] if text.startswith(before) else text[-1:]
            last = len(text.split()) - 1  # the last word it adds to; its first, k words back
            of_piece.append(tuple(range(last - len(added.split()) + 1, last + 1))
                            if added.strip() else None)
            before = text
        for k in reversed(range(len(of_piece))):
            if of_piece[k] is None:
                of_piece[k] = of_piece[k + 1][:1] if k + 1 < len(of_piece) else ()
        found.append(Words(tuple(tuple(w for w in words if w < count) for words in of_piece),
                           count))
    return found


def word_index(pieces: Sequence[str]) -> list[int]:
    """The word of each piece (from 0) from the pieces alone, where no text is at hand: a
    piece starting with "▁" begins a new word; a piece that is only "▁" (a space the model
    wrote alone) belongs to the word after it, which may not exist (`word_count` counts those
    that do). `text_words` and `output_words` follow the text's own words instead."""
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
    """How many words the pieces make, by their "▁" marks (`word_index`)."""
    return 1 + max((i for i, p in zip(word_index(pieces), pieces) if p.strip(WORD_START)),
                   default=-1)


def marked_words(pieces: Sequence[str]) -> Words:
    """Words from the pieces' "▁" marks alone (`word_index`)."""
    count = word_count(pieces)
    return Words(tuple((w,) if w < count else () for w in word_index(pieces)), count)


def word_links(weights: torch.Tensor, src_pieces: Sequence[str], out_pieces: Sequence[str],
               shift: bool, each: str = "source") -> list[Link]:
    """`read_links` with words from the pieces' marks (`marked_words`): `src_pieces` with EOS
    last, `out_pieces` without EOS."""
    return read_links(weights, marked_words(src_pieces[:-1]), marked_words(out_pieces), shift,
                      each)


def read_links(weights: torch.Tensor, src: Words, out: Words, shift: bool,
               each: str = "source") -> list[Link]:
    """One sentence's word links, sorted, from its attention `weights` (T, S): rows are the
    decoder's positions (BOS first, T = output pieces + 1), columns the source pieces (EOS
    last, S = source pieces + 1); `src` and `out` the words of the source and output pieces.
    `shift` and `each` as `Reading` says."""
    n, s = len(out.of_piece), len(src.of_piece) + 1
    if weights.shape != (n + 1, s):
        raise ValueError(f"weights of shape {tuple(weights.shape)} for {n} output and {s} "
                         f"source pieces: expected ({n + 1}, {s})")
    rows = weights[1: n + 1] if shift else weights[:n]  # (n, S): one row per output piece
    if each == "output":  # each output piece's strongest source piece; EOS (s - 1): none
        return sorted({(i, j) for t, strongest in enumerate(rows.argmax(-1).tolist())
                       if strongest < s - 1 for i in src.of_piece[strongest]
                       for j in out.of_piece[t]})
    if not src.count or not out.count:
        return []
    words = word_weights(rows, src, out)  # (output words, source words)
    linkable = src.linkable()
    return [(i, j) for i, j in enumerate(words.argmax(dim=0).tolist()) if i in linkable]


def word_weights(rows: torch.Tensor, src: Words, out: Words) -> torch.Tensor:
    """(output words, source words): the attention `rows` (output pieces, S) pooled to words,
    a pair of words weighing their pieces' largest weight; the EOS column dropped."""
    src_pairs = torch.tensor(src.pairs(), dtype=torch.long).view(-1, 2)  # (P, 2): piece, word
    out_pairs = torch.tensor(out.pairs(), dtype=torch.long).view(-1, 2)  # (Q, 2)
    weights = rows.float()[out_pairs[:, 0]][:, src_pairs[:, 0]]  # (Q, P)
    cell = out_pairs[:, 1, None] * src.count + src_pairs[None, :, 1]  # (Q, P)
    words = torch.zeros(out.count * src.count).scatter_reduce(
        0, cell.flatten(), weights.flatten(), "amax")
    return words.view(out.count, src.count)


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
          src_words: Sequence[Words], out_words: Sequence[Words], reading: Reading = Reading(),
          batch_size: int = 64) -> list[list[Link]]:
    """Word links of each (source, output) pair, read as `reading` says from the attention of
    one teacher-forced pass (`attention_of_pairs`); `src_words` and `out_words` are the words
    of each pair's pieces (`text_words`, `output_words`)."""
    return [read_links(read_map(weights, reading), src_words[i], out_words[i], reading.shift,
                       reading.each)
            for i, weights in enumerate(attention_of_pairs(model, sources, outputs,
                                                           batch_size))]


def pharaoh(links: Sequence[Link]) -> str:
    """Links as one line of Pharaoh's format: `i-j` pairs, source word first, from 0."""
    return " ".join(f"{i}-{j}" for i, j in links)
