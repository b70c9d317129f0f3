"""The contract between a model and everything that uses it: training, search, evaluation.

Every model offers the same four calls, so the Transformer and the attention RNN are
interchangeable and nothing outside `translate.models` ever asks which one it holds:

    memory = model.encode(src)                    (B, S) source ids -> a row per sentence
    state = model.init_state(memory)              the decoder before its first token
    logits, state = model.decode(tgt_in, state)   (B, T) next tokens -> (B, T, V) logits
    logits = model(src, tgt_in)                   teacher forcing: encode, then decode at once
    states = model.features(src, tgt_in)          the same up to the output layer: (B, T, D)
                                                  states, and model.output(states) = logits

Feeding `decode` the whole prefix at once or one token per call gives the same logits: the state
carries what the decoder keeps between steps (caches, a recurrent state) and what it reads of the
memory. Beam search moves hypotheses between rows with `state.reorder_beams(rows)` and drops
finished sentences with `state.select(rows)`.

Tests: tests/models/test_transformer.py, tests/models/test_rnn.py.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import torch


class DecoderState(Protocol):
    """What a decoder keeps between steps, a row per hypothesis (or per sentence, for parts the
    beams of one sentence share)."""

    def reorder_beams(self, rows: torch.Tensor) -> "DecoderState":
        """The state whose row i continues the hypothesis in row `rows[i]`; rows stay within
        their sentence (the first step fans each sentence's row out to its beams)."""
        ...

    def select(self, rows: torch.Tensor) -> "DecoderState":
        """The state of the hypotheses in `rows` alone, once some sentences are done. A sentence
        leaves whole: `rows` holds all of each kept sentence's rows in one run, so a state with
        a row per sentence for some parts (the fast engine's shared memory) finds those
        sentences from the rows."""
        ...


@runtime_checkable
class Seq2Seq(Protocol):
    """An encoder-decoder translation model."""

    def encode(self, src: torch.Tensor) -> Any:
        """(B, S) source ids -> the memory the decoder reads, a row per sentence."""
        ...

    def init_state(self, memory: Any) -> DecoderState:
        """The decoder's state before the first target token."""
        ...

    def decode(self, tgt_in: torch.Tensor, state: DecoderState
               ) -> tuple[torch.Tensor, DecoderState]:
        """(B, T) next target tokens -> (B, T, V) logits and the state after them."""
        ...

    def __call__(self, src: torch.Tensor, tgt_in: torch.Tensor) -> torch.Tensor:
        """Teacher forcing: (B, S) source, (B, T) target prefix -> (B, T, V) logits."""
        ...

    def features(self, src: torch.Tensor, tgt_in: torch.Tensor) -> torch.Tensor:
        """Teacher forcing up to the output layer: `self.output(features)` are the logits."""
        ...
