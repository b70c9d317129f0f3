import json

import pytest
from click.testing import CliRunner

from translate.cli import main
from helpers.training import TINY_OVERRIDES


@pytest.fixture
def runner():
    return CliRunner()


def sets(*items):
    return [arg for item in items for arg in ("--set", item)]


def test_train_command_end_to_end(runner, small_data, recipe_path, tmp_path):
    result = runner.invoke(main, ["train", str(recipe_path), "--data", str(small_data),
                                  "--run-dir", str(tmp_path / "run"), "--no-progress",
                                  *sets(*TINY_OVERRIDES, "train.max_steps=20", "train.eval_every=20")])
    assert result.exit_code == 0, result.output
    assert "== test_2016_flickr ==" in result.output and "sacreBLEU signature" in result.output
    assert "legacy BLEU" in result.output and f"run folder: {tmp_path / 'run'}" in result.output
    assert (tmp_path / "run" / "best.pt").is_file()


def test_translate_data_stands_in_for_data_and_the_run_keeps_its_recipe(runner, small_data,
                                                                         recipe_path, tmp_path):
    run = tmp_path / "run"
    result = runner.invoke(main, ["train", str(recipe_path), "--run-dir", str(run),
                                  "--no-progress", *sets(*TINY_OVERRIDES, "train.max_steps=20",
                                                         "train.eval_every=20")],
                           env={"TRANSLATE_DATA": str(small_data)})
    assert result.exit_code == 0, result.output
    assert "dataset: bentrevett/multi30k" in (run / "recipe.yaml").read_text()
    nowhere = {"TRANSLATE_DATA": str(tmp_path / "nowhere")}
    evaluate = ["evaluate", str(run / "best.pt"), "--split", "dev"]
    result = runner.invoke(main, evaluate, env=nowhere)
    assert result.exit_code == 1 and "data folder not found" in result.output
    result = runner.invoke(main, [*evaluate, "--data", str(small_data)], env=nowhere)
    assert result.exit_code == 0, result.output


def test_decode_keeps_line_count_and_order(runner, trained_run, tmp_path):
    text = "A man is riding a bike.\n\nTwo dogs play in the snow.\n" + "word " * 2000 + "\n"
    result = runner.invoke(main, ["decode", str(trained_run.run_dir)], input=text)
    assert result.exit_code == 0, result.output
    lines = result.stdout.split("\n")[:-1]
    assert len(lines) == 4 and lines[1] == "" and lines[0] and lines[3]
    src = tmp_path / "in.en"
    src.write_text(text, encoding="utf-8")
    out = tmp_path / "out.de"
    result = runner.invoke(main, ["decode", str(trained_run.best_checkpoint), "-i", str(src),
                                  "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert out.read_text(encoding="utf-8").split("\n")[:-1] == lines


def test_evaluate_files_and_checkpoint(runner, trained_run, small_data, tmp_path):
    hyp, ref = tmp_path / "hyp", tmp_path / "ref"
    hyp.write_text("Ein hund rennt.\nZwei katzen.\n")
    ref.write_text("Ein Hund rennt.\nZwei Katzen.\n")
    result = runner.invoke(main, ["evaluate", "--hyp", str(hyp), "--ref", str(ref), "--json"])
    assert result.exit_code == 0, result.output
    scores = json.loads(result.stdout)["hyp"]
    assert 0 < scores["bleu"] < 99 and scores["legacy_bleu"] == pytest.approx(100.0)
    assert scores["bleu_signature"].startswith("nrefs:1|case:mixed")
    result = runner.invoke(main, ["evaluate", str(trained_run.best_checkpoint), "--split",
                                  "test_2016_flickr", "--data", str(small_data), "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["test_2016_flickr"]["sentences"] == 100


def test_decode_and_evaluate_take_the_early_exit_switch(runner, trained_run, small_data,
                                                        tmp_path):
    from dataclasses import replace

    from translate.loading import load_checkpoint
    from translate.inference import translate_sentences
    from translate.ready import Ready
    from translate.scoring import score

    loaded = load_checkpoint(trained_run.best_checkpoint)
    pairs = [json.loads(line) for line in (small_data / "validation.jsonl").open()]
    lines, refs = [p["en"] for p in pairs], [p["de"] for p in pairs]
    src = tmp_path / "dev.en"
    src.write_text("\n".join(lines) + "\n", encoding="utf-8")
    cfg = replace(loaded.recipe.decode, beam=4)
    assert cfg.early_exit  # the default
    plain = ["--beam", "4", "--precision", "fp32", "--engine", "plain"]
    for switch, early_exit in [("--early-exit", True), ("--no-early-exit", False)]:
        expected = translate_sentences(Ready(loaded.model, loaded.tokenizer), lines,
                                       replace(cfg, early_exit=early_exit))
        out = tmp_path / f"out{switch}.de"
        result = runner.invoke(main, ["decode", str(trained_run.best_checkpoint), "-i", str(src),
                                      "-o", str(out), switch, *plain])
        assert result.exit_code == 0, result.output
        assert out.read_text(encoding="utf-8").split("\n")[:-1] == expected
        result = runner.invoke(main, ["evaluate", str(trained_run.best_checkpoint), "--split",
                                      "dev", "--data", str(small_data), switch, *plain, "--json"])
        assert result.exit_code == 0, result.output
        assert json.loads(result.stdout)["dev"]["bleu"] == pytest.approx(
            score(expected, refs, "de").bleu)


@pytest.mark.parametrize("args, message", [
    (["decode", "missing.pt"], "checkpoint not found: missing.pt"),
    (["evaluate"], "give a CHECKPOINT, or --hyp and --ref"),
    (["train", "nope.yaml"], "recipe not found"),
])
def test_user_errors_are_one_clear_line(runner, args, message):
    result = runner.invoke(main, args)
    assert result.exit_code != 0
    assert message in result.output and "Traceback" not in result.output


def test_unknown_set_key_lists_valid_keys(runner, recipe_path):
    result = runner.invoke(main, ["train", str(recipe_path), "--set", "model.layers=4"])
    assert result.exit_code == 1
    assert "unknown key(s) ['layers']" in result.output and "encoder_layers" in result.output


def test_mismatched_hyp_ref_and_bad_checkpoint(runner, tmp_path):
    hyp, ref = tmp_path / "hyp", tmp_path / "ref"
    hyp.write_text("a\nb\n")
    ref.write_text("a\n")
    result = runner.invoke(main, ["evaluate", "--hyp", str(hyp), "--ref", str(ref)])
    assert result.exit_code == 1 and "has 2 lines" in result.output and "has 1" in result.output
    bad = tmp_path / "bad.pt"
    bad.write_bytes(b"not a checkpoint")
    result = runner.invoke(main, ["decode", str(bad)], input="hello\n")
    assert result.exit_code == 1 and "bad.pt is not a checkpoint" in result.output


def test_hub_name_offline_fails_with_one_line(runner, recipe_path, tmp_path):
    result = runner.invoke(main, ["train", str(recipe_path), "--run-dir", str(tmp_path / "r")])
    assert result.exit_code == 1
    assert "TRANSLATE_DATA" in result.output and "Traceback" not in result.output


def test_decode_beam_nbest_scores_and_chunks(runner, trained_run, tmp_path):
    text = "A man is riding a bike.\n\nTwo dogs play in the snow.\nA girl sings.\n"
    run = str(trained_run.run_dir)
    whole = runner.invoke(main, ["decode", run, "--beam", "4"], input=text)
    chunked = runner.invoke(main, ["decode", run, "--beam", "4", "--chunk", "1"], input=text)
    assert whole.exit_code == 0, whole.output
    assert whole.stdout == chunked.stdout and len(whole.stdout.split("\n")) == 5
    nbest = runner.invoke(main, ["decode", run, "--beam", "4", "--nbest", "3"], input=text)
    rows = [line.split(" ||| ") for line in nbest.stdout.splitlines()]
    assert [int(r[0]) for r in rows] == [0, 0, 0, 1, 2, 2, 2, 3, 3, 3]
    assert [r[1] for r in rows if r[0] == "0"][0] == whole.stdout.split("\n")[0]
    scores = [float(r[2].split()[0]) for r in rows if r[0] == "2"]
    assert scores == sorted(scores, reverse=True)
    scored = runner.invoke(main, ["decode", run, "--scores"], input=text).stdout.splitlines()
    text_out, score, logprob = scored[0].split("\t")
    assert float(logprob) < 0 and float(score) < 0 and text_out
    too_many = runner.invoke(main, ["decode", run, "--beam", "2", "--nbest", "3"], input=text)
    assert too_many.exit_code != 0 and "cannot exceed the beam size" in too_many.output


def test_decode_interactive_answers_line_by_line(runner, trained_run):
    batch = runner.invoke(main, ["decode", str(trained_run.run_dir)], input="A dog runs.\nA cat.\n")
    live = runner.invoke(main, ["decode", str(trained_run.run_dir), "--interactive"],
                         input="A dog runs.\nA cat.\n")
    assert live.exit_code == 0 and live.stdout == batch.stdout


def test_decode_invalid_utf8_names_the_line_and_leaves_no_partial_output(runner, trained_run,
                                                                         tmp_path):
    src = tmp_path / "bad.en"
    src.write_bytes(b"A dog runs.\nA cat \xff sleeps.\n")
    out = tmp_path / "out.de"
    result = runner.invoke(main, ["decode", str(trained_run.run_dir), "-i", str(src), "-o",
                                  str(out), "--chunk", "1"])
    assert result.exit_code == 1 and "line 2 is not valid UTF-8" in result.output
    assert "Traceback" not in result.output
    assert not out.exists() and list(tmp_path.iterdir()) == [src]  # nor a temporary file


def test_a_command_started_with_standard_output_closed_says_so(trained_run, tmp_path):
    """`translate decode RUN >&-`: one line, before anything is loaded or written; nothing is
    written into whatever file the closed descriptor 1 would next be."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    source = tmp_path / "news.en"
    source.write_text("A man rides a bike.\n")
    repo = Path(__file__).resolve().parents[1]
    done = subprocess.run([sys.executable, "-m", "translate", "decode", str(trained_run.run_dir),
                           "-i", str(source)], stderr=subprocess.PIPE, text=True,
                          preexec_fn=lambda: os.close(1),
                          env={**os.environ, "PYTHONPATH": str(repo)})
    assert done.returncode == 1
    assert done.stderr.splitlines() == ["Error: standard output is closed: what the command "
                                        "prints would be lost; redirect it to a file, or to "
                                        "/dev/null to drop it"]
