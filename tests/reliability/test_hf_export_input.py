"""`translate export --format hf` with hostile input: text a user types encodes through the
folder's AutoTokenizer as SentencePiece encodes it; a tokenizer that transformers would not
reproduce (a word model, a converter that drifts) is refused in one line with nothing left
behind; the folder handed to our own loaders is named for what it is."""

import pytest
import torch
from click.testing import CliRunner

from helpers.files import read_jsonl
from translate.checkpoint import load_checkpoint, save_checkpoint
from translate.cli import main
from translate.config import load_recipe
from translate.models import build_model
from translate.tokenizer import Tokenizer

transformers = pytest.importorskip("transformers", reason="the export extra is not installed")

HOSTILE = [
    "", " ", "   A   dog   runs.   ", "A dog </s> runs <s> <pad> <unk>", "</s>", "<s>",
    "\u2581", "A\u2581dog", "tab\there\nnewline\r\n", "NUL\x00byte", "Ｆｕｌｌ width ﬁ ℌ ①",
    "non\u00a0breaking\u2009thin\u200bzero-width", "e\u0301 combining", "emoji 🐶🏳️‍🌈 中文 עברית",
    "Straße ÄÖÜ äöü", "a" * 300, "dog " * 200,
]


@pytest.fixture(scope="module")
def hf_folder(trained_run, tmp_path_factory):
    from translate.export import export

    return export(trained_run.run_dir, "hf", tmp_path_factory.mktemp("hf") / "model").out


def test_text_a_user_types_encodes_and_decodes_as_sentencepiece(hf_folder, trained_run):
    tokenizer = load_checkpoint(trained_run.run_dir).tokenizer
    tok = transformers.AutoTokenizer.from_pretrained(hf_folder)
    ours = tokenizer.encode_src(HOSTILE)
    assert tok(HOSTILE, verbose=False)["input_ids"] == ours
    assert tok.batch_decode(ours, skip_special_tokens=True) == tokenizer.decode_tgt(ours)


def export_error(checkpoint, out) -> str:
    result = CliRunner().invoke(main, ["export", str(checkpoint), "--format", "hf", "-o",
                                       str(out)])
    assert result.exit_code == 1 and result.output.count("\n") == 1, result.output
    assert result.output.startswith("Error: ") and not out.exists()
    return result.output


def test_a_word_model_checkpoint_is_refused_in_one_line(small_data, tmp_path):
    rows = read_jsonl(small_data / "train.jsonl", 500)
    cfg = load_recipe(None, ["tokenizer.model_type=word", "tokenizer.vocab_size=400",
                             "model.d_model=16", "model.heads=2", "model.ffn_dim=32",
                             "model.encoder_layers=1", "model.decoder_layers=1"])
    tokenizer = Tokenizer.train([r["en"] for r in rows], [r["de"] for r in rows], cfg.tokenizer)
    torch.manual_seed(0)
    model = build_model(cfg.model, tokenizer.src_vocab_size, tokenizer.tgt_vocab_size, True)
    save_checkpoint(tmp_path / "word.pt", model, cfg, tokenizer, 1)
    output = export_error(tmp_path / "word.pt", tmp_path / "hf")
    assert "splits words as a word model does" in output and "--format ctranslate2" in output


def test_a_converter_that_drifts_is_caught_before_anything_is_written(trained_run, tmp_path,
                                                                      monkeypatch):
    from tokenizers import normalizers
    from transformers.convert_slow_tokenizer import SpmConverter

    build = SpmConverter.build_tokenizer_from_spm_proto

    def lowercasing(*args, **kwargs):  # a transformers release that lost the character map
        backend = build(*args, **kwargs)
        backend.normalizer = normalizers.Sequence([normalizers.Lowercase(), backend.normalizer])
        return backend

    monkeypatch.setattr(SpmConverter, "build_tokenizer_from_spm_proto", staticmethod(lowercasing))
    output = export_error(trained_run.run_dir, tmp_path / "hf")
    assert "the transformers tokenizer built from spm.model encodes or decodes" in output
    assert "probe sentences unlike SentencePiece" in output


def test_our_loaders_name_the_folder_for_what_it_is(hf_folder):
    before = {p.name: p.read_bytes() for p in hf_folder.iterdir()}
    result = CliRunner().invoke(main, ["decode", str(hf_folder)], input="A dog runs.\n")
    assert result.exit_code == 1 and "Traceback" not in result.output
    (error,) = [line for line in result.output.splitlines() if line.startswith("Error")]
    assert "holds a Hugging Face pegasus model: load it with transformers' AutoTokenizer and " \
           "AutoModelForSeq2SeqLM" in error
    assert {p.name: p.read_bytes() for p in hf_folder.iterdir()} == before
