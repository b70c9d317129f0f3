"""`translate export --format hf`: the saved Pegasus folder, loaded by `from_pretrained`,
computes our logits and greedy translations."""

import pytest
import torch

from tests.conftest import read_jsonl
from translate.checkpoint import load_checkpoint
from translate.data.batch import pad
from translate.export import ExportError, export
from translate.models import TransformerConfig, build_model
from translate.search import greedy_search
from translate.tokens import BOS, EOS, PAD

transformers = pytest.importorskip("transformers", reason="the export extra is not installed")
from translate.export.hf import to_pegasus  # noqa: E402


def test_the_saved_folder_computes_the_trained_models_logits(trained_run, small_data, tmp_path):
    out = export(trained_run.run_dir, "hf", tmp_path / "hf")
    assert {"config.json", "model.safetensors", "generation_config.json", "spm.model"} == set(
        out.files)
    hf = transformers.PegasusForConditionalGeneration.from_pretrained(out.out).eval()
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


def test_learned_positions_survive_saving_and_loading(tmp_path):
    torch.manual_seed(0)
    cfg = TransformerConfig(d_model=32, heads=4, ffn_dim=64, encoder_layers=2, decoder_layers=2,
                            dropout=0.0, max_positions=64, positions="learned", qkv_bias=False,
                            activation="gelu")
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
