"""CTranslate2 export: our Transformer as a CTranslate2 TransformerSpec, and `decode`, which runs
it as `translate decode` runs ours.

The conversion is exact (to float rounding): pre-norm layers with final LayerNorms or RMSNorms
and our epsilon, sqrt(D)-scaled embeddings, our position table (sinusoidal or learned) written
into CTranslate2's position encodings or, for rope, CTranslate2's rotary self-attention (channel
pairs interleaved, base 10000; cross-attention unrotated, as ours), Q/K/V fused as CTranslate2
wants them (one (3D, D) matrix for self-attention; Q, and K/V fused, for cross-attention), ReLU,
GELU or the gated SwiGLU feed-forward network, joint or separate vocabularies, tied or untied
embeddings, QK-norm (CTranslate2 has no ReLU²: such a model is refused; and its QK-norm
normalises cross-attention's queries over the whole width, so a model with QK-norm converts when
it was trained so, `model.cross_query_norm: width`, and is refused otherwise). CTranslate2 appends the source
EOS itself (`add_source_eos`): a user passes SentencePiece pieces, nothing else.

Where CTranslate2's search is not ours, and what `decode` asks of `translate_batch` for it:
  - Length limit: ours is per sentence, a * |src| + b tokens (|src| with EOS; 1.5 and 10 by
    default, capped at the positions); `max_decoding_length` is per call. So sentences are
    grouped by their limit, one call per group: the limit for greedy search, the limit + 1 for
    beam search, whose step past the limit ends every beam.
  - Length penalty: ours is GNMT's, logprob / ((5 + len) / 6) ** alpha (len with EOS); CT2's
    is logprob / len ** alpha, and at alpha = 0 it stops a sentence once its best beam ends.
    Ours stops once no live hypothesis could win (`decode.early_exit`: at the next step; off:
    at any length), which CT2 cannot ask for; it can search on to `beam` finished hypotheses,
    whose best is what ours finds with early exit off. `decode` runs CT2 at alpha = TINY, which
    keeps CT2's search ours (2 * beam candidates a step, those ending among the best `beam`
    finished, the rest going on, `beam` finished hypotheses per sentence) and its scores
    log-probabilities; it asks for all `beam` hypotheses, with their EOS, and picks by GNMT.
    (A step may finish more than ours keeps; CT2 then keeps the `beam` most probable, and
    what it drops is never GNMT's best: no longer and less probable than its last step's
    best, which it keeps.)
  - Empty translations: CT2 forbids EOS at the first step unless `min_decoding_length=0`.
  - PAD and BOS: our search masks them after the softmax; CT2's `suppress_sequences` would
    mask them before it, renormalising the rest, which shifts a beam's scores by
    log(1 - p(PAD) - p(BOS)) a step (up to 2e-3 for the tests' tiny model, enough to flip a
    near-tie in 1 of the sample's 100 sentences). So beam search leaves them unsuppressed (a
    trained model hardly ranks them among its best candidates; where one did, CT2 could keep
    it), and greedy search, where suppressing changes no score, suppresses them.

What still differs: at the step past the limit ours allows only EOS, scored; CT2 cannot force
it, and keeps its best tokens as they are. A sentence whose search reaches the limit may end
differently (2 of 100 sentences on the tests' sample with beam 5, none greedy).

Tests: tests/export/test_ctranslate2.py.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Sequence

import torch
from torch import nn

from translate.config import DecodeConfig
from translate.config.names import GATED
from translate.data.batch import pad
from translate.export.peer import ExportError, transformer_only
from translate.search import output_limits
from translate.tokenizer import Tokenizer
from translate.tokens import BOS, EOS, PAD

# CT2's length penalty in `decode`'s beam search: not 0, so that a sentence ends with `beam`
# finished hypotheses as ours does, and too small to reorder them.
TINY = 1e-9
QUANTIZATIONS = ("int8", "int8_float32", "int8_float16", "int8_bfloat16", "int16", "float16",
                 "bfloat16", "float32")


def vocabulary(sp) -> list[str]:
    """A SentencePiece model's pieces by id: CTranslate2 speaks in piece strings."""
    return [sp.id_to_piece(i) for i in range(sp.get_piece_size())]


@torch.no_grad()
def to_ctranslate2(model: nn.Module, src_vocab: list[str], tgt_vocab: list[str], out_dir: Path,
                   quantization: str | None = None) -> Path:
    """Save `model` with its source and target pieces as a CTranslate2 model folder.

    Args:
        src_vocab, tgt_vocab: the pieces of each id (the same list for a joint vocabulary).
        quantization: one of QUANTIZATIONS for the saved weights; None keeps float32.
    """
    model = transformer_only(model, "ctranslate2")
    spec = _transformer_spec(model)
    _copy_weights(spec, model)
    spec.register_source_vocabulary(src_vocab)
    spec.register_target_vocabulary(tgt_vocab)
    spec.validate()
    spec.optimize(quantization=quantization or "float32")
    out_dir.mkdir(parents=True, exist_ok=True)
    spec.save(str(out_dir))
    return out_dir


def _transformer_spec(model: nn.Module):
    """An empty CTranslate2 TransformerSpec of `model`'s shape: pre-norm layers, our
    activation (gated or not), norm and its epsilon, the source EOS appended by CTranslate2."""
    from ctranslate2.specs import common_spec, transformer_spec

    act = {"relu": common_spec.Activation.RELU, "gelu": common_spec.Activation.GELU,
           "swiglu": common_spec.Activation.SWISH}  # SWISH is SiLU, x * sigmoid(x)
    cfg = model.cfg
    if cfg.activation not in act:
        raise ExportError(f"--format ctranslate2 cannot hold model.activation: "
                          f"{cfg.activation} (CTranslate2 has no such activation); export this "
                          f"model with --format inference")
    if cfg.qk_norm and cfg.cross_query_norm != "width":
        raise ExportError("--format ctranslate2 cannot hold model.qk_norm: true with "
                          "model.cross_query_norm: head (CTranslate2 normalises cross-attention's "
                          "queries over the whole width): train with --set "
                          "model.cross_query_norm=width, or export with --format inference")
    rope = cfg.positions == "rope"
    shape = dict(pre_norm=True, activation=act[cfg.activation], ffn_glu=cfg.activation in GATED,
                 rms_norm=cfg.norm == "rmsnorm",
                 # rope: self-attention turns channel pairs (2i, 2i+1), CT2's interleaved layout
                 rotary_dim=cfg.d_model // cfg.heads if rope else None, rotary_interleave=True,
                 **({"qk_norm": True} if cfg.qk_norm else {}))
    try:
        spec = transformer_spec.TransformerSpec(
            transformer_spec.TransformerEncoderSpec(cfg.encoder_layers, cfg.heads, **shape),
            transformer_spec.TransformerDecoderSpec(cfg.decoder_layers, cfg.heads, **shape))
    except TypeError as e:  # a CTranslate2 before rotary encoders
        raise ExportError(f"this ctranslate2 cannot hold model.positions: {cfg.positions} "
                          f"({e}); pip install -U ctranslate2") from e
    spec.config.layer_norm_epsilon = model.encoder_norm.eps  # CT2's default differs
    spec.config.add_source_eos = True  # our encoder reads pieces + EOS
    return spec


def _copy_weights(spec, model: nn.Module) -> None:
    """Every weight of `model` into `spec`: embeddings and position tables, each layer's
    attention and feed-forward blocks with their LayerNorms, the final norms, the output."""
    enc, dec = spec.encoder, spec.decoder
    enc.embeddings[0].weight = _array(model.src_embed.tokens.weight)
    dec.embeddings.weight = _array(model.tgt_embed.tokens.weight)
    if model.cfg.positions != "rope":  # rope adds nothing: its attention rotates q and k
        enc.position_encodings.encodings = _array(model.src_embed.position_table())
        dec.position_encodings.encodings = _array(model.tgt_embed.position_table())
    enc.scale_embeddings = dec.scale_embeddings = True  # by sqrt(D)
    for s, layer in zip(enc.layer, model.encoder_layers):
        _attention(s.self_attention, layer.self_attn, layer.norm1, cross=False)
        _feed_forward(s.ffn, layer.ffn, layer.norm2)
    for s, layer in zip(dec.layer, model.decoder_layers):
        _attention(s.self_attention, layer.self_attn, layer.norm1, cross=False)
        _attention(s.attention, layer.cross_attn, layer.norm2, cross=True)
        _feed_forward(s.ffn, layer.ffn, layer.norm3)
    _norm(enc.layer_norm, model.encoder_norm)
    _norm(dec.layer_norm, model.decoder_norm)
    _linear(dec.projection, model.output.weight)


def _array(t: torch.Tensor):
    return t.detach().float().contiguous().numpy()


def _linear(s, weight: torch.Tensor, bias: torch.Tensor | None = None) -> None:
    s.weight = _array(weight)
    if bias is not None:
        s.bias = _array(bias)


def _norm(s, norm: nn.Module) -> None:
    """A LayerNorm's scale and shift, or an RMSNorm's scale."""
    s.gamma = _array(norm.weight)
    if getattr(norm, "bias", None) is not None:
        s.beta = _array(norm.bias)


def _attention(s, module: nn.Module, ln: nn.Module, cross: bool) -> None:
    """An attention block: Q, K and V fused into one (3D, D) matrix for self-attention; Q, and
    K and V fused, for cross-attention."""
    parts = [module.q_proj, module.k_proj, module.v_proj]
    w = torch.cat([p.weight for p in parts])  # (3D, D), Q first
    D = w.size(1)
    b = torch.cat([p.bias for p in parts]) if parts[0].bias is not None else torch.zeros(3 * D)
    if cross:  # Q from the target; K and V, fused, from the memory
        _linear(s.linear[0], w[:D], b[:D])
        _linear(s.linear[1], w[D:], b[D:])
    else:
        _linear(s.linear[0], w, b)
    _linear(s.linear[-1], module.out_proj.weight, module.out_proj.bias)
    _norm(s.layer_norm, ln)
    if module.q_norm is not None:  # per head; in cross-attention the query's over the width
        _norm(s.q_norm, module.q_norm)
        _norm(s.k_norm, module.k_norm)


def _feed_forward(s, module: nn.Module, ln: nn.Module) -> None:
    """The feed-forward block; gated, CT2's linear_0 is activated and scales linear_0_noact."""
    _linear(s.linear_0, module.fc1.weight, module.fc1.bias)
    if module.fc3 is not None:
        _linear(s.linear_0_noact, module.fc3.weight, module.fc3.bias)
    _linear(s.linear_1, module.fc2.weight, module.fc2.bias)
    _norm(s.layer_norm, ln)


def decode(translator, tokenizer: Tokenizer, sentences: Sequence[str], cfg: DecodeConfig,
           max_positions: int) -> list[str]:
    """Translate with a `ctranslate2.Translator` of an export as `translate decode
    --no-early-exit` would: beam `cfg.beam`, length penalty `cfg.lenpen`, limits from `cfg` (see
    the module docstring; `cfg.early_exit` is not CT2's to follow).

    Args:
        max_positions: the model's positions (`model.max_positions`), which cap the limits.
    """
    encoded = tokenizer.encode_src(sentences)  # pieces + EOS: what our limits count
    limits = output_limits(pad([torch.tensor(ids) for ids in encoded]), cfg.max_len_a,
                           cfg.max_len_b, max_positions - 1).tolist() if encoded else []
    groups: dict[int, list[int]] = defaultdict(list)
    for i, (text, limit) in enumerate(zip(sentences, limits)):
        if text.strip():
            groups[limit].append(i)
    src_vocab = vocabulary(tokenizer.src)
    tgt_ids = {piece: i for i, piece in enumerate(vocabulary(tokenizer.tgt))}
    beam = cfg.beam > 1
    options = {"beam_size": cfg.beam, "min_decoding_length": 0, "num_hypotheses": cfg.beam}
    if beam:
        options.update(length_penalty=TINY, return_scores=True, return_end_token=True)
    else:
        options["suppress_sequences"] = [[tokenizer.tgt.id_to_piece(i)] for i in (PAD, BOS)]
    out = [""] * len(sentences)
    for limit, idx in groups.items():
        found = translator.translate_batch(
            [[src_vocab[t] for t in encoded[i][:-1]] for i in idx],  # CT2 appends the EOS
            max_decoding_length=limit + beam, **options)
        for i, result in zip(idx, found):
            best = _gnmt_best(result, cfg.lenpen) if beam else result.hypotheses[0]
            ids = [tgt_ids[p] for p in best]
            out[i] = tokenizer.decode_tgt([ids[: ids.index(EOS)] if EOS in ids else ids])[0]
    return out


def _gnmt_best(result, alpha: float) -> list[str]:
    """The hypothesis ours would pick: CTranslate2's scores are logprob / len ** TINY (len with
    the EOS, returned here); ours divide the log-probability by ((5 + len) / 6) ** alpha."""
    def gnmt(hypothesis: list[str], score: float) -> float:
        length = len(hypothesis)
        return score * length ** TINY / ((5 + length) / 6) ** alpha

    scored = [gnmt(h, s) for h, s in zip(result.hypotheses, result.scores)]
    return result.hypotheses[max(range(len(scored)), key=scored.__getitem__)]

