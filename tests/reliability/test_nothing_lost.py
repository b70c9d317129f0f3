"""Nothing a user had is lost by a command that fails or is misused: decode's output file, a
run folder (one run, one writer, its own checkpoints, its recipe written once), a damaged
checkpoint, a table file whose quoting would silently merge rows."""

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import yaml
import pytest
from click.testing import CliRunner

from helpers.limits import within
from helpers.training import TINY_OVERRIDES
from translate.checkpoint import read_checkpoint, write_checkpoint
from translate.cli import main
from translate.config import DataConfig
from translate.data.read import load_split

REPO = Path(__file__).resolve().parents[2]


def sets(*items):
    return [arg for item in items for arg in ("--set", item)]


def train_records(run_dir) -> list[dict]:
    lines = (run_dir / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
    return [r for r in map(json.loads, lines) if r["kind"] == "train"]

SENTENCES = "A man rides a bike.\nTwo dogs play in the snow.\nA woman reads.\n"


def decode(checkpoint, *args: str, **kwargs):
    return CliRunner().invoke(main, ["decode", str(checkpoint), *args], **kwargs)


def test_decode_refuses_to_write_over_its_input_under_any_name(trained_run, tmp_path):
    source = tmp_path / "news.en"
    source.write_text(SENTENCES)
    os.link(source, tmp_path / "hardlink.en")
    (tmp_path / "symlink.en").symlink_to(source)
    for output in (source, tmp_path / "hardlink.en", tmp_path / "symlink.en",
                   tmp_path / "." / "news.en"):
        result = decode(trained_run.best_checkpoint, "-i", str(source), "-o", str(output))
        assert result.exit_code == 1, result.output
        assert result.output.count("\n") == 1 and "is the input file" in result.output
        assert source.read_text() == SENTENCES
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hardlink.en", "news.en", "symlink.en"]


def test_a_decode_that_fails_half_way_leaves_the_old_output_as_it_was(trained_run, tmp_path):
    source = tmp_path / "news.en"
    source.write_bytes(SENTENCES.encode() * 3 + b"A cat \xff.\n")  # line 10 is not UTF-8
    output = tmp_path / "news.de"
    output.write_text("yesterday's translations\n")
    result = decode(trained_run.best_checkpoint, "-i", str(source), "-o", str(output),
                    "--chunk", "2", "--beam", "1")
    assert result.exit_code == 1 and "line 10 is not valid UTF-8" in result.output
    assert output.read_text() == "yesterday's translations\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["news.de", "news.en"]  # no temp file


def test_a_decode_that_succeeds_replaces_the_output_whole(trained_run, tmp_path):
    source, output = tmp_path / "news.en", tmp_path / "news.de"
    source.write_text(SENTENCES)
    output.write_text("old\n" * 10)
    result = decode(trained_run.best_checkpoint, "-i", str(source), "-o", str(output),
                    "--chunk", "2", "--beam", "1")
    assert result.exit_code == 0, result.output
    lines = output.read_text().splitlines()
    assert len(lines) == 3 and "old" not in lines and all(lines)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["news.de", "news.en"]


def test_an_output_in_a_missing_folder_or_a_folder_is_refused_before_decoding(trained_run,
                                                                             tmp_path):
    for output, message in ((tmp_path / "nope" / "out.de", "folder does not exist"),
                            (tmp_path, "is a folder")):
        result = decode(trained_run.best_checkpoint, "-o", str(output), input=SENTENCES)
        assert result.exit_code == 1 and message in result.output, result.output


# -- run folders ------------------------------------------------------------------------------

SHORT = [*TINY_OVERRIDES, "train.eval_every=10", "train.log_every=5", "train.keep_last=5",
         "data.test_splits=[]"]


def train_cli(*args):
    return CliRunner().invoke(main, ["train", *args, "--no-progress"])


@pytest.fixture(scope="module")
def short_run(recipe_path, small_data, tmp_path_factory):
    """A run of 20 steps (checkpoints at 10 and 20), copied by the tests that change it."""
    run = tmp_path_factory.mktemp("short") / "run"
    result = train_cli(str(recipe_path), "--data", str(small_data), "--run-dir", str(run),
                       *sets(*SHORT, "train.max_steps=20"))
    assert result.exit_code == 0, result.output
    return run


def test_a_new_run_in_a_used_folder_is_refused_and_overwrite_starts_over(short_run, recipe_path,
                                                                        small_data, tmp_path):
    run = shutil.copytree(short_run, tmp_path / "run")
    before = {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()}
    args = [str(recipe_path), "--data", str(small_data), "--run-dir", str(run),
            *sets(*SHORT, "train.max_steps=10")]
    refused = train_cli(*args)
    assert refused.exit_code == 1 and "already holds a run" in refused.output
    assert "--overwrite" in refused.output
    assert {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()} == before
    (run / "notes.txt").write_text("mine")
    started_over = train_cli(*args, "--overwrite")
    assert started_over.exit_code == 0, started_over.output
    assert [r["step"] for r in train_records(run)] == [5, 10]  # no step logged twice
    assert not (run / "step_20.pt").exists() and (run / "notes.txt").read_text() == "mine"
    assert json.loads((run / "run.json").read_text())["run_id"] != json.loads(
        before["run.json"])["run_id"]


def test_resume_refuses_a_checkpoint_of_another_run_and_deletes_nothing(short_run, tmp_path):
    run = shutil.copytree(short_run, tmp_path / "run")
    other = shutil.copytree(short_run, tmp_path / "other")
    (other / "run.json").write_text(json.dumps({"run_id": "f" * 32}))
    data = read_checkpoint(other / "step_10.pt")
    write_checkpoint(run / "step_15.pt", {**data, "step": 15, "run_id": "f" * 32})
    names = sorted(p.name for p in run.iterdir())
    result = train_cli("--resume", str(run), *sets("train.max_steps=40"))
    assert result.exit_code == 1, result.output
    assert "step_15.pt belongs to another run" in result.output
    assert sorted(p.name for p in run.iterdir()) == names


def test_resume_reads_the_checkpoints_recipe_and_never_rewrites_recipe_yaml(short_run, tmp_path):
    run = shutil.copytree(short_run, tmp_path / "run")
    text = (run / "recipe.yaml").read_text()
    cut = "".join(text.splitlines(True)[:12])  # cut at a line boundary: still valid YAML
    (run / "recipe.yaml").write_text(cut)
    result = train_cli("--resume", str(run), *sets("train.max_steps=30"))
    assert result.exit_code == 0, result.output
    assert (run / "recipe.yaml").read_text() == cut  # not rewritten
    saved, started = read_checkpoint(run / "step_30.pt")["recipe"], yaml.safe_load(text)
    assert saved["train"]["warmup"] == 30 and saved["train"]["ema_decay"] == 0.999  # the run's
    assert saved["train"] == {**started["train"], "max_steps": 30}
    assert saved["model"] == started["model"] and saved["tokenizer"] == started["tokenizer"]


def test_a_damaged_step_checkpoint_is_refused_by_name_and_resume_goes_on(short_run, tmp_path):
    """step_20.pt (and best.pt, the same file) hold the weights alone: decoding names the damage;
    --resume takes last.pt, which holds the training state, and writes step_20.pt's successor."""
    run = shutil.copytree(short_run, tmp_path / "run")
    raw = bytearray((run / "step_20.pt").read_bytes())
    raw[len(raw) // 2: len(raw) // 2 + 64] = bytes(64)
    (run / "step_20.pt").write_bytes(bytes(raw))  # a new file: best.pt keeps the old one
    decoded = CliRunner().invoke(main, ["decode", str(run / "step_20.pt")], input="A dog.\n")
    assert decoded.exit_code == 1 and "step_20.pt: the file is damaged" in decoded.output
    result = train_cli("--resume", str(run), *sets("train.max_steps=30"))
    assert result.exit_code == 0, result.output
    assert f"resuming from {run / 'last.pt'}: step 20" in result.output
    assert read_checkpoint(run / "step_30.pt")["step"] == 30


def test_two_resumes_of_one_run_the_second_is_refused_the_first_finishes(short_run, tmp_path):
    run = shutil.copytree(short_run, tmp_path / "run")
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "translate", "train", "--resume", str(run), "--no-progress",
               *sets("train.max_steps=100")]
    seconds = within(starts=60, floor=120)
    first = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env=env, cwd=tmp_path)
    deadline = time.monotonic() + seconds
    while not (run / ".lock").read_text().strip() and time.monotonic() < deadline:
        time.sleep(0.1)
    second = subprocess.run(command, capture_output=True, text=True, env=env, cwd=tmp_path,
                            timeout=seconds)
    out, err = first.communicate(timeout=within(starts=150, floor=300))
    assert second.returncode == 1, second.stderr
    assert f"Error: {run} is in use: process {first.pid} on" in second.stderr
    assert second.stderr.count("Error:") == 1 and "Traceback" not in second.stderr
    assert first.returncode == 0, err
    assert f"best checkpoint: {run / 'best.pt'} (step " in err and " of 100, dev BLEU" in err
    assert read_checkpoint(run / "best.pt")["step"] <= 100
    steps = [r["step"] for r in train_records(run)]
    assert steps == list(range(5, 105, 5))  # one writer: no step lost or logged twice


def test_a_stale_lock_file_does_not_block(short_run, tmp_path):
    run = shutil.copytree(short_run, tmp_path / "run")
    (run / ".lock").write_text("process 999999 on a-crashed-host since 2026-01-01 00:00:00\n")
    result = train_cli("--resume", str(run), *sets("train.max_steps=25"))
    assert result.exit_code == 0, result.output


# -- tables -----------------------------------------------------------------------------------

def test_a_stray_quote_in_a_tsv_file_is_text_not_a_merged_row(tmp_path):
    rows = [f'A "quoted word {i}.\tEin Wort {i}.' if i == 3 else f"Line {i}.\tZeile {i}."
            for i in range(400)]
    (tmp_path / "train.tsv").write_text("en\tde\n" + "\n".join(rows) + "\n", encoding="utf-8")
    src, tgt = load_split(DataConfig(dataset=str(tmp_path)), "train")
    assert len(src) == len(tgt) == 400
    assert src[3] == 'A "quoted word 3.' and tgt[399] == "Zeile 399."


def test_null_like_words_in_a_csv_file_stay_text(tmp_path):
    (tmp_path / "train.csv").write_text("en,de\nNA,nan\nnull,None\n,empty\n", encoding="utf-8")
    src, tgt = load_split(DataConfig(dataset=str(tmp_path)), "train")
    assert src == ["NA", "null", ""] and tgt == ["nan", "None", "empty"]


def test_a_new_run_that_fails_in_a_folder_made_beforehand_can_be_started_again(
        recipe_path, small_data, tmp_path):
    run = tmp_path / "made_by_hand"
    run.mkdir()
    (run / "notes.txt").write_text("mine")
    failed = train_cli(str(recipe_path), "--data", str(tmp_path / "nope"), "--run-dir", str(run))
    assert failed.exit_code == 1 and "data folder not found" in failed.output
    assert [p.name for p in run.iterdir() if p.name != ".lock"] == ["notes.txt"]
    again = train_cli(str(recipe_path), "--data", str(small_data), "--run-dir", str(run),
                      *sets(*SHORT, "train.max_steps=5"))
    assert again.exit_code == 0, again.output
