"""Toy tasks whose right attention is known: copy and reverse a string of symbols.

A model that copies must read source position t when it writes target position t; one that
reverses, position L - 1 - t. So its cross-attention can be graded against the answer, which no
real translation has: `alignment_accuracy` is the share of target positions whose attention peaks
on the right source position. A one-layer Transformer learns either task on a laptop CPU in
about a minute (`train_toy`), quick enough to train, break and retrain inside a notebook.

The symbols are ids after the four special ones (translate.tokens), so no tokenizer is needed:
a source is L symbols then EOS; the target in is BOS then the answer, the target out the answer
then EOS.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Optional

import torch
from torch import nn

from translate.alignment import record_attention
from translate.data.batch import Batch, pad
from translate.models import TransformerConfig, build_model
from translate.models.attention import CROSS
from translate.search import greedy_search
from translate.tokens import BOS, EOS, PAD, SPECIAL_IDS
from translate.training.step import plain_step

TASKS = ("copy", "reverse")
FIRST_SYMBOL = len(SPECIAL_IDS)  # ids 0-3 are PAD, UNK, BOS, EOS


def answer(task: str, symbols: list[int]) -> list[int]:
    """The target of `task` for a source of `symbols`."""
    if task not in TASKS:
        raise ValueError(f"unknown toy task '{task}'; valid: {', '.join(TASKS)}")
    return list(symbols) if task == "copy" else list(reversed(symbols))


def right_positions(task: str, length: int) -> list[int]:
    """For each of the `length` answer positions t, the source position that holds its symbol:
    t for copy, length - 1 - t for reverse."""
    answer(task, [])  # the task's name checked
    return list(range(length)) if task == "copy" else list(range(length - 1, -1, -1))


def toy_batch(task: str, size: int, generator: torch.Generator, symbols: int = 16,
              lengths: tuple[int, int] = (4, 12)) -> Batch:
    """`size` random sources of `lengths[0]`..`lengths[1]` symbols (of `symbols` kinds) and
    their answers, as a training Batch."""
    low, high = lengths
    if not 1 <= low <= high:
        raise ValueError(f"lengths must be 1 <= shortest <= longest, got {lengths}")
    if symbols < 2:
        raise ValueError(f"a toy task needs at least 2 symbols, got {symbols}")
    sources, targets = [], []
    for n in torch.randint(low, high + 1, (size,), generator=generator).tolist():
        seq = (torch.randint(0, symbols, (n,), generator=generator) + FIRST_SYMBOL).tolist()
        sources.append(seq + [EOS])
        targets.append(answer(task, seq))
    tgt_in = pad([[BOS] + t for t in targets])
    tgt_out = pad([t + [EOS] for t in targets])
    return Batch(pad(sources), tgt_in, tgt_out, int((tgt_out != PAD).sum()))


@torch.no_grad()
def cross_attention(model: nn.Module, batch: Batch) -> torch.Tensor:
    """The last decoder layer's cross-attention weights, teacher-forced on `batch`, averaged
    over its heads: (B, T, S)."""
    model.eval()
    with record_attention(model) as maps:
        model(batch.src, batch.tgt_in)
    cross = [name for name, module in model.named_modules()
             if getattr(module, "role", None) == CROSS]
    return maps[cross[-1]][-1].mean(dim=1)  # (B, H, T, S) -> (B, T, S)


def alignment_accuracy(model: nn.Module, task: str, batch: Batch) -> float:
    """The share of answer positions (EOS excluded) whose cross-attention, averaged over the
    heads of the last layer, peaks on the source position that holds the symbol to write."""
    peaks = cross_attention(model, batch).argmax(dim=-1)  # (B, T)
    right = total = 0
    for row, src in zip(peaks, batch.src):
        length = int((src != PAD).sum()) - 1  # symbols before EOS
        expected = torch.tensor(right_positions(task, length))
        right += int((row[:length] == expected).sum())
        total += length
    return right / total


@torch.no_grad()
def exact_match(model: nn.Module, batch: Batch) -> float:
    """The share of `batch`'s strings that greedy search, one token at a time with the cache
    as decoding runs, answers exactly (no teacher forcing: the model reads its own output)."""
    model.eval()
    lengths = (batch.tgt_out != PAD).sum(dim=1)  # (B,) the answer and EOS
    outputs = greedy_search(model, batch.src, lengths + 2)
    answers = [row[:n - 1].tolist() for row, n in zip(batch.tgt_out, lengths.tolist())]
    return sum(out == ans for out, ans in zip(outputs, answers)) / len(answers)


@dataclass
class ToyRun:
    """What `train_toy` returns: the model and, at each check, (step, seconds, loss,
    alignment accuracy on held-out strings)."""

    task: str
    model: nn.Module
    checks: list[tuple[int, float, float, float]] = field(default_factory=list)

    @property
    def accuracy(self) -> float:
        return self.checks[-1][3] if self.checks else 0.0


def toy_model(d_model: int = 64, heads: int = 2, layers: int = 1, symbols: int = 16,
              **options) -> nn.Module:
    """The textbook Transformer, small: `layers` a side, no dropout (a toy cannot overfit);
    `options` are TransformerConfig fields (e.g. positions="rope")."""
    cfg = TransformerConfig(d_model=d_model, heads=heads, ffn_dim=4 * d_model,
                            encoder_layers=layers, decoder_layers=layers, dropout=0.0, **options)
    vocab = FIRST_SYMBOL + symbols
    return build_model(cfg, vocab, vocab, shared_vocab=True)


def train_toy(task: str = "reverse", steps: int = 600, seconds: Optional[float] = None,
              model: Optional[nn.Module] = None, batch_size: int = 64, lr: float = 3e-3,
              seed: int = 0, check_every: int = 50, until: Optional[float] = None,
              progress: bool = False) -> ToyRun:
    """Train `model` (default `toy_model()`) on `task` for `steps` steps, or until `seconds`
    have passed, or (`until`) until a check finds that share of answer positions aligned;
    with AdamW and a short warm-up. Every `check_every` steps the alignment is checked on 256
    held-out strings."""
    from tqdm.auto import tqdm

    answer(task, [])  # the task's name checked before anything is built
    if steps < 1 or batch_size < 1 or check_every < 1:
        raise ValueError(f"steps, batch_size and check_every must be >= 1, got {steps}, "
                         f"{batch_size} and {check_every}")
    torch.manual_seed(seed)
    model = model if model is not None else toy_model()
    data, held = torch.Generator().manual_seed(seed), torch.Generator().manual_seed(10_000 + seed)
    held_out = toy_batch(task, 256, held)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.98), weight_decay=0.0)
    run, start = ToyRun(task, model), time.perf_counter()
    bar = tqdm(range(1, steps + 1), desc=f"toy {task}", disable=not progress)
    for step in bar:
        batch = toy_batch(task, batch_size, data)
        warmup = min(1.0, step / 50)  # 50 steps up to the peak, then constant
        loss = plain_step(model, batch, [optimizer], [lr * warmup], 0.0, 1.0)
        elapsed = time.perf_counter() - start
        done = step == steps or (seconds is not None and elapsed >= seconds)
        if step % check_every == 0 or done:
            accuracy = alignment_accuracy(model, task, held_out)
            run.checks.append((step, elapsed, loss, accuracy))
            bar.set_postfix(loss=f"{loss:.3f}", aligned=f"{accuracy:.0%}")
            done = done or (until is not None and accuracy >= until)
        if done:
            break
    model.eval()
    return run
