import shutil
import subprocess

from translate.config import TokenizerConfig
from translate.tokenizer import Tokenizer
from translate.tokens import BOS, EOS, PAD, UNK
from helpers.files import read_jsonl


def test_round_trip_restores_text_and_model_file_is_standard(small_data, tmp_path):
    rows = read_jsonl(small_data / "train.jsonl", 2000)
    en, de = [r["en"] for r in rows], [r["de"] for r in rows]
    tok = Tokenizer.train(en, de, TokenizerConfig(vocab_size=2000))
    assert tok.joint and tok.src_vocab_size == 2000
    for text in de[:200] + ["Ein Mädchen läuft über die Straße."]:
        ids = tok.encode_tgt([text])[0]
        assert ids[-1] == EOS and min(ids[:-1]) > EOS
        assert tok.decode_tgt([ids]) == [" ".join(text.split())]  # NFKC squeezes spaces
    assert [tok.src.id_to_piece(i) for i in (PAD, UNK, BOS, EOS)] == ["<pad>", "<unk>", "<s>", "</s>"]
    (path,) = tok.save(tmp_path, "en", "de")
    import sentencepiece as spm

    reloaded = spm.SentencePieceProcessor(model_file=str(path))
    assert reloaded.encode(de[0]) == tok.tgt.encode(de[0])
    if shutil.which("spm_encode"):  # the standard command-line tool reads our file
        out = subprocess.run(["spm_encode", f"--model={path}", "--output_format=id"],
                             input=de[0] + "\n", capture_output=True, text=True, check=True)
        assert [int(i) for i in out.stdout.split()] == tok.tgt.encode(de[0])


def test_separate_vocabularies(small_data, tmp_path):
    rows = read_jsonl(small_data / "train.jsonl", 2000)
    tok = Tokenizer.train([r["en"] for r in rows], [r["de"] for r in rows],
                          TokenizerConfig(vocab_size=800, joint=False, model_type="bpe"))
    assert not tok.joint
    assert {p.name for p in tok.save(tmp_path, "en", "de")} == {"spm.en.model", "spm.de.model"}
    assert tok.decode_tgt(tok.encode_tgt([rows[0]["de"]])) == [rows[0]["de"]]
