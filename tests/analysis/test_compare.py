"""`translate compare` and `translate attention` on the tiny trained Transformer and RNN runs."""

import json
import re
import shutil
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from translate.alignment import record_attention
from translate.analysis.attention import attention_maps
from translate.analysis.compare import pick_sentences
from translate.analysis.report import markdown_table
from translate.loading import load_checkpoint
from translate.cli import main
from translate.data.batch import pad
from translate.inference import translate_sentences
from translate.ready import Ready
from translate.scoring import bleu_by_length, score
from translate.tokens import BOS

PNG = b"\x89PNG\r\n\x1a\n"
SECTIONS = ["## Findings", "## Systems", "## Significance: paired bootstrap resampling",
            "## BLEU by source sentence length", "## Learning curves", "## Attention",
            "## Word alignment", "## Sample translations"]


@pytest.fixture(scope="module")
def report(trained_run, trained_rnn_run, small_data, tmp_path_factory):
    """The report folder of `compare` on both tiny runs (Transformer first: the baseline),
    greedy as the tiny runs' test decode was."""
    out = tmp_path_factory.mktemp("report")
    result = CliRunner().invoke(main, ["compare", str(trained_run.run_dir),
                                       str(trained_rnn_run.run_dir), "--data", str(small_data),
                                       "-o", str(out), "--samples", "4", "--beam", "1"])
    assert result.exit_code == 0, result.output
    assert f"report: {out / 'report.md'}" in result.output
    return out, json.loads((out / "results.json").read_text(encoding="utf-8"))


def references(small_data) -> list[str]:
    lines = (small_data / "test_2016_flickr.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line)["de"] for line in lines]


def test_compare_writes_every_file_and_section(report):
    out, results = report
    figures = ["learning_curves.png", "bleu_by_length.png",
               *(a["figure"] for a in results["attention"]), results["alignment"]["figure"]]
    assert len(results["attention"]) == 3 and len(results["samples"]) == 4
    for name in figures:
        assert (out / name).read_bytes()[:8] == PNG, name
    for system in results["systems"]:
        assert len((out / system["hypotheses"]).read_text(encoding="utf-8").splitlines()) == 100
    md = (out / "report.md").read_text(encoding="utf-8")
    assert all(section in md for section in SECTIONS)
    assert results["seed_groups"] == [] and "## Seeds" not in md  # no run of several seeds
    assert "paired bootstrap p = " in md  # a finding, stated from the numbers
    links = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", md)
    assert sorted(links) == sorted(figures)  # relative links, every figure shown
    assert [s["arch"] for s in results["systems"]] == ["transformer", "rnn"]
    for system in results["systems"]:
        assert system["name"] in md and system["parameters"] > 0 and system["steps"] > 0
        assert system["sentences_per_s"] > 0 and system["train_minutes"] > 0
        assert system["bleu_signature"] in md


def test_compare_scores_each_systems_attention_as_alignments_on_the_gold_test_part(report):
    """The reading is chosen on the dev part; the Transformer gets its best heads-averaged
    reading too where the best is one head; every AER has its interval around it."""
    _, results = report
    rows = results["alignment"]["rows"]
    assert [r["system"] for r in rows if r["chosen"]] == [s["name"] for s in results["systems"]]
    for r in rows:
        assert r["aer_low"] <= r["scores"]["aer"] <= r["aer_high"]
        assert r["scores"]["sure"] == 935  # the test part's sure links
        assert (r["arch"] == "rnn") == r["reading"].startswith("the attention")
    transformer = [r for r in rows if r["arch"] == "transformer"]
    assert any("heads averaged" in r["reading"] for r in transformer)
    assert results["alignment"]["diagonal"]["scores"]["aer"] > 30


def test_compare_scores_each_run_as_its_training_did(report, trained_run, trained_rnn_run):
    _, results = report
    for system, run in zip(results["systems"], (trained_run, trained_rnn_run)):
        assert system["bleu"] == run.test_scores["test_2016_flickr"].bleu


def test_bootstrap_scores_both_systems_on_the_same_references(report, small_data):
    from sacrebleu.metrics import BLEU
    from sacrebleu.significance import PairedTest

    out, results = report
    refs = references(small_data)
    hyps = {s["name"]: (out / s["hypotheses"]).read_text(encoding="utf-8").splitlines()
            for s in results["systems"]}
    sig = results["significance"]
    names = list(hyps)
    assert [s["name"] for s in sig["systems"]] == names and sig["baseline"] == names[0]
    for system, tested in zip(results["systems"], sig["systems"]):
        direct = score(hyps[system["name"]], refs).bleu
        assert tested["BLEU"]["score"] == pytest.approx(direct) == system["bleu"]
        assert tested["BLEU"]["ci"] >= 0
    baseline, other = sig["systems"]
    assert baseline["BLEU"]["p_value"] is None
    assert all(0 < other[m]["p_value"] <= 1 for m in sig["metrics"])
    # what `sacrebleu REF -i A B --paired-bs` computes, with the same seed
    _, direct = PairedTest(list(hyps.items()), {"BLEU": BLEU(references=[refs])}, None,
                           test_type="bs", n_samples=sig["n_samples"])()
    assert direct["BLEU"][1].p_value == other["BLEU"]["p_value"]


def test_length_buckets_count_every_sentence_once(report):
    _, results = report
    buckets = results["length_buckets"]
    assert [b["words"] for b in buckets] == ["1-10", "11-15", "16-20", "21-25", "26+"]
    assert sum(b["sentences"] for b in buckets) == results["sentences"] == 100
    for b in buckets:
        assert all((v is None) == (b["sentences"] == 0) for v in b["bleu"].values())


def test_bleu_by_length_bucket_edges():
    src = ["", "w " * 10, "w " * 11, "w " * 25, "w " * 26]
    buckets = bleu_by_length(src, ["a b c d e"] * 5, {"sys": ["a b c d e"] * 5})
    assert [b["sentences"] for b in buckets] == [2, 1, 0, 1, 1]
    assert buckets[0]["bleu"]["sys"] == pytest.approx(100) and buckets[2]["bleu"]["sys"] is None


def test_attention_sentences_are_deterministic_and_medium_length():
    src = [" ".join(["w"] * n) for n in range(1, 30)]
    picked = pick_sentences(src, 3)
    assert picked == pick_sentences(src, 3) == [5, 8, 11]  # 6, 9 and 12 words


def test_markdown_cells_escape_pipes():
    table = markdown_table(["a", "b"], [["x | y", "two\nlines"]])
    assert table.splitlines()[2] == "| x \\| y | two lines |"


def test_compare_takes_a_checkpoint_in_place_of_a_run_folder(trained_run, trained_rnn_run,
                                                               small_data, tmp_path):
    """An averaged checkpoint: it decodes, its folder's metrics log gives the curves."""
    run_dir = Path(shutil.copytree(trained_rnn_run.run_dir, tmp_path / "rnn"))
    averaged = CliRunner().invoke(main, ["average", str(run_dir), "--last", "2", "--raw"])
    assert averaged.exit_code == 0, averaged.output
    last = run_dir / "average_last2_raw.pt"
    out = tmp_path / "out"
    result = CliRunner().invoke(main, ["compare", str(trained_run.run_dir), str(last),
                                       "--data", str(small_data), "-o", str(out),
                                       "--samples", "0", "--beam", "1"])
    assert result.exit_code == 0, result.output
    results = json.loads((out / "results.json").read_text(encoding="utf-8"))
    best, named = results["systems"]
    assert (best["checkpoint"], named["checkpoint"]) == ("best.pt", "average_last2_raw.pt")
    assert named["name"] == "rnn-average_last2_raw"
    assert named["step"] == load_checkpoint(last).step and named["steps"] > 0
    evaluated = CliRunner().invoke(main, ["evaluate", str(last), "--split", "test_2016_flickr",
                                          "--data", str(small_data), "--beam", "1", "--json"])
    assert evaluated.exit_code == 0, evaluated.output
    assert named["bleu"] == json.loads(evaluated.stdout)["test_2016_flickr"]["bleu"]
    assert "| average_last2_raw.pt |" in (out / "report.md").read_text(encoding="utf-8")


@pytest.mark.parametrize("given, message", [("missing.pt", "checkpoint not found: "),
                                            ("metrics.jsonl",
                                             "neither a run folder nor a .pt checkpoint: ")])
def test_compare_names_a_bad_checkpoint_path_in_one_line(given, message, trained_run, small_data,
                                                         tmp_path):
    path = trained_run.run_dir / given
    result = CliRunner().invoke(main, ["compare", str(trained_run.run_dir), str(path),
                                       "--data", str(small_data), "-o", str(tmp_path / "out")])
    assert result.exit_code == 1 and result.output == f"Error: {message}{path}\n"
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("breakage, file, message", [
    ("missing", "metrics.jsonl", "no metrics log at"),
    ("truncated", "metrics.jsonl", "is not valid JSON (truncated log?)"),
    ("no checkpoint", "best.pt", "checkpoint not found"),
])
def test_broken_run_folder_is_one_clear_line(breakage, file, message, trained_run, small_data,
                                             tmp_path):
    broken = tmp_path / "broken"
    broken.mkdir()
    for name in ("best.pt", "metrics.jsonl"):
        shutil.copy(trained_run.run_dir / name, broken / name)
    if breakage == "truncated":
        text = (broken / file).read_text(encoding="utf-8")
        (broken / file).write_text(text[:-20], encoding="utf-8")  # cut inside the last record
    else:
        (broken / file).unlink()
    result = CliRunner().invoke(main, ["compare", str(trained_run.run_dir), str(broken),
                                       "--data", str(small_data), "-o", str(tmp_path / "out")])
    assert result.exit_code == 1 and isinstance(result.exception, SystemExit)
    assert result.output.startswith("Error: ") and len(result.output.splitlines()) == 1
    assert message in result.output and str(broken / file) in result.output
    assert not (tmp_path / "out" / "report.md").exists()


@pytest.mark.parametrize("run", ["trained_run", "trained_rnn_run"])
def test_attention_command_writes_a_png(run, request, tmp_path):
    checkpoint = request.getfixturevalue(run).best_checkpoint
    out = tmp_path / "maps.png"
    result = CliRunner().invoke(main, ["attention", str(checkpoint), "--text",
                                       "A man rides a bike .", "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert out.read_bytes()[:8] == PNG
    assert "translation: " in result.output and f"figure: {out}" in result.output


def test_attention_command_rejects_empty_text(trained_rnn_run, tmp_path):
    result = CliRunner().invoke(main, ["attention", str(trained_rnn_run.best_checkpoint),
                                       "--text", "  ", "-o", str(tmp_path / "maps.png")])
    assert result.exit_code == 1 and isinstance(result.exception, SystemExit)
    assert "the sentence to translate is empty" in result.output
    assert not (tmp_path / "maps.png").exists()


@pytest.mark.parametrize("run", ["trained_run", "trained_rnn_run"])
def test_attention_maps_are_distributions_over_the_right_tokens(run, request):
    loaded = load_checkpoint(request.getfixturevalue(run).best_checkpoint)
    text = "Two dogs play in the snow ."
    maps = attention_maps(loaded.model, loaded.tokenizer, text, loaded.recipe.decode)
    S, T = len(maps.src_pieces), len(maps.tgt_in_pieces)
    assert maps.src_pieces[-1] == "</s>" and maps.tgt_in_pieces[0] == "<s>"
    assert maps.translation == translate_sentences(Ready(loaded.model, loaded.tokenizer), [text],
                                                   loaded.recipe.decode)[0]
    cfg = loaded.recipe.model
    if cfg.arch == "rnn":
        expected = {"attention": (1, T, S)}
    else:
        H, kinds = cfg.heads, ("self_attn", "cross_attn")
        expected = {**{f"encoder_layers.{i}.self_attn": (H, S, S)
                       for i in range(cfg.encoder_layers)},
                    **{f"decoder_layers.{i}.{kind}": (H, T, T if kind == "self_attn" else S)
                       for i in range(cfg.decoder_layers) for kind in kinds}}
    assert {name: tuple(w.shape) for name, w in maps.weights.items()} == expected
    for name, w in maps.weights.items():
        torch.testing.assert_close(w.sum(-1), torch.ones(w.shape[:-1]))
        if name.startswith("decoder") and name.endswith("self_attn"):
            assert (w.triu(diagonal=1) == 0).all()  # causal: no weight on later positions


def test_rnn_alignment_sums_to_one_and_is_zero_on_padding(trained_rnn_run):
    loaded = load_checkpoint(trained_rnn_run.best_checkpoint)
    model = loaded.model
    ids = loaded.tokenizer.encode_src(["A dog runs .", "Two men sit on a bench near a red house ."])
    short = len(ids[0])
    src = pad([torch.tensor(i) for i in ids])  # (2, S)
    tgt_in = torch.tensor([[BOS, 10, 11, 12, 13]] * 2)  # (2, T)
    with torch.no_grad():
        with record_attention(model) as padded:
            model(src, tgt_in)
        with record_attention(model) as alone:
            model(src[:1, :short], tgt_in[:1])  # the short sentence without padding
    batched = torch.cat(padded["attention"], dim=1)  # (2, T, S): one (2, 1, S) per step
    single = torch.cat(alone["attention"], dim=1)  # (1, T, short)
    assert batched.shape == (2, 5, src.size(1)) and short < src.size(1)
    torch.testing.assert_close(batched.sum(-1), torch.ones(2, 5))
    assert (batched[0, :, short:] == 0).all()
    torch.testing.assert_close(batched[0, :, :short], single[0])
