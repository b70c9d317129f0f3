"""The recipe's model section: one config per architecture (`model.arch`), each field's range in
its metadata (read by translate.config.checks, as for the other sections in schema.py), and
each config's parameter count from the config alone.

    TransformerConfig   the pre-norm Transformer (translate.models.transformer)
    RNNConfig           the attention RNN encoder-decoder (translate.models.rnn)

The models import their config from here; the recipe imports no model.

Tests: tests/test_config.py, tests/models/test_transformer.py (parameter counts).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from translate.config.names import ACTIVATIONS, GATED, NORMS, QUERY_NORMS


@dataclass(frozen=True)
class TransformerConfig:
    arch: str = "transformer"
    d_model: int = field(default=256, metadata={"min": 1, "max": 65_536})
    heads: int = field(default=4, metadata={"min": 1, "max": 1024})
    ffn_dim: int = field(default=1024, metadata={"min": 1, "max": 1 << 20})
    encoder_layers: int = field(default=3, metadata={"min": 1, "max": 1000})
    decoder_layers: int = field(default=3, metadata={"min": 1, "max": 1000})
    # on embeddings and every sublayer's output
    dropout: float = field(default=0.1, metadata={"below": 1})
    attn_dropout: float = field(default=0.0, metadata={"below": 1})  # on attention weights
    # on the FFN hidden layer
    activation_dropout: float = field(default=0.0, metadata={"below": 1})
    # the FFN's; swiglu is gated, with a hidden width of about 2/3 ffn_dim (`ffn_hidden`)
    activation: str = field(default="relu", metadata={"choices": ACTIVATIONS})
    # every block's norms and the final ones
    norm: str = field(default="layernorm", metadata={"choices": NORMS})
    # added to the embeddings (sinusoidal, learned), or rope: self-attention's Q, K rotated
    positions: str = field(default="sinusoidal", metadata={
        "choices": ("sinusoidal", "learned", "rope"),
        "why_not": {"rotary": "rotary position embeddings are rope"}})
    max_positions: int = field(default=1024, metadata={"min": 1, "max": 1 << 20})
    qkv_bias: bool = True
    qk_norm: bool = False  # RMSNorm of each head's queries and keys before the scores
    # with qk_norm: cross-attention's queries normalised per head, or over the width D
    cross_query_norm: str = field(default="head", metadata={"choices": QUERY_NORMS})
    tie_embeddings: bool = True  # source, target and output share weights (joint vocab only)

    def parameter_count(self, src_vocab: int, tgt_vocab: int, shared_vocab: bool = False) -> int:
        """The parameters `Transformer(self, src_vocab, tgt_vocab, shared_vocab)` has, each
        tied tensor once, counted from the config alone (nothing is built)."""
        D, Dff, P = self.d_model, self.ffn_hidden(), self.max_positions
        attention = 4 * D * D + D + (3 * D if self.qkv_bias else 0)  # Q, K, V, out
        attention += 2 * (D // self.heads) if self.qk_norm else 0  # Q's and K's norm scales
        wide = self.qk_norm and self.cross_query_norm == "width"
        cross = attention + (D - D // self.heads if wide else 0)  # a D-wide Q norm scale
        inputs = 2 if self.activation in GATED else 1  # projections of the input: W1 (, W3)
        ffn = inputs * (D * Dff + Dff) + Dff * D + D
        norm = 2 * D if self.norm == "layernorm" else D  # a weight and a bias, or a weight
        encoder = self.encoder_layers * (attention + ffn + 2 * norm)
        decoder = self.decoder_layers * (attention + cross + ffn + 3 * norm)
        src = 0 if self.tie_embeddings and shared_vocab else src_vocab * D
        positions = 2 * P * D if self.positions == "learned" else 0  # one table per side
        output = 0 if self.tie_embeddings else D * tgt_vocab
        return tgt_vocab * D + src + positions + encoder + decoder + 2 * norm + output

    def ffn_hidden(self) -> int:
        """The feed-forward network's hidden width: ffn_dim, or for a gated network, whose
        three matrices would hold 1.5 times the plain two's parameters at that width, about
        2/3 of it, to a multiple of 8."""
        if self.activation not in GATED:
            return self.ffn_dim
        return max(8, 8 * round(self.ffn_dim * 2 / 3 / 8))


@dataclass(frozen=True)
class RNNConfig:
    arch: str = "rnn"
    # in the encoder and the decoder
    cell: str = field(default="gru", metadata={"choices": ("gru", "lstm")})
    # E; also the maxout output's width, so the output layer can be tied
    embed_dim: int = field(default=256, metadata={"min": 1, "max": 65_536})
    # per direction: annotations are 2x this wide
    encoder_hidden: int = field(default=256, metadata={"min": 1, "max": 65_536})
    encoder_layers: int = field(default=1, metadata={"min": 1, "max": 1000})
    decoder_hidden: int = field(default=512, metadata={"min": 1, "max": 65_536})
    # width of the additive scorer's hidden layer
    attn_dim: int = field(default=512, metadata={"min": 1, "max": 65_536})
    # on embeddings, annotations and the output layers
    dropout: float = field(default=0.3, metadata={"below": 1})
    # longest source or output decoded (no position table)
    max_positions: int = field(default=1024, metadata={"min": 1, "max": 1 << 20})
    tie_embeddings: bool = True  # target embedding = output projection (+ source when joint)

    def parameter_count(self, src_vocab: int, tgt_vocab: int, shared_vocab: bool = False) -> int:
        """The parameters `RNNSeq2Seq(self, src_vocab, tgt_vocab, shared_vocab)` has, each tied
        tensor once, counted from the config alone (nothing is built)."""
        E, He, Hd, A = self.embed_dim, self.encoder_hidden, self.decoder_hidden, self.attn_dim
        gates = 3 if self.cell == "gru" else 4
        # per layer and direction: input and hidden weights, two biases; layer 2 on reads 2He
        encoder = sum(2 * gates * He * ((E if layer == 0 else 2 * He) + He + 2)
                      for layer in range(self.encoder_layers))
        init = He * Hd + Hd
        attention = Hd * A + 2 * He * A + A + A  # W, U and its bias, v
        cell = gates * Hd * (E + 2 * He + Hd + 2)
        deep_output = (Hd + E + 2 * He) * 2 * E + 2 * E
        src = 0 if self.tie_embeddings and shared_vocab else src_vocab * E
        output = 0 if self.tie_embeddings else E * tgt_vocab
        return tgt_vocab * E + src + encoder + init + attention + cell + deep_output + output


# model.arch -> its config (translate.models.MODELS gives each its model class).
MODEL_CONFIGS = {"transformer": TransformerConfig, "rnn": RNNConfig}
