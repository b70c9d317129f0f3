"""`translate export --format hf` for every Transformer recipe: a model Pegasus holds (the 2017
recipe) loads as transformers' own class with no remote code; any other (the default recipe's
rope and QK-norm, RMSNorm, SwiGLU, untied embeddings) through the folder's own modeling file
with `trust_remote_code=True`, computing our logits and, through `generate` and the translation
pipeline, translating as `translate decode` does. The model card states the run's test BLEU."""

import json
from dataclasses import fields, replace

import pytest
import torch
import yaml

from helpers.files import read_jsonl
from helpers.models import untrained_model
from helpers.training import RECIPES, TINY_OVERRIDES, train_tiny
from translate.loading import load_checkpoint
from translate.data.batch import pad
from translate.export import export
from translate.inference import decode_sentences
from translate.models import TransformerConfig
from translate.ready import Ready
from translate.search import greedy_search, output_limits
from translate.tokens import BOS, EOS, PAD

transformers = pytest.importorskip("transformers", reason="the export extra is not installed")
from safetensors.torch import load_file  # noqa: E402 (installed with transformers)

from translate.export.hf import check_exported, remote_options, save_hf  # noqa: E402

HAS_WIDTH = "cross_query_norm" in {f.name for f in fields(TransformerConfig)}


@pytest.fixture(scope="module")
def default_run(small_data, tmp_path_factory):
    """The default recipe (rope, QK-norm) made tiny, trained 300 steps; its test splits scored."""
    return train_tiny(RECIPES / "transformer.yaml", TINY_OVERRIDES, small_data, 300,
                      tmp_path_factory.mktemp("default_run"))


def save(run_dir, out, beam: int = 5):
    """The run's best checkpoint saved as `translate export --format hf` saves it, its
    generation config at `beam` (the tiny recipe decodes greedy); the checkpoint returned."""
    loaded = load_checkpoint(run_dir)
    decode = replace(loaded.recipe.decode, beam=beam)
    out.mkdir()
    save_hf(loaded.model, loaded.tokenizer, replace(loaded.recipe, decode=decode), out,
            source=run_dir, step=loaded.step)
    loaded.tokenizer.save(out, loaded.recipe.data.src_lang, loaded.recipe.data.tgt_lang)
    return loaded


@pytest.fixture(scope="module")
def remote(default_run, tmp_path_factory):
    """(checkpoint, folder, model): the default recipe's export, checked, then loaded."""
    out = tmp_path_factory.mktemp("hf") / "model"
    loaded = save(default_run.run_dir, out)
    check_exported(out)  # before any of its code runs
    model = transformers.AutoModelForSeq2SeqLM.from_pretrained(out, trust_remote_code=True)
    return loaded, out, model.eval()


def ids(texts, encode):
    return pad([torch.tensor(row) for row in encode(texts)])  # (B, L), right-padded with PAD


def test_the_default_recipe_loads_through_its_own_modeling_file_with_our_logits(remote,
                                                                               small_data):
    loaded, out, model = remote
    assert remote_options(loaded.model) == ["model.positions: rope", "model.qk_norm: true"]
    assert {"config.json", "model.safetensors", "generation_config.json", "modeling_translate.py",
            "translate_export.json", "README.md", "spm.model", "tokenizer.json",
            "tokenizer_config.json"} == {p.name for p in out.iterdir()}
    config = json.loads((out / "config.json").read_text())
    assert config["auto_map"] == {
        "AutoConfig": "modeling_translate.TranslateConfig",
        "AutoModelForSeq2SeqLM": "modeling_translate.TranslateForConditionalGeneration"}
    code = (out / "modeling_translate.py").read_text()
    imported = {line.split()[1].split(".")[0] for line in code.splitlines()
                if line.startswith(("import ", "from "))}
    assert imported == {"math", "torch", "transformers"}  # never translate
    assert type(model).__name__ == "TranslateForConditionalGeneration"
    assert isinstance(model, transformers.GenerationMixin)
    rows = read_jsonl(small_data / "validation.jsonl")
    tok = transformers.AutoTokenizer.from_pretrained(out)
    sources, targets = [r["en"] for r in rows], [r["de"] for r in rows]
    assert tok(sources)["input_ids"] == loaded.tokenizer.encode_src(sources)
    src = ids(sources, loaded.tokenizer.encode_src)  # (B, S)
    tgt = ids(targets, lambda t: [[BOS] + row for row in loaded.tokenizer.encode_tgt(t)])
    with torch.no_grad():
        theirs = model(input_ids=src, attention_mask=src != PAD,
                       decoder_input_ids=tgt[:, :-1]).logits  # (B, T, V)
        ours = loaded.model(src, tgt[:, :-1])
    real = tgt[:, 1:] != PAD
    difference = (theirs[real] - ours[real]).abs().max().item()
    print(f"max logit difference on {len(rows)} dev sentences: {difference:.2e}")
    assert difference <= 1e-4


def translate_one_at_a_time(model, tok, sources, decode, max_positions: int) -> list[str]:
    """`generate` a sentence at a time, each with our limit for it (plus its EOS)."""
    out = []
    for source in sources:
        inputs = tok([source], return_tensors="pt")
        limit = int(output_limits(inputs["input_ids"], decode.max_len_a, decode.max_len_b,
                                  max_positions - 1)[0])
        with torch.no_grad():
            generated = model.generate(**inputs, max_new_tokens=limit + 1)  # (1, 1 + T)
        out.append(tok.decode(generated[0], skip_special_tokens=True))
    return out


def test_generate_at_beam_5_translates_dev_as_translate_decode(remote, small_data):
    """20 dev sentences, generate's beam search with the saved settings against ours at the
    recipe's beam 5 and length penalty: every line the same."""
    loaded, out, model = remote
    decode = replace(loaded.recipe.decode, beam=5)
    g = model.generation_config
    assert (g.num_beams, g.early_stopping, g.suppress_tokens) == (5, True, [PAD, BOS])
    sources = [r["en"] for r in read_jsonl(small_data / "validation.jsonl", 20)]
    ours = [hyps[0].text for hyps in decode_sentences(Ready(loaded.model, loaded.tokenizer),
                                                      sources, decode)]
    tok = transformers.AutoTokenizer.from_pretrained(out)
    theirs = translate_one_at_a_time(model, tok, sources, decode, loaded.model.cfg.max_positions)
    assert theirs == ours


def test_generate_at_beam_5_translates_the_test_split_as_translate_decode(remote, small_data):
    """The sample's test_2016_flickr (100 sentences): at least 99 lines as ours. A length
    penalty of len ** beta for GNMT's may rank a near tie the other way, and at the length
    limit our search forces EOS where generate cannot."""
    loaded, out, model = remote
    decode = replace(loaded.recipe.decode, beam=5)
    sources = [r["en"] for r in read_jsonl(small_data / "test_2016_flickr.jsonl")]
    ours = decode_sentences(Ready(loaded.model, loaded.tokenizer), sources, decode)
    tok = transformers.AutoTokenizer.from_pretrained(out)
    theirs = translate_one_at_a_time(model, tok, sources, decode, loaded.model.cfg.max_positions)
    differ = [i for i, (a, b) in enumerate(zip(ours, theirs)) if a[0].text != b]
    print(f"{len(sources) - len(differ)}/{len(sources)} test_2016_flickr lines as ours")
    assert len(differ) <= len(sources) // 100  # 99%


def test_the_translation_pipeline_translates_as_translate_decode(remote, small_data):
    loaded, out, _ = remote
    translator = transformers.pipeline("translation", model=str(out), trust_remote_code=True)
    sources = [r["en"] for r in read_jsonl(small_data / "validation.jsonl", 4)]
    ours = decode_sentences(Ready(loaded.model, loaded.tokenizer), sources,
                            replace(loaded.recipe.decode, beam=5))
    assert translator(sources) == [{"translation_text": hyps[0].text} for hyps in ours]
    assert translator(sources[0]) == [{"translation_text": ours[0][0].text}]


def test_the_model_card_states_the_runs_test_bleu_and_the_code_it_runs(remote, default_run,
                                                                      tmp_path):
    _, out, _ = remote
    card = (out / "README.md").read_text()
    _, header, body = card.split("---\n", 2)
    meta = yaml.safe_load(header)
    assert meta["language"] == ["en", "de"] and meta["license"] == "mit"
    assert (meta["library_name"], meta["pipeline_tag"]) == ("transformers", "translation")
    assert "translation" in meta["tags"]
    for split, scores in default_run.test_scores.items():  # as the run's metrics.jsonl says
        assert (f"- {split}: BLEU {scores.bleu:.2f} (sacreBLEU signature "
                f"`{scores.bleu_signature}`)") in body
    assert "translate train recipe.yaml" in body and "positions: rope" in body
    assert "trust_remote_code=True" in body and "model.qk_norm: true" in body
    assert "MIT" in body.split("## Licence")[1]
    loaded = load_checkpoint(default_run.run_dir)  # the same export, told no run folder
    save_hf(loaded.model, loaded.tokenizer, loaded.recipe, tmp_path)
    assert "- test_2016_flickr: not recorded (the export was not given" in \
        (tmp_path / "README.md").read_text()


OPTIONS = [
    ("model.positions=rope", "model.qk_norm=true"),  # the default recipe's
    pytest.param(("model.positions=rope", "model.qk_norm=true", "model.cross_query_norm=width"),
                 marks=pytest.mark.skipif(not HAS_WIDTH, reason="TransformerConfig has no "
                                          "cross_query_norm yet")),
    ("model.norm=rmsnorm", "model.activation=swiglu", "model.qkv_bias=false"),
    ("model.tie_embeddings=false", "model.positions=learned", "model.activation=relu2"),
    ("model.positions=rope", "model.activation=gelu", "model.norm=rmsnorm"),
]


@pytest.mark.parametrize("overrides", OPTIONS)
def test_each_option_pegasus_lacks_computes_our_logits_and_greedy_search(small_data, tmp_path,
                                                                         overrides):
    """A random model of each option (QK-norm scales drawn away from 1, as training leaves
    them): our logits on real sentences, and generate's cached greedy search, ours."""
    cfg, tokenizer, model = untrained_model(small_data, 2, overrides)
    with torch.no_grad():
        for name, weight in model.named_parameters():
            if name.endswith(("q_norm.weight", "k_norm.weight")):
                weight.uniform_(0.5, 2.0)
    save_hf(model.eval(), tokenizer, cfg, tmp_path)
    check_exported(tmp_path)
    if "model.cross_query_norm=width" in overrides:  # one D-wide scale, not Dh
        weights = load_file(tmp_path / "model.safetensors")
        assert weights["decoder_layers.0.cross_attn.q_norm.weight"].shape == (cfg.model.d_model,)
        assert weights["decoder_layers.0.self_attn.q_norm.weight"].shape == (
            cfg.model.d_model // cfg.model.heads,)
    hf = transformers.AutoModelForSeq2SeqLM.from_pretrained(tmp_path, trust_remote_code=True)
    rows = read_jsonl(small_data / "test_2016_flickr.jsonl", 8)
    src = ids([r["en"] for r in rows], tokenizer.encode_src)
    tgt = ids([r["de"] for r in rows], lambda t: [[BOS] + row for row in tokenizer.encode_tgt(t)])
    with torch.no_grad():
        theirs = hf.eval()(input_ids=src, attention_mask=src != PAD, decoder_input_ids=tgt).logits
        torch.testing.assert_close(theirs, model(src, tgt), atol=1e-4, rtol=0)
        labels = torch.cat([tgt[:, 1:], torch.full((len(rows), 1), EOS)], 1)  # (B, T)
        labels[tgt == PAD] = -100  # each position's next token; none where the input is PAD
        loss = hf(input_ids=src, attention_mask=src != PAD, labels=labels).loss
        ours = torch.nn.functional.cross_entropy(model(src, tgt).flatten(0, 1), labels.flatten())
        torch.testing.assert_close(loss, ours, atol=1e-5, rtol=0)
    for use_cache in (True, False):  # the EncoderDecoderCache, and the whole prefix each step
        generated = hf.generate(input_ids=src, attention_mask=src != PAD, max_new_tokens=12,
                                num_beams=1, use_cache=use_cache)
        found = [row[1:] for row in generated.tolist()]  # without the decoder start token
        found = [row[: row.index(EOS)] if EOS in row else [t for t in row if t != PAD]
                 for row in found]
        assert found == greedy_search(model, src, 12)


def test_a_model_pegasus_holds_loads_with_no_remote_code(trained_run, tmp_path):
    """The 2017 recipe: a native Pegasus, no auto_map; the folder's modeling file holds the
    translation pipeline alone (transformers 5 has none), which trust_remote_code runs."""
    out = export(trained_run.run_dir, "hf", tmp_path / "model").out
    check_exported(out)
    config = json.loads((out / "config.json").read_text())
    assert "auto_map" not in config and config["architectures"] == [
        "PegasusForConditionalGeneration"]
    model = transformers.AutoModelForSeq2SeqLM.from_pretrained(out)  # no trust_remote_code
    assert type(model).__name__ == "PegasusForConditionalGeneration"
    assert "with no remote code" in (out / "README.md").read_text()
    translator = transformers.pipeline("translation", model=str(out), trust_remote_code=True)
    assert type(translator.model).__name__ == "PegasusForConditionalGeneration"
    loaded = load_checkpoint(trained_run.run_dir)  # the tiny recipe: greedy
    sources = ["A man rides a bike.", "Two dogs play in the snow."]
    ours = decode_sentences(Ready(loaded.model, loaded.tokenizer), sources, loaded.recipe.decode)
    assert translator(sources) == [{"translation_text": hyps[0].text} for hyps in ours]
