"""RNNsearch: the attention RNN encoder-decoder of Bahdanau, Cho & Bengio (2014).

    encoder    a bidirectional GRU (or LSTM) reads the source; annotation h_j = [fwd_j; bwd_j]
    attention  e_ij = v^T tanh(W s_{i-1} + U h_j), a_ij = softmax_j(e_ij), c_i = sum_j a_ij h_j
    decoder    s_i = GRU([E y_{i-1}; c_i], s_{i-1}), with s_0 = tanh(W_init bwd_1)
    output     t_i = maxout(L [s_i; E y_{i-1}; c_i]), p(y_i) = softmax(E^T t_i) (tied when E allows)

It offers the same interface as the Transformer (`Seq2Seq`: `encode`, `init_state`, `decode`), so
training, checkpoints, search and evaluation treat both alike.

Shapes: B batch, S source length, T target length, E embedding width, He encoder width per
direction, Hd decoder width, A attention width, V vocabulary.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable, Optional

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from translate.config.models import RNNConfig
from translate.tokens import PAD

ADDITIVE = "additive attention"


class AdditiveAttention(nn.Module):
    """Bahdanau attention: e_j = v^T tanh(W q + U k_j), weights softmax(e) over real positions.

    U k_j does not depend on the query, so `project_keys` computes it once per sentence and every
    decoder step reuses it. The weights (the alignment) go to `record_weights` while
    translate.analysis.attention records, as MultiHeadAttention's do.

    Args:
        query_dim: width of the query (the decoder state s_{i-1}).
        key_dim: width of the keys (the encoder annotations h_j).
        attn_dim: width A of the hidden scoring layer.
    """

    role, layer = ADDITIVE, 0
    record_weights: Optional[Callable[[torch.Tensor], None]] = None  # each step's (B, S) weights

    def __init__(self, query_dim: int, key_dim: int, attn_dim: int):
        super().__init__()
        self.query_proj = nn.Linear(query_dim, attn_dim, bias=False)  # W
        self.key_proj = nn.Linear(key_dim, attn_dim)  # U (its bias is the scorer's bias)
        self.score = nn.Linear(attn_dim, 1, bias=False)  # v

    def project_keys(self, keys: torch.Tensor) -> torch.Tensor:
        """(B, S, key_dim) annotations -> (B, S, A) U h_j."""
        return self.key_proj(keys)

    def forward(self, query: torch.Tensor, projected_keys: torch.Tensor, values: torch.Tensor,
                mask: torch.Tensor) -> torch.Tensor:
        """One decoder step: the context c_i.

        Args:
            query: (B, query_dim) the decoder state s_{i-1}.
            projected_keys: (B, S, A) from `project_keys`.
            values: (B, S, Dv) what the context averages (the annotations themselves).
            mask: (B, S) boolean, True on real source positions.

        Returns:
            (B, Dv) context vector: the values averaged by the weights (zero on padding,
            summing to one).
        """
        hidden = torch.tanh(projected_keys + self.query_proj(query)[:, None])  # (B, S, A)
        energies = self.score(hidden).squeeze(-1)  # (B, S)
        energies = energies.masked_fill(~mask, float("-inf"))
        weights = torch.softmax(energies.float(), dim=-1).to(values.dtype)  # (B, S)
        if self.record_weights is not None:
            self.record_weights(weights)
        return torch.bmm(weights[:, None], values).squeeze(1)  # (B, Dv)


@dataclass
class RNNMemory:
    """What the encoder hands the decoder."""

    states: torch.Tensor  # (B, S, 2He) annotations h_j: the values attention averages
    keys: torch.Tensor  # (B, S, A) U h_j, projected once per sentence
    src_mask: torch.Tensor  # (B, S) True on real source tokens
    init: torch.Tensor  # (B, Hd) the decoder's first state s_0

    def index_select(self, index: torch.Tensor) -> "RNNMemory":
        return RNNMemory(*(t.index_select(0, index) for t in
                           (self.states, self.keys, self.src_mask, self.init)))


@dataclass
class RNNState:
    """The decoder after the tokens fed so far: its recurrent state and the memory it reads."""

    hidden: torch.Tensor  # (B, Hd) s_i
    memory: RNNMemory  # a row per hypothesis
    cell: Optional[torch.Tensor] = None  # (B, Hd) LSTM memory cell; None for a GRU

    def reorder_beams(self, rows: torch.Tensor) -> "RNNState":
        """Row i continues the hypothesis in row `rows[i]`."""
        cell = None if self.cell is None else self.cell.index_select(0, rows)
        return RNNState(self.hidden.index_select(0, rows), self.memory.index_select(rows), cell)

    def select(self, rows: torch.Tensor) -> "RNNState":
        """Keep the hypotheses in `rows` alone: search drops the sentences that are done (every
        part of this state is a row per hypothesis)."""
        return self.reorder_beams(rows)


class RNNSeq2Seq(nn.Module):
    """Bidirectional-RNN encoder, attention RNN decoder with a maxout deep output.

    Args:
        cfg: architecture hyperparameters.
        src_vocab, tgt_vocab: vocabulary sizes.
        shared_vocab: one vocabulary for both sides, so the source embedding can be tied too.
    """

    def __init__(self, cfg: RNNConfig, src_vocab: int, tgt_vocab: int, shared_vocab: bool = False):
        super().__init__()
        if cfg.cell not in ("gru", "lstm"):
            raise ValueError(f"model.cell must be 'gru' or 'lstm', got '{cfg.cell}'")
        self.cfg = cfg
        E, He, Hd = cfg.embed_dim, cfg.encoder_hidden, cfg.decoder_hidden
        self.tgt_embed = nn.Embedding(tgt_vocab, E, padding_idx=PAD)
        share_src = cfg.tie_embeddings and shared_vocab
        self.src_embed = self.tgt_embed if share_src else nn.Embedding(src_vocab, E, padding_idx=PAD)
        rnn = nn.GRU if cfg.cell == "gru" else nn.LSTM
        self.encoder = rnn(E, He, num_layers=cfg.encoder_layers, batch_first=True,
                           bidirectional=True, dropout=cfg.dropout if cfg.encoder_layers > 1 else 0.0)
        self.init_proj = nn.Linear(He, Hd)
        self.attention = AdditiveAttention(Hd, 2 * He, cfg.attn_dim)
        self.cell = (nn.GRUCell if cfg.cell == "gru" else nn.LSTMCell)(E + 2 * He, Hd)
        self.deep_output = nn.Linear(Hd + E + 2 * He, 2 * E)  # two maxout pieces per unit
        self.output = nn.Linear(E, tgt_vocab, bias=False)
        self.dropout = nn.Dropout(cfg.dropout)
        for emb in {self.src_embed, self.tgt_embed}:
            nn.init.normal_(emb.weight, std=E ** -0.5)
            nn.init.zeros_(emb.weight[PAD])
        if cfg.tie_embeddings:
            self.output.weight = self.tgt_embed.weight

    def encode(self, src: torch.Tensor) -> RNNMemory:
        """(B, S) source ids -> RNNMemory with (B, S, 2He) annotations."""
        B, S = src.shape
        src_mask = src != PAD  # (B, S)
        lengths = src_mask.sum(dim=1).clamp(min=1).cpu()
        x = self.dropout(self.src_embed(src))  # (B, S, E)
        packed = pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
        states, _ = pad_packed_sequence(self.encoder(packed)[0], batch_first=True, total_length=S)
        states = self.dropout(states)  # (B, S, 2He)
        backward_first = states[:, 0, self.cfg.encoder_hidden:]  # (B, He): bwd_1 read everything
        init = torch.tanh(self.init_proj(backward_first))  # (B, Hd)
        return RNNMemory(states, self.attention.project_keys(states), src_mask, init)

    def init_state(self, memory: RNNMemory) -> RNNState:
        """s_0, a row per sentence."""
        cell = torch.zeros_like(memory.init) if self.cfg.cell == "lstm" else None
        return RNNState(memory.init, memory, cell)  # (B, Hd)

    def decode(self, tgt_in: torch.Tensor, state: RNNState) -> tuple[torch.Tensor, RNNState]:
        """(B, T) the next target tokens -> (B, T, V) logits and the state after them.

        Feeding the whole prefix at once or one token per call gives the same logits.
        """
        outputs, state = self.decoder_states(tgt_in, state)
        return self.output(outputs), state  # (B, T, V)

    def decoder_states(self, tgt_in: torch.Tensor, state: RNNState
                       ) -> tuple[torch.Tensor, RNNState]:
        """`decode` up to the output layer: (B, T, E) the maxout outputs it projects."""
        memory, hidden, cell = state.memory, state.hidden, state.cell  # (B, Hd)
        embedded = self.dropout(self.tgt_embed(tgt_in))  # (B, T, E)
        hiddens, contexts = [], []
        for t in range(tgt_in.size(1)):
            context = self.attention(hidden, memory.keys, memory.states, memory.src_mask)
            step_in = torch.cat([embedded[:, t], context], dim=-1)  # (B, E + 2He)
            if cell is None:
                hidden = self.cell(step_in, hidden)
            else:
                hidden, cell = self.cell(step_in, (hidden, cell))
            hiddens.append(hidden)
            contexts.append(context)
        features = torch.cat([torch.stack(hiddens, 1), embedded, torch.stack(contexts, 1)], dim=-1)
        pieces = self.deep_output(self.dropout(features))  # (B, T, 2E)
        maxout = pieces.unflatten(-1, (-1, 2)).amax(dim=-1)  # (B, T, E)
        return self.dropout(maxout), replace(state, hidden=hidden, cell=cell)

    def forward(self, src: torch.Tensor, tgt_in: torch.Tensor) -> torch.Tensor:
        """Teacher forcing: (B, S) source, (B, T) target prefix -> (B, T, V) logits."""
        return self.output(self.features(src, tgt_in))

    def features(self, src: torch.Tensor, tgt_in: torch.Tensor) -> torch.Tensor:
        """Teacher forcing up to the output layer: (B, T, E) states; `self.output` of them
        gives the logits (a loss may project them a chunk at a time, translate.gpu.loss)."""
        return self.decoder_states(tgt_in, self.init_state(self.encode(src)))[0]
