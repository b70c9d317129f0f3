"""`translate export --format hf`: the saved folder loads with `AutoTokenizer` and
`AutoModelForSeq2SeqLM`, its tokenizer encodes and decodes as our SentencePiece does, and the
model computes our logits and translations."""

import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from helpers.files import read_jsonl
from translate.loading import load_checkpoint
from translate.config import TokenizerConfig, load_recipe
from translate.data.batch import pad
from translate.export import ExportError, export
from translate.inference import decode_sentences
from translate.models import TransformerConfig, build_model
from translate.ready import Ready
from translate.search import greedy_search, output_limits
from translate.tokenizer import Tokenizer
from translate.tokens import BOS, EOS, PAD

transformers = pytest.importorskip("transformers", reason="the export extra is not installed")
from tokenizers.normalizers import Lowercase  # noqa: E402 (installed with transformers)

from translate.export.hf import (check_same_ids, fast_tokenizer, save_hf,  # noqa: E402
                                 to_pegasus)


@pytest.fixture(scope="module")
def hf_export(trained_run, tmp_path_factory):
    return export(trained_run.run_dir, "hf", tmp_path_factory.mktemp("hf") / "model")


def test_the_saved_folder_computes_the_trained_models_logits(hf_export, trained_run,
                                                             small_data):
    assert {"config.json", "model.safetensors", "generation_config.json", "spm.model",
            "tokenizer.json", "tokenizer_config.json", "README.md", "modeling_translate.py",
            "translate_export.json"} == set(hf_export.files)
    hf = transformers.PegasusForConditionalGeneration.from_pretrained(hf_export.out).eval()
    loaded = load_checkpoint(trained_run.run_dir)
    rows = read_jsonl(small_data / "test_2016_flickr.jsonl", 16)
    src = pad([torch.tensor(ids) for ids in loaded.tokenizer.encode_src([r["en"] for r in rows])])
    tgt = pad([torch.tensor([BOS] + ids) for ids in
               loaded.tokenizer.encode_tgt([r["de"] for r in rows])])  # (B, T + 1)
    with torch.no_grad():
        theirs = hf(input_ids=src, attention_mask=src != PAD, decoder_input_ids=tgt[:, :-1])
        ours = loaded.model(src, tgt[:, :-1])  # (B, T, V)
    real = tgt[:, 1:] != PAD  # positions with a target token
    torch.testing.assert_close(theirs.logits[real], ours[real], atol=1e-5, rtol=0)
    # generate's cached decoding, with the suppressed tokens of the saved generation config
    generated = hf.generate(input_ids=src, attention_mask=src != PAD, max_new_tokens=20,
                            num_beams=1, do_sample=False)
    rows = [row[1:] for row in generated.tolist()]  # without the decoder start token
    rows = [row[: row.index(EOS)] if EOS in row else [t for t in row if t != PAD] for row in rows]
    assert rows == greedy_search(loaded.model, src, 20)


def test_auto_classes_load_the_folder_with_our_search_settings(hf_export, trained_run):
    config = json.loads((hf_export.out / "config.json").read_text())
    assert config["architectures"] == ["PegasusForConditionalGeneration"]
    tokenizer_config = json.loads((hf_export.out / "tokenizer_config.json").read_text())
    assert tokenizer_config["tokenizer_class"] == "PreTrainedTokenizerFast"  # 4.x loads it too
    tok = transformers.AutoTokenizer.from_pretrained(hf_export.out)
    model = transformers.AutoModelForSeq2SeqLM.from_pretrained(hf_export.out)
    assert tok.is_fast and type(model).__name__ == "PegasusForConditionalGeneration"
    assert (tok.pad_token_id, tok.unk_token_id, tok.bos_token_id, tok.eos_token_id) == (
        PAD, 1, BOS, EOS)
    recipe = load_checkpoint(trained_run.run_dir).recipe  # the tiny recipe decodes greedy
    g = model.generation_config
    assert g.num_beams == recipe.decode.beam == 1 and g.decoder_start_token_id == BOS
    assert g.suppress_tokens == [PAD, BOS]
    # the recipe's limit for its longest training source (1.5 * 100 + 10), and the EOS
    assert g.max_new_tokens == int(recipe.decode.max_len_a * recipe.data.max_len
                                   + recipe.decode.max_len_b) + 1 == 161
@pytest.mark.parametrize("activation", ["gelu", "relu2"])
def test_learned_positions_and_activations_survive_saving_and_loading(tmp_path, activation):
    torch.manual_seed(0)
    cfg = TransformerConfig(d_model=32, heads=4, ffn_dim=64, encoder_layers=2, decoder_layers=2,
                            dropout=0.0, max_positions=64, positions="learned", qkv_bias=False,
                            activation=activation)
    model = build_model(cfg, 40, 40, shared_vocab=True).eval()
    to_pegasus(model).save_pretrained(tmp_path)
    hf = transformers.PegasusForConditionalGeneration.from_pretrained(tmp_path).eval()
    src = torch.randint(4, 40, (2, 9))
    src[:, -1] = EOS
    tgt = torch.randint(4, 40, (2, 7))
    tgt[:, 0] = BOS
    with torch.no_grad():
        theirs = hf(input_ids=src, attention_mask=src != PAD, decoder_input_ids=tgt).logits
        torch.testing.assert_close(theirs, model(src, tgt), atol=1e-5, rtol=0)


def test_untied_embeddings_are_refused_in_one_line():
    torch.manual_seed(0)
    cfg = TransformerConfig(d_model=16, heads=2, ffn_dim=32, encoder_layers=1, decoder_layers=1,
                            tie_embeddings=False)
    with pytest.raises(ExportError, match="one vocabulary with tied embeddings") as error:
        to_pegasus(build_model(cfg, 40, 40, shared_vocab=True))
    assert "\n" not in str(error.value)



@pytest.mark.parametrize("lenpen", [0.0, 0.6])
def test_generate_translates_as_translate_decode_with_beam_5(trained_run, small_data, tmp_path,
                                                             lenpen):
    """The saved settings make a plain `generate` our beam search: the same candidates, EOS
    finishing among the best `beam`, done at `beam` finished. Ranked by log-probability
    (lenpen 0) every line is ours; with a length penalty (len ** 0.45 there, GNMT's here) a
    near tie may go the other way."""
    loaded = load_checkpoint(trained_run.run_dir)
    decode = replace(loaded.recipe.decode, beam=5, lenpen=lenpen, early_exit=False)
    save_hf(loaded.model, loaded.tokenizer, replace(loaded.recipe, decode=decode), tmp_path)
    tok = transformers.AutoTokenizer.from_pretrained(tmp_path)
    hf = transformers.AutoModelForSeq2SeqLM.from_pretrained(tmp_path).eval()
    g = hf.generation_config
    assert (g.num_beams, g.early_stopping) == (5, True)
    assert g.length_penalty == pytest.approx(0.75 * lenpen)  # matched to GNMT's at 15 pieces
    sources = [r["en"] for r in read_jsonl(small_data / "test_2016_flickr.jsonl", 24)]
    ours = decode_sentences(Ready(loaded.model, loaded.tokenizer), sources, decode)
    equal = 0
    for source, hyps in zip(sources, ours):  # one at a time: ours has a limit a sentence
        inputs = tok([source], return_tensors="pt")
        limit = int(output_limits(inputs["input_ids"], decode.max_len_a, decode.max_len_b,
                                  loaded.model.cfg.max_positions - 1)[0])
        assert hyps[0].tokens < limit  # ended by EOS: the limit's forced EOS is ours alone
        with torch.no_grad():
            generated = hf.generate(**inputs, max_new_tokens=limit + 1)  # (1, 1 + T)
        equal += tok.decode(generated[0], skip_special_tokens=True) == hyps[0].text
    assert equal == len(sources) if lenpen == 0 else equal >= len(sources) - 2


@pytest.mark.parametrize("kind, vocab", [("unigram", 1000), ("bpe", 1000), ("char", 100)])
def test_the_tokenizer_encodes_and_decodes_as_sentencepiece(small_data, tmp_path, kind, vocab):
    rows = read_jsonl(small_data / "train.jsonl")
    tokenizer = Tokenizer.train([r["en"] for r in rows], [r["de"] for r in rows],
                                TokenizerConfig(vocab_size=vocab, model_type=kind))
    fast_tokenizer(tokenizer.src_model, 256).save_pretrained(tmp_path)
    tok = transformers.AutoTokenizer.from_pretrained(tmp_path)
    held_out = [r for split in ("validation", "test_2016_flickr", "test_2017_flickr")
                for r in read_jsonl(small_data / f"{split}.jsonl")]
    texts = [r[lang] for r in held_out for lang in ("en", "de")]  # 600 sentences
    ours = tokenizer.encode_src(texts)  # pieces + EOS
    assert tok(texts)["input_ids"] == ours
    assert tok.batch_decode(ours, skip_special_tokens=True) == tokenizer.decode_tgt(ours)
    padded = tok(texts[:4], return_tensors="pt", padding=True)  # right-padded with PAD
    assert padded["input_ids"][padded["attention_mask"] == 0].eq(PAD).all()


def test_a_word_model_is_refused_and_a_drifting_converter_caught(small_data, monkeypatch):
    rows = read_jsonl(small_data / "train.jsonl", 500)
    texts = [r["en"] for r in rows], [r["de"] for r in rows]
    word = Tokenizer.train(*texts, TokenizerConfig(vocab_size=500, model_type="word"))
    with pytest.raises(ExportError, match="no tokenizer that splits words as a word model"):
        fast_tokenizer(word.src_model, 256)
    tokenizer = Tokenizer.train(*texts, TokenizerConfig(vocab_size=300, model_type="bpe"))
    fast = fast_tokenizer(tokenizer.src_model, 256)
    check_same_ids(fast, tokenizer)  # passes as converted
    fast.backend_tokenizer.normalizer = Lowercase()  # a converter that lost the character map
    with pytest.raises(ExportError, match=r"encodes or decodes \d+ of \d+ probe sentences"):
        check_same_ids(fast, tokenizer)


@pytest.mark.slow  # the full Multi30k copy, outside the repository
def test_the_tokenizer_encodes_the_whole_test_split_as_sentencepiece(multi30k, tmp_path):
    rows = read_jsonl(multi30k / "train.jsonl")
    cfg = load_recipe(Path(__file__).resolve().parents[2] / "recipes/multi30k/transformer.yaml")
    tokenizer = Tokenizer.train([r["en"] for r in rows], [r["de"] for r in rows], cfg.tokenizer)
    fast_tokenizer(tokenizer.src_model, 1024).save_pretrained(tmp_path)
    tok = transformers.AutoTokenizer.from_pretrained(tmp_path)
    test = read_jsonl(multi30k / "test_2016_flickr.jsonl")
    for lang in ("en", "de"):
        texts = [r[lang] for r in test]  # 1000 sentences a side
        ours = tokenizer.encode_src(texts)
        assert tok(texts)["input_ids"] == ours
        assert tok.batch_decode(ours, skip_special_tokens=True) == tokenizer.decode_tgt(ours)
