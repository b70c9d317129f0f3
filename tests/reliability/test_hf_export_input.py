"""`translate export --format hf` with hostile input: text a user types encodes through the
folder's AutoTokenizer as SentencePiece encodes it; a tokenizer that transformers would not
reproduce (a word model, a converter that drifts) is refused in one line with nothing left
behind; the folder handed to our own loaders is named for what it is; a folder with its own
modeling file whose code or maps changed after the export is refused before any of it runs."""

from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from helpers.files import read_jsonl
from helpers.models import untrained_model
from translate.checkpoint import save_checkpoint
from translate.loading import load_checkpoint
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


# --- a folder with its own modeling file (rope, QK-norm): sealed, and checked before it runs ---

MARKER = "ran.txt"  # what hostile code below writes, into the folder, when anything runs it
HOSTILE_CODE = f"\nimport pathlib\n(pathlib.Path(__file__).parent / {MARKER!r}).write_text('ran')\n"


@pytest.fixture(scope="module")
def remote_folder(small_data, tmp_path_factory):
    """`translate export --format hf` of an untrained rope + QK-norm Transformer."""
    from helpers.models import untrained_model
    from translate.checkpoint import save_checkpoint

    cfg, tokenizer, model = untrained_model(small_data, 1, ("model.positions=rope",
                                                             "model.qk_norm=true"))
    folder = tmp_path_factory.mktemp("remote")
    save_checkpoint(folder / "rope.pt", model, cfg, tokenizer, 1)
    result = CliRunner().invoke(main, ["export", str(folder / "rope.pt"), "--format", "hf",
                                       "-o", str(folder / "hf")])
    assert result.exit_code == 0, result.output
    return folder / "hf"


def reseal(folder, name):
    """Record `name`'s new SHA-256 in the folder's seal: a tamperer who edits that too."""
    import hashlib
    import json

    seal = json.loads((folder / "translate_export.json").read_text())
    seal["sha256"][name] = hashlib.sha256((folder / name).read_bytes()).hexdigest()
    (folder / "translate_export.json").write_text(json.dumps(seal))


def edit_json(folder, name, change, sealed=True):
    import json

    data = json.loads((folder / name).read_text())
    change(data)
    (folder / name).write_text(json.dumps(data))
    if sealed:
        reseal(folder, name)


def append_code(folder, sealed):
    with open(folder / "modeling_translate.py", "a") as f:
        f.write(HOSTILE_CODE)
    if sealed:
        reseal(folder, "modeling_translate.py")


def point_auto_map(target, sealed=True):
    return lambda folder: edit_json(folder, "config.json", lambda c: c["auto_map"].update(
        AutoModelForSeq2SeqLM=target), sealed)


def code_beside(path):
    def tamper(folder):
        (folder / path).parent.mkdir(parents=True, exist_ok=True)
        (folder / path).write_text(HOSTILE_CODE)
    return tamper


def link_modeling_file(folder):
    copy = folder.parent / f"{folder.name}-elsewhere.py"
    copy.write_bytes((folder / "modeling_translate.py").read_bytes())
    (folder / "modeling_translate.py").unlink()
    (folder / "modeling_translate.py").symlink_to(copy)


TAMPERED = {
    "modeling file edited": (lambda f: append_code(f, sealed=False),
                             "modeling_translate.py changed after the export"),
    "modeling file edited and resealed": (lambda f: append_code(f, sealed=True),
                                          "is not the modeling file this translate writes"),
    "auto_map to another repository": (point_auto_map("other/repo--modeling.Model"),
                                       "auto_map names 'other/repo--modeling.Model', not a "
                                       "class of its own modeling_translate.py"),
    "auto_map out of the folder": (point_auto_map("../evil.Model"),
                                   "auto_map names '../evil.Model'"),
    "auto_map to another class, unsealed": (
        point_auto_map("modeling_translate.TranslateConfig", sealed=False),
        "config.json changed after the export"),
    "a pipeline from another file": (
        lambda f: edit_json(f, "config.json", lambda c: c["custom_pipelines"]["translation"]
                            .update(impl="evil.Pipeline")), "custom_pipelines names"),
    "tokenizer code": (lambda f: edit_json(f, "tokenizer_config.json", lambda c: c.update(
        auto_map={"AutoTokenizer": ["evil.Tokenizer", None]})), "names tokenizer code"),
    "a custom generate": (code_beside("custom_generate/generate.py"),
                          "holds code the export did not write (custom_generate/generate.py)"),
    "another python file": (code_beside("evil.py"), "holds code the export did not write "
                                                    "(evil.py)"),
    "modeling file a link": (link_modeling_file, "is a symbolic link to"),
    "seal missing": (lambda f: (f / "translate_export.json").unlink(),
                     "translate_export.json is missing"),
    "seal not JSON": (lambda f: (f / "translate_export.json").write_text("{"),
                      "translate_export.json is not JSON"),
}


@pytest.mark.parametrize("case", TAMPERED)
def test_a_tampered_folder_is_refused_before_any_of_its_code_runs(remote_folder, tmp_path, case):
    import shutil

    from translate.export.hf import check_exported
    from translate.export.hf_folder import ExportFolderError

    folder = Path(shutil.copytree(remote_folder, tmp_path / "hf", symlinks=True))
    check_exported(folder)  # as exported
    tamper, message = TAMPERED[case]
    tamper(folder)
    with pytest.raises(ExportFolderError) as error:
        check_exported(folder)
    assert message in str(error.value) and "\n" not in str(error.value)
    result = CliRunner().invoke(main, ["decode", str(folder)], input="A dog runs.\n")
    (line,) = [line for line in result.output.splitlines() if line.startswith("Error")]
    assert result.exit_code == 1 and "holds a Hugging Face translate model" in line
    assert not (folder / MARKER).exists()  # nothing of it ran


def test_the_remote_code_folder_loads_once_checked(remote_folder):
    from translate.export.hf import check_exported

    check_exported(remote_folder)
    model = transformers.AutoModelForSeq2SeqLM.from_pretrained(remote_folder,
                                                               trust_remote_code=True)
    assert type(model).__name__ == "TranslateForConditionalGeneration"
    for command in (["decode", str(remote_folder)],
                    ["evaluate", str(remote_folder), "--split", "dev"]):
        result = CliRunner().invoke(main, command, input="A dog runs.\n")
        assert result.exit_code == 1 and "Traceback" not in result.output
        (error,) = [line for line in result.output.splitlines() if line.startswith("Error")]
        assert "holds a Hugging Face translate model: load it with transformers' " \
               "AutoTokenizer and AutoModelForSeq2SeqLM" in error


def test_separate_vocabularies_are_refused_in_one_line(small_data, tmp_path):
    cfg, tokenizer, model = untrained_model(small_data, 1, ("tokenizer.joint=false",
                                                            "model.positions=rope"))
    save_checkpoint(tmp_path / "separate.pt", model, cfg, tokenizer, 1)
    output = export_error(tmp_path / "separate.pt", tmp_path / "hf")
    assert "--format hf holds one SentencePiece vocabulary" in output
    assert "tokenizer.joint false" in output and "--format ctranslate2 or inference" in output
