"""Hugging Face export: our Transformer as a `transformers` model with our search's settings,
and our SentencePiece model as a fast tokenizer, so `AutoTokenizer` and `AutoModelForSeq2SeqLM`
load the folder and `generate(**tokenizer(texts, return_tensors="pt", padding=True))`
translates.

A model Pegasus holds is written as a PegasusForConditionalGeneration, which transformers loads
with no code from the folder. Pegasus is, like ours, a pre-norm encoder-decoder with final
LayerNorms, sqrt(D)-scaled embeddings, biased Q/K/V projections and one embedding shared by the
encoder, the decoder and the output; its position table is an ordinary weight, read from
position 0, so ours (sinusoidal or learned) is written into it as it is and the logits are ours
to float rounding. Its feed-forward network takes any activation transformers names (relu,
gelu, relu2), ungated, and its norms are LayerNorms.

Any other Transformer (rope, qk_norm, RMSNorm, SwiGLU, untied embeddings: `remote_options`)
is written for translate/export/hf_modeling.py's TranslateForConditionalGeneration, copied into
the folder as modeling_translate.py (torch and transformers only), which `auto_map` in
config.json names: loaded with `trust_remote_code=True`. Its parameters are ours under our own
names, each tied tensor once. hf_folder.py seals the folder's code and writes its model card.

Why not M2M100, the other pre-norm model there: its sinusoidal table is a non-persistent
buffer that `from_pretrained` recomputes (other frequencies, sin and cos halves rather than
interleaved, positions offset by 2), so a saved M2M100 would not compute our model.

The tokenizer is transformers' own conversion of the .model file, checked at export to encode
and decode as ours; `generate` is our beam search but for its length penalty (len ** beta, ours
GNMT's; see MATCH_LENGTH) and length limit (one per call; see `generation_settings`).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from torch import nn

from translate.config import Recipe
from translate.config.names import GATED
# check_exported is this module's too: what callers of an hf export run before loading it
from translate.export.hf_folder import check_exported, seal, write_card, write_code  # noqa: F401
from translate.export.peer import ExportError, transformer_only
from translate.models.transformer import Transformer
from translate.tokenizer import Tokenizer
from translate.tokens import BOS, EOS, PAD, SPECIAL_IDS


def check_one_vocabulary(tokenizer: Tokenizer) -> None:
    """A transformers tokenizer encodes and decodes with one vocabulary."""
    if not tokenizer.joint:
        raise ExportError("--format hf holds one SentencePiece vocabulary (a transformers "
                          "tokenizer encodes and decodes with the same one); this model has "
                          "separate source and target vocabularies (tokenizer.joint false): "
                          "export it with --format ctranslate2 or inference")


def unlike_pegasus(model: Transformer) -> list[str]:
    """The options of `model` Pegasus's layers do not compute, as "model.key: value"."""
    cfg = model.cfg
    return [f"model.{key}: {value}" for key, value, held in (
        ("positions", "rope", cfg.positions != "rope"),  # Pegasus adds positions
        ("qk_norm", "true", not cfg.qk_norm),  # its attention is plain
        ("norm", cfg.norm, cfg.norm == "layernorm"),  # its norms subtract the mean
        ("activation", cfg.activation, cfg.activation not in GATED)) if not held]  # no gate


def remote_options(model: Transformer) -> list[str]:
    """The options of `model` Pegasus cannot hold: those the folder's own modeling file
    computes (none: a Pegasus). Pegasus also has one embedding matrix for all three roles."""
    untied = ["model.tie_embeddings: false"] if not model.cfg.tie_embeddings else []
    return unlike_pegasus(model) + untied


def check_tied(model: Transformer) -> None:
    """Pegasus has one embedding for the encoder, the decoder and the output."""
    if model.src_embed.tokens is not model.tgt_embed.tokens or not model.cfg.tie_embeddings:
        raise ExportError("Pegasus holds one vocabulary with tied embeddings; this model has "
                          "separate vocabularies or untied embeddings (tokenizer.joint or "
                          "model.tie_embeddings false): `save_hf` writes it with its own "
                          "modeling file")


def check_expressible(model: Transformer) -> None:
    """Pegasus's norms subtract the mean, its feed-forward network has no gate, it adds
    positions to the embeddings and its attention is plain."""
    options = unlike_pegasus(model)
    if options:
        raise ExportError(f"Pegasus cannot hold {', '.join(options)}: `save_hf` writes this "
                          f"model with its own modeling file")


@torch.no_grad()
def to_pegasus(model: nn.Module) -> nn.Module:
    """An HF PegasusForConditionalGeneration that computes what `model` computes."""
    from transformers import PegasusConfig, PegasusForConditionalGeneration

    model = transformer_only(model, "hf")
    check_tied(model)
    check_expressible(model)
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


# our parameter names -> translate/export/hf_modeling.py's (the layers' own names are ours)
REMOTE_NAMES = {"src_embed.": "encoder.embed.", "encoder_layers.": "encoder.layers.",
                "encoder_norm.": "encoder.norm.", "tgt_embed.": "decoder_embed."}


def remote_name(name: str) -> str:
    """Our parameter's name in hf_modeling.py's model: "encoder_layers.0.ffn.fc1.weight" ->
    "encoder.layers.0.ffn.fc1.weight"."""
    prefix = next((ours for ours in REMOTE_NAMES if name.startswith(ours)), "")
    return REMOTE_NAMES.get(prefix, "") + name[len(prefix):]


@torch.no_grad()
def to_transformers(model: nn.Module) -> nn.Module:
    """The transformers model `save_hf` writes for `model`: a Pegasus where Pegasus holds it,
    else the modeling file's own class."""
    return to_remote(model) if remote_options(transformer_only(model, "hf")) else to_pegasus(model)


def to_remote(model: nn.Module) -> nn.Module:
    """hf_modeling.py's TranslateForConditionalGeneration that computes what `model` computes:
    its parameters ours, each tied tensor once, position tables (sinusoidal or learned) stored."""
    from translate.export import hf_modeling

    model = transformer_only(model, "hf")
    c, shared = model.cfg, model.src_embed.tokens is model.tgt_embed.tokens
    hf = hf_modeling.TranslateForConditionalGeneration(hf_modeling.TranslateConfig(
        vocab_size=model.output.out_features, src_vocab_size=model.src_embed.tokens.num_embeddings,
        d_model=c.d_model, heads=c.heads, ffn_hidden=c.ffn_hidden(),
        encoder_layers=c.encoder_layers, decoder_layers=c.decoder_layers,
        activation=c.activation, norm=c.norm, norm_eps=model.encoder_norm.eps,
        positions=c.positions, max_positions=c.max_positions, qkv_bias=c.qkv_bias,
        qk_norm=c.qk_norm, cross_query_norm=getattr(c, "cross_query_norm", "head"),
        shared_embeddings=shared, tied_output=c.tie_embeddings, pad_token_id=PAD,
        bos_token_id=BOS, eos_token_id=EOS, decoder_start_token_id=BOS,
        architectures=["TranslateForConditionalGeneration"])).eval()
    state = {remote_name(name): tensor for name, tensor in model.state_dict().items()}
    if shared:
        del state["decoder_embed.tokens.weight"]  # the encoder's
    if c.tie_embeddings:
        del state["output.weight"]  # the target embedding
    if c.positions == "sinusoidal":  # a buffer of ours, not saved: a stored weight there
        state["encoder.embed.positions.weight"] = model.src_embed.position_table()
        state["decoder_embed.positions.weight"] = model.tgt_embed.position_table()
    hf.load_state_dict(state, strict=True)
    return hf


def save_hf(model: nn.Module, tokenizer: Tokenizer, recipe: Recipe, out: Path,
            dtype: torch.dtype = torch.float32, source: Path | None = None,
            step: int | None = None) -> None:
    """Write `model` as a transformers folder with our search's settings in
    generation_config.json, its tokenizer as tokenizer.json, the modeling file, the seal and
    the model card: what `AutoModelForSeq2SeqLM` and `AutoTokenizer` load.

    Args:
        source, step: the exported checkpoint (or run folder) and its step, for the card's
            test BLEU (read from the run's metrics.jsonl); None: "not recorded".
    """
    model = transformer_only(model, "hf")
    check_one_vocabulary(tokenizer)
    fast = fast_tokenizer(tokenizer.src_model, model.cfg.max_positions)
    check_same_ids(fast, tokenizer)
    remote = remote_options(model)
    hf = to_transformers(model)
    generation_settings(hf.generation_config, recipe, model.cfg.max_positions)
    hf.to(dtype).save_pretrained(out)
    fast.save_pretrained(out)
    config = json.loads((out / "tokenizer_config.json").read_text(encoding="utf-8"))
    # the class name transformers 4 and 5 both load (5 saves its new name, TokenizersBackend)
    config["tokenizer_class"] = "PreTrainedTokenizerFast"
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n",
                                               encoding="utf-8")
    write_code(out, remote=bool(remote))
    write_card(out, recipe.to_dict(), remote, source, step)
    seal(out)


# generate's length penalty divides a hypothesis's log-probability by len ** beta, ours by GNMT's
# ((5 + len) / 6) ** alpha. beta = alpha * L / (5 + L) gives the two the same slope
# (d log penalty / d len) at L pieces: at 15, about Multi30k's mean German sentence with its EOS
# (15.8 on train), beta 0.45 for alpha 0.6 keeps 1003 of 1014 dev lines ours, alpha itself 965
# (benchmarks/hf_export_bleu.py).
MATCH_LENGTH = 15


def hf_length_penalty(alpha: float) -> float:
    """generate's `length_penalty` that ranks hypotheses near MATCH_LENGTH pieces as ours."""
    return round(alpha * MATCH_LENGTH / (5 + MATCH_LENGTH), 4)


def generation_settings(g, recipe: Recipe, max_positions: int) -> None:
    """Our search's settings, as far as `generate` has them, in the GenerationConfig `g`.

    Its length limit is one number for all sentences where ours is a * |src| + b for each:
    the limit of the longest source the model was trained on (`data.max_len`), plus the EOS.
    Beam search there ends a batch only when every sentence has `beam` finished hypotheses,
    or at that limit, so a caller who passes each batch's own limit
    (`max_new_tokens=int(a * S + b) + 1` for a batch whose longest source has S ids) waits
    less.
    """
    decode = recipe.decode
    g.max_new_tokens = min(int(decode.max_len_a * recipe.data.max_len + decode.max_len_b),
                           max_positions - 1) + 1
    g.num_beams = decode.beam
    if decode.beam > 1:  # transformers refuses beam settings for greedy search
        g.length_penalty = hf_length_penalty(decode.lenpen)
        g.early_stopping = True  # done at `beam` finished hypotheses, as ours
    g.suppress_tokens = [PAD, BOS]  # as our search: never output


def fast_tokenizer(spm_model: bytes, max_positions: int):
    """A transformers fast tokenizer that encodes as `Tokenizer.encode_src` does (pieces + EOS,
    no BOS) and decodes, special pieces skipped, as `Tokenizer.decode_tgt` does.

    transformers' own SentencePiece conversion (its normalizer with the model's precompiled
    character map, the dummy prefix, BPE merges ranked by piece score or the unigram scores),
    and a post-processor that appends EOS. A literal "</s>" in a text stays text
    (`split_special_tokens`), as SentencePiece reads it.
    """
    from tokenizers import processors
    from transformers import PreTrainedTokenizerFast
    from transformers.convert_slow_tokenizer import SpmConverter, import_protobuf

    proto = import_protobuf().ModelProto()
    proto.ParseFromString(spm_model)
    kind = proto.trainer_spec.model_type  # 1 unigram, 2 BPE, 3 word, 4 char
    if kind not in (1, 2, 4):
        raise ExportError("--format hf converts unigram, BPE and char SentencePiece models; "
                          "transformers has no tokenizer that splits words as a word model "
                          "does: export it with --format ctranslate2 or inference")
    pieces = [(p.piece, p.score) for p in proto.pieces]
    # unigram: pieces and scores; BPE: merges made from the scores; char: BPE without merges
    vocab = pieces if kind == 1 else {piece: i for i, (piece, _) in enumerate(pieces)}
    backend = SpmConverter.build_tokenizer_from_spm_proto(proto, vocab)
    special = {f"{name}_token": pieces[i][0] for name, i in SPECIAL_IDS.items()}
    backend.post_processor = processors.TemplateProcessing(
        single=f"$A {special['eos_token']}", special_tokens=[(special["eos_token"], EOS)])
    return PreTrainedTokenizerFast(tokenizer_object=backend, model_max_length=max_positions,
                                   split_special_tokens=True, **special)


def check_same_ids(fast, tokenizer: Tokenizer) -> None:
    """Refuse a converted tokenizer that does not encode and decode as ours: probe sentences
    made of every piece of the vocabulary, eight pieces a sentence."""
    sp = tokenizer.src
    words = sp.decode([[i] for i in range(EOS + 1, sp.get_piece_size())])
    probes = [" ".join(words[i: i + 8]) for i in range(0, len(words), 8)]
    ours, theirs = tokenizer.encode_src(probes), fast(probes, verbose=False)["input_ids"]
    texts = zip(tokenizer.decode_tgt(ours), fast.batch_decode(ours, skip_special_tokens=True))
    wrong = [i for i, (a, b, (text, decoded)) in enumerate(zip(ours, theirs, texts))
             if a != b or text != decoded]
    if wrong:
        raise ExportError(f"the transformers tokenizer built from spm.model encodes or decodes "
                          f"{len(wrong)} of {len(probes)} probe sentences unlike SentencePiece "
                          f"(first: {probes[wrong[0]]!r}); export with --format ctranslate2 "
                          f"or inference")
