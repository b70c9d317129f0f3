"""Hugging Face export: our Transformer as a `transformers` PegasusForConditionalGeneration.

Pegasus is, like ours, a pre-norm encoder-decoder with final LayerNorms, sqrt(D)-scaled
embeddings, biased Q/K/V projections and one embedding shared by the encoder, the decoder and
the output; its position table is an ordinary weight, read from position 0, so ours (sinusoidal
or learned) is written into it as it is and the logits are ours to float rounding.

Why not M2M100, the other pre-norm model there: its sinusoidal table is a non-persistent
buffer that `from_pretrained` recomputes (other frequencies, sin and cos halves rather than
interleaved, positions offset by 2), so a saved M2M100 would not compute our model.
"""

from __future__ import annotations

import torch
from torch import nn

from translate.export import ExportError, transformer_only
from translate.models.transformer import Transformer
from translate.tokens import BOS, EOS, PAD


def check_tied(model: Transformer) -> None:
    """Pegasus has one embedding for the encoder, the decoder and the output."""
    if model.src_embed.tokens is not model.tgt_embed.tokens or not model.cfg.tie_embeddings:
        raise ExportError("--format hf holds one vocabulary with tied embeddings; this model "
                          "has separate vocabularies or untied embeddings (tokenizer.joint or "
                          "model.tie_embeddings false): export it with --format ctranslate2 "
                          "or inference")


@torch.no_grad()
def to_pegasus(model: nn.Module) -> nn.Module:
    """An HF PegasusForConditionalGeneration that computes what `model` computes."""
    from transformers import PegasusConfig, PegasusForConditionalGeneration

    model = transformer_only(model, "hf")
    check_tied(model)
    c = model.cfg
    hf = PegasusForConditionalGeneration(PegasusConfig(
        vocab_size=model.output.out_features, d_model=c.d_model, encoder_layers=c.encoder_layers,
        decoder_layers=c.decoder_layers, encoder_attention_heads=c.heads,
        decoder_attention_heads=c.heads, encoder_ffn_dim=c.ffn_dim, decoder_ffn_dim=c.ffn_dim,
        activation_function=c.activation, dropout=0.0, attention_dropout=0.0,
        activation_dropout=0.0, encoder_layerdrop=0.0, decoder_layerdrop=0.0,
        max_position_embeddings=c.max_positions, scale_embedding=True, pad_token_id=PAD,
        bos_token_id=BOS, eos_token_id=EOS, decoder_start_token_id=BOS,
        forced_eos_token_id=None, tie_word_embeddings=True)).eval()
    hf.generation_config.suppress_tokens = [PAD, BOS]  # as our search: never output
    state = {"model.shared.weight": model.tgt_embed.tokens.weight,
             "model.encoder.embed_positions.weight": model.src_embed.position_table(),
             "model.decoder.embed_positions.weight": model.tgt_embed.position_table()}

    def put(prefix: str, **modules: nn.Module) -> None:
        for name, m in modules.items():
            state[f"{prefix}.{name}.weight"] = m.weight
            bias = m.bias if m.bias is not None else torch.zeros(m.weight.size(0))
            state[f"{prefix}.{name}.bias"] = bias  # Pegasus's Q/K/V always have a bias

    def put_attn(prefix: str, attn: nn.Module) -> None:
        put(prefix, q_proj=attn.q_proj, k_proj=attn.k_proj, v_proj=attn.v_proj,
            out_proj=attn.out_proj)

    for i, layer in enumerate(model.encoder_layers):
        p = f"model.encoder.layers.{i}"
        put_attn(f"{p}.self_attn", layer.self_attn)
        put(p, self_attn_layer_norm=layer.norm1, final_layer_norm=layer.norm2,
            fc1=layer.ffn.fc1, fc2=layer.ffn.fc2)
    for i, layer in enumerate(model.decoder_layers):
        p = f"model.decoder.layers.{i}"
        put_attn(f"{p}.self_attn", layer.self_attn)
        put_attn(f"{p}.encoder_attn", layer.cross_attn)
        put(p, self_attn_layer_norm=layer.norm1, encoder_attn_layer_norm=layer.norm2,
            final_layer_norm=layer.norm3, fc1=layer.ffn.fc1, fc2=layer.ffn.fc2)
    put("model.encoder", layer_norm=model.encoder_norm)
    put("model.decoder", layer_norm=model.decoder_norm)
    missing, unexpected = hf.load_state_dict(state, strict=False)
    ours_elsewhere = {"lm_head.weight", "model.encoder.embed_tokens.weight",
                      "model.decoder.embed_tokens.weight",  # all three are model.shared
                      "final_logits_bias"}  # zeros: we have no output bias
    if set(missing) - ours_elsewhere or unexpected:
        raise RuntimeError(f"Pegasus conversion: missing {missing}, unexpected {unexpected}")
    return hf
