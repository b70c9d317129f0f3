"""A Transformer trained with `translate`, for transformers' Auto classes and pipeline.

`translate export --format hf` copies this file, as it is, into the exported folder as
modeling_translate.py, beside config.json (whose `auto_map` names the classes below) and
model.safetensors. It imports torch and transformers alone, never `translate`, so the folder
loads where `translate` is not installed:

    AutoModelForSeq2SeqLM.from_pretrained(folder, trust_remote_code=True)
    pipeline("translation", model=folder, trust_remote_code=True)

What it computes is translate/models/transformer.py's model, option for option:
    encoder   token embedding * sqrt(D) (+ a position table unless rope), N pre-norm blocks of
              x = x + SelfAttention(Norm(x)); x = x + FeedForward(Norm(x)); a final Norm
    decoder   the same for the target prefix, with causal self-attention and, between the two,
              y = y + CrossAttention(Norm(y), memory); a final Norm, then the output projection
    norm      LayerNorm or RMSNorm (eps 1e-5); FeedForward relu, gelu, relu2 (ReLU(x)^2) or the
              gated swiglu, W2(SiLU(W1 x) * W3 x)
    rope      self-attention turns each query and key channel pair (2i, 2i+1) by the angle
              position * 10000^(-2i/Dh); cross-attention is never rotated
    qk_norm   queries and keys RMS-normalised per head (eps 1e-6, in fp32) before the scores,
              then rotated; with cross_query_norm "width" cross-attention's queries are
              normalised over all D channels before the heads split
    tying     the source embedding may be the target's (one vocabulary), and the output
              projection the target embedding; a tied weight is one parameter, stored once

Shapes: B batch, S source length, T target length, D width, H heads, Dh = D / H, V vocabulary.

Tests: tests/export/test_hf.py, tests/export/test_hf_remote.py.
"""

import math

import torch
import torch.nn.functional as F
from torch import nn
from transformers import GenerationMixin, Pipeline, PretrainedConfig, PreTrainedModel
from transformers.cache_utils import DynamicCache, EncoderDecoderCache
from transformers.modeling_outputs import BaseModelOutput, Seq2SeqLMOutput

NORMS = {"layernorm": nn.LayerNorm, "rmsnorm": nn.RMSNorm}
ACTIVATIONS = {"relu": F.relu, "gelu": F.gelu, "relu2": lambda x: F.relu(x).square(),
               "swiglu": F.silu}
GATED = ("swiglu",)
# transformers 5 names the cache `cache`, transformers 4 `past_key_values`
CACHE = "cache" if "cache" in Seq2SeqLMOutput.__dataclass_fields__ else "past_key_values"


class TranslateConfig(PretrainedConfig):
    """The model's hyperparameters, as translate's TransformerConfig names them."""

    model_type = "translate"
    attribute_map = {"hidden_size": "d_model", "num_attention_heads": "heads",
                     "num_hidden_layers": "decoder_layers"}

    def __init__(self, vocab_size=1000, src_vocab_size=1000, d_model=256, heads=4,
                 ffn_hidden=1024, encoder_layers=3, decoder_layers=3, activation="relu",
                 norm="layernorm", norm_eps=1e-5, positions="sinusoidal", max_positions=1024,
                 qkv_bias=True, qk_norm=False, cross_query_norm="head", shared_embeddings=True,
                 tied_output=True, **kwargs):
        self.vocab_size, self.src_vocab_size = vocab_size, src_vocab_size
        self.d_model, self.heads, self.ffn_hidden = d_model, heads, ffn_hidden
        self.encoder_layers, self.decoder_layers = encoder_layers, decoder_layers
        self.activation, self.norm, self.norm_eps = activation, norm, norm_eps
        self.positions, self.max_positions = positions, max_positions
        self.qkv_bias, self.qk_norm, self.cross_query_norm = qkv_bias, qk_norm, cross_query_norm
        self.shared_embeddings, self.tied_output = shared_embeddings, tied_output
        kwargs["is_encoder_decoder"] = True
        kwargs["tie_word_embeddings"] = False  # tied weights are one parameter here (see tying)
        super().__init__(**kwargs)


def rms_norm_fp32(norm, t):
    """`norm` (an RMSNorm) of `t` computed in fp32, weights too, then in t's dtype again."""
    return F.rms_norm(t.float(), norm.normalized_shape, norm.weight.float(), norm.eps).to(t.dtype)


def rotate(t, past):
    """Queries or keys (B, H, L, Dh) at positions past .. past + L - 1, channel pair (2i, 2i+1)
    turned by position * theta_i: (x, y) -> (x cos - y sin, x sin + y cos)."""
    Dh, L = t.size(-1), t.size(2)
    theta = 10000.0 ** (-torch.arange(0, Dh, 2, device=t.device).float() / Dh)  # (Dh/2,)
    angles = torch.arange(past, past + L, device=t.device).float()[:, None] * theta  # (L, Dh/2)
    cos, sin = angles.cos().to(t.dtype), angles.sin().to(t.dtype)
    x, y = t[..., 0::2], t[..., 1::2]  # (B, H, L, Dh/2) each
    return torch.stack([x * cos - y * sin, x * sin + y * cos], dim=-1).flatten(-2)  # (B, H, L, Dh)


class Attention(nn.Module):
    """Multi-head attention in one of three roles: encoder self-attention (a padding mask),
    decoder self-attention (causal, its keys and values appended to the cache) and
    cross-attention (`context` given: the memory's keys and values, cached at the first step)."""

    def __init__(self, config, layer, rope=False, query_norm="head"):
        super().__init__()
        D, bias = config.d_model, config.qkv_bias
        self.heads, self.head_dim = config.heads, D // config.heads
        self.layer, self.rope = layer, rope
        self.q_proj, self.k_proj = nn.Linear(D, D, bias=bias), nn.Linear(D, D, bias=bias)
        self.v_proj, self.out_proj = nn.Linear(D, D, bias=bias), nn.Linear(D, D)
        self.wide_query_norm = config.qk_norm and query_norm == "width"
        q_width = D if self.wide_query_norm else self.head_dim
        self.q_norm = nn.RMSNorm(q_width, eps=1e-6) if config.qk_norm else None
        self.k_norm = nn.RMSNorm(self.head_dim, eps=1e-6) if config.qk_norm else None

    def forward(self, x, context=None, mask=None, causal=False, cache=None, past=0):
        """(B, T, D) -> (B, T, D); `past` is the position of x's first token."""
        q = self.q_proj(x)  # (B, T, D)
        if self.wide_query_norm:  # over the width, before the heads split; never rotated
            q = self.split_heads(rms_norm_fp32(self.q_norm, q))  # (B, H, T, Dh)
        else:
            q = self.norm_and_rotate(self.split_heads(q), self.q_norm, past)  # (B, H, T, Dh)
        if context is None:
            k, v = self.keys_values(x, past)  # (B, H, T, Dh) each
            if cache is not None:
                k, v = cache.self_attention_cache.update(k, v, self.layer)  # (B, H, S, Dh)
        elif cache is not None and cache.is_updated.get(self.layer):
            memory = cache.cross_attention_cache.layers[self.layer]
            k, v = memory.keys, memory.values  # (B, H, S, Dh): projected at the first step
        else:
            k, v = self.keys_values(context, 0)  # (B, H, S, Dh) each
            if cache is not None:
                k, v = cache.cross_attention_cache.update(k, v, self.layer)
                cache.is_updated[self.layer] = True
        T, S = q.size(2), k.size(2)
        if causal and T > 1:  # query t sees keys up to its own position, past + t
            positions = torch.arange(S, device=x.device)
            allowed = positions <= positions[S - T:, None]  # (T, S)
            mask = allowed if mask is None else mask & allowed
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)  # (B, H, T, Dh)
        B, H, T, Dh = out.shape
        return self.out_proj(out.transpose(1, 2).reshape(B, T, H * Dh))  # (B, T, D)

    def keys_values(self, source, past):
        k = self.norm_and_rotate(self.split_heads(self.k_proj(source)), self.k_norm, past)
        return k, self.split_heads(self.v_proj(source))  # (B, H, L, Dh) each

    def norm_and_rotate(self, t, norm, past):
        """(B, H, L, Dh) normalised per head in fp32 (qk_norm), then rotated (rope)."""
        if norm is not None:
            t = rms_norm_fp32(norm, t)
        return rotate(t, past) if self.rope else t

    def split_heads(self, t):
        B, L, _ = t.shape
        return t.view(B, L, self.heads, self.head_dim).transpose(1, 2)  # (B, H, L, Dh)


class FeedForward(nn.Module):
    def __init__(self, config):
        super().__init__()
        D, hidden = config.d_model, config.ffn_hidden
        self.activation = ACTIVATIONS[config.activation]
        self.fc1, self.fc2 = nn.Linear(D, hidden), nn.Linear(hidden, D)
        self.fc3 = nn.Linear(D, hidden) if config.activation in GATED else None

    def forward(self, x):
        hidden = self.activation(self.fc1(x))  # (B, L, hidden)
        if self.fc3 is not None:
            hidden = hidden * self.fc3(x)  # gated
        return self.fc2(hidden)  # (B, L, D)


def make_norm(config):
    return NORMS[config.norm](config.d_model, eps=config.norm_eps)


class EncoderLayer(nn.Module):
    def __init__(self, config, layer):
        super().__init__()
        self.norm1, self.norm2 = make_norm(config), make_norm(config)
        self.self_attn = Attention(config, layer, rope=config.positions == "rope")
        self.ffn = FeedForward(config)

    def forward(self, x, src_mask):
        x = x + self.self_attn(self.norm1(x), mask=src_mask)
        return x + self.ffn(self.norm2(x))  # (B, S, D)


class DecoderLayer(nn.Module):
    def __init__(self, config, layer):
        super().__init__()
        self.norm1, self.norm2, self.norm3 = make_norm(config), make_norm(config), make_norm(config)
        self.self_attn = Attention(config, layer, rope=config.positions == "rope")
        self.cross_attn = Attention(config, layer, query_norm=config.cross_query_norm)
        self.ffn = FeedForward(config)

    def forward(self, y, memory, src_mask, cache, past):
        y = y + self.self_attn(self.norm1(y), causal=True, cache=cache, past=past)
        y = y + self.cross_attn(self.norm2(y), context=memory, mask=src_mask, cache=cache)
        return y + self.ffn(self.norm3(y))  # (B, T, D)


class Embedding(nn.Module):
    """Tokens * sqrt(D), plus a stored position table (sinusoidal or learned; none with rope).
    With one vocabulary the decoder's `tokens` is None and the encoder's is passed in."""

    def __init__(self, config, vocab):
        super().__init__()
        self.tokens = nn.Embedding(vocab, config.d_model) if vocab else None
        rope = config.positions == "rope"
        self.positions = None if rope else nn.Embedding(config.max_positions, config.d_model)
        self.scale = math.sqrt(config.d_model)

    def forward(self, ids, tokens, past=0):
        x = tokens(ids) * self.scale  # (B, L, D)
        if self.positions is not None:
            x = x + self.positions.weight[past: past + ids.size(1)].to(x.dtype)
        return x


class Encoder(nn.Module):
    main_input_name = "input_ids"  # what generate hands it

    def __init__(self, config):
        super().__init__()
        self.embed = Embedding(config, config.src_vocab_size)
        self.layers = nn.ModuleList(EncoderLayer(config, i) for i in range(config.encoder_layers))
        self.norm = make_norm(config)
        self.pad = config.pad_token_id

    def forward(self, input_ids=None, attention_mask=None, **kwargs):
        """(B, S) ids -> BaseModelOutput with the (B, S, D) memory."""
        if attention_mask is None:
            attention_mask = input_ids != self.pad
        src_mask = attention_mask.bool()[:, None, None, :]  # (B, 1, 1, S)
        x = self.embed(input_ids, self.embed.tokens)
        for layer in self.layers:
            x = layer(x, src_mask)
        return BaseModelOutput(last_hidden_state=self.norm(x))


class TranslatePreTrainedModel(PreTrainedModel):
    config_class = TranslateConfig
    base_model_prefix = "translate"
    main_input_name = "input_ids"


class TranslateForConditionalGeneration(TranslatePreTrainedModel, GenerationMixin):
    """The encoder-decoder with its output projection: `forward` gives (B, T, V) logits, and
    `generate` searches with an EncoderDecoderCache (self-attention keys and values appended
    each step, the memory's projected once)."""

    def __init__(self, config):
        super().__init__(config)
        self.encoder = Encoder(config)
        self.decoder_embed = Embedding(config, 0 if config.shared_embeddings else config.vocab_size)
        self.decoder_layers = nn.ModuleList(DecoderLayer(config, i)
                                            for i in range(config.decoder_layers))
        self.decoder_norm = make_norm(config)
        self.output = None if config.tied_output else nn.Linear(config.d_model, config.vocab_size,
                                                                bias=False)
        self.post_init()

    def get_encoder(self, modality=None):
        return self.encoder

    def get_input_embeddings(self):
        return self.encoder.embed.tokens

    def target_tokens(self):
        """The target embedding: the decoder's own, or the source's with one vocabulary."""
        own = self.decoder_embed.tokens
        return own if own is not None else self.encoder.embed.tokens

    def forward(self, input_ids=None, attention_mask=None, decoder_input_ids=None,
                encoder_outputs=None, labels=None, use_cache=None, **kwargs):
        """(B, S) source ids, (B, T) target prefix (BOS first) -> Seq2SeqLMOutput with (B, T, V)
        logits; `labels` (B, T), -100 where ignored, adds the cross-entropy loss."""
        if encoder_outputs is None:
            encoder_outputs = self.encoder(input_ids, attention_mask)
        elif not isinstance(encoder_outputs, BaseModelOutput):
            encoder_outputs = BaseModelOutput(last_hidden_state=encoder_outputs[0])
        memory = encoder_outputs.last_hidden_state  # (B, S, D)
        if attention_mask is None:  # the source's real tokens, or all of the memory
            attention_mask = (input_ids != self.config.pad_token_id if input_ids is not None
                              else memory.new_ones(memory.shape[:2], dtype=torch.bool))
        if decoder_input_ids is None and labels is not None:  # BOS, then labels but the last
            pad = self.config.pad_token_id
            decoder_input_ids = labels.masked_fill(labels == -100, pad).roll(1, 1)
            decoder_input_ids[:, 0] = self.config.decoder_start_token_id
        cache = kwargs.get(CACHE)
        if cache is None and use_cache:
            cache = EncoderDecoderCache(DynamicCache(config=self.config),
                                        DynamicCache(config=self.config))
        past = cache.get_seq_length() if cache is not None else 0
        src_mask = attention_mask.bool()[:, None, None, :]  # (B, 1, 1, S)
        y = self.decoder_embed(decoder_input_ids, self.target_tokens(), past)  # (B, T, D)
        for layer in self.decoder_layers:
            y = layer(y, memory, src_mask, cache, past)
        y = self.decoder_norm(y)
        out = self.output.weight if self.output is not None else self.target_tokens().weight
        logits = F.linear(y, out)  # (B, T, V)
        loss = None if labels is None else F.cross_entropy(logits.flatten(0, 1).float(),
                                                           labels.flatten(), ignore_index=-100)
        return Seq2SeqLMOutput(loss=loss, logits=logits, encoder_last_hidden_state=memory,
                               **{CACHE: cache})


class TranslationPipeline(Pipeline):
    """pipeline("translation", model=folder, trust_remote_code=True)(texts): each text through
    the tokenizer, `generate` with the folder's generation_config.json (keyword arguments
    override it), and back to text: [{"translation_text": ...}] a text, as transformers 4's."""

    _load_tokenizer = True
    _pipeline_calls_generate = True

    def __call__(self, texts, **generate_kwargs):
        found = super().__call__(texts, **generate_kwargs)
        return [found] if isinstance(texts, str) else found

    def _sanitize_parameters(self, **generate_kwargs):
        return {}, generate_kwargs, {}

    def preprocess(self, text):
        return self.tokenizer([text], return_tensors="pt")

    def _forward(self, inputs, **generate_kwargs):
        return {"ids": self.model.generate(**inputs, **generate_kwargs)}  # (1, 1 + T)

    def postprocess(self, outputs):
        return {"translation_text": self.tokenizer.decode(outputs["ids"][0],
                                                          skip_special_tokens=True)}
