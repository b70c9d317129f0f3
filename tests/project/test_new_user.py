"""A new user's path, each stumble once seen there checked fixed: decode answers at a terminal,
beam 5 by default, portable saved recipes, a full train.log, one-line errors, quiet broken pipes
and an offline hub that fails fast without leaving a run folder."""

import os
import pty
import select
import subprocess
import sys
import time
from pathlib import Path

import yaml
from click.testing import CliRunner

from helpers.limits import within
from helpers.training import TINY_OVERRIDES
from translate.cli import main
from translate.config import load_recipe, recipe_from_dict
from translate.training.checkpoints import load_run_recipe

REPO = Path(__file__).resolve().parents[2]


def sets(*items):
    return [arg for item in items for arg in ("--set", item)]


def translate_cmd(*args) -> list[str]:
    return [sys.executable, "-m", "translate", *args]


def test_decode_at_a_terminal_answers_each_line_as_typed(trained_run):
    """stdin a terminal, no --interactive: the first line's translation comes before Ctrl-D."""
    leader, follower = pty.openpty()
    proc = subprocess.Popen(translate_cmd("decode", str(trained_run.run_dir), "--beam", "1"),
                            stdin=follower, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            cwd=REPO)
    os.close(follower)
    try:
        os.write(leader, b"A dog runs in the snow.\n")
        ready, _, _ = select.select([proc.stdout], [], [], 120)
        assert ready, "no translation before end of input"
        first = proc.stdout.readline().decode()
        assert first.strip()
        os.write(leader, b"\x04")  # Ctrl-D
        proc.wait(timeout=60)
    finally:
        proc.kill()
        os.close(leader)
    assert proc.returncode == 0
    assert "type a sentence" in proc.stderr.read().decode()


def test_broken_pipe_ends_decode_quietly(trained_run, tmp_path):
    text = tmp_path / "in.en"
    text.write_text("A dog runs in the snow.\n" * 3000)
    shell = (f"{sys.executable} -m translate decode {trained_run.run_dir} --beam 1 --chunk 50 "
             f"-i {text} 2>{tmp_path / 'err'} | head -1")
    out = subprocess.run(["bash", "-c", shell], cwd=REPO, capture_output=True, text=True,
                         timeout=300)
    assert len(out.stdout.splitlines()) == 1
    assert (tmp_path / "err").read_text() == ""  # no "Error: [Errno 32] Broken pipe"


def test_decode_evaluate_and_old_runs_default_to_beam_5(trained_run, recipe_path):
    assert load_recipe(recipe_path).decode.beam == 5
    assert load_recipe(recipe_path).train.valid_beam == 1  # validation stays greedy
    old = trained_run.best_checkpoint  # a recipe saved before train.valid_beam existed:
    import torch

    saved = torch.load(old, weights_only=True)["recipe"]
    del saved["train"]["valid_beam"]
    saved["decode"]["beam"] = 1
    upgraded = recipe_from_dict(saved, "old", resolved=True)
    assert (upgraded.decode.beam, upgraded.train.valid_beam) == (5, 1)


def test_saved_recipe_runs_anywhere(small_data, recipe_path, tmp_path, monkeypatch):
    """recipe.yaml holds the tokenizer spec's keys (no path to this machine's spec file) and
    its data folder relative to the run, so it trains again and evaluates from elsewhere."""
    monkeypatch.chdir(small_data.parent)
    runner = CliRunner()
    result = runner.invoke(main, ["train", str(recipe_path), "--data", small_data.name,
                                  "--run-dir", "runs/a", *sets(*TINY_OVERRIDES,
                                                               "train.max_steps=10",
                                                               "train.eval_every=10")])
    assert result.exit_code == 0, result.output
    saved = yaml.safe_load(Path("runs/a/recipe.yaml").read_text())
    assert saved["tokenizer"]["spec"] is None and saved["tokenizer"]["vocab_size"] == 1000
    assert saved["data"]["dataset"] == "../../multi30k"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    run = small_data.parent / "runs/a"
    assert Path(load_run_recipe(run).data.dataset).resolve() == small_data.resolve()
    again = runner.invoke(main, ["train", str(run / "recipe.yaml"), "--run-dir", "b",
                                 *sets("train.max_steps=5", "train.eval_every=5")])
    assert again.exit_code == 0, again.output
    scored = runner.invoke(main, ["evaluate", str(run), "--beam", "1"])
    assert scored.exit_code == 0 and "== test_2016_flickr ==" in scored.output, scored.output


def test_train_log_holds_what_the_run_reports(trained_run):
    log = (trained_run.run_dir / "train.log").read_text()
    for line in ("training SentencePiece", "train pairs:", "M parameters", "step 300: dev loss",
                 "best checkpoint:", "== test_2016_flickr ==", "sacreBLEU signature",
                 "run folder:"):
        assert line in log, line
    assert "it/s" not in log and "\r" not in log  # no progress bars


def test_offline_hub_fails_fast_in_one_line_without_a_run_folder(recipe_path, tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "TRANSLATE_DATA")}
    env["HF_ENDPOINT"] = "http://127.0.0.1:9"  # nothing listens on the discard port
    start = time.perf_counter()
    result = subprocess.run(translate_cmd("train", str(recipe_path), "--run-dir",
                                          str(tmp_path / "run")),
                            cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    seconds = time.perf_counter() - start
    errors = [line for line in result.stderr.splitlines() if line.startswith("Error:")]
    assert result.returncode == 1 and len(errors) == 1, result.stderr
    assert "does not answer" in errors[0] and "--data PATH" in errors[0]
    assert "Traceback" not in result.stderr and "Retrying" not in result.stderr
    assert not (tmp_path / "run").exists()
    # the import of torch and datasets, not half a minute of retries
    assert seconds < within(starts=15, floor=60)


def test_a_data_path_through_a_symlink_is_kept_as_written(small_data, tmp_path, monkeypatch):
    """Data reached through a symlinked folder (../shared -> somewhere else) is saved relative
    to the run as written, not as a chain of ../ to where the link points; a run folder behind
    a symlink, where a written ../ would lead elsewhere, gets the real path instead."""
    from translate.config import data_from, data_relative_to

    project = tmp_path / "work/project"
    project.mkdir(parents=True)
    (tmp_path / "work/shared").symlink_to(small_data.parent, target_is_directory=True)
    monkeypatch.chdir(project)
    recipe = load_recipe(REPO / "recipes/multi30k/transformer.yaml",
                         [f"data.dataset=../shared/{small_data.name}"])
    saved = data_relative_to(recipe, Path("runs/a"))
    assert saved.data.dataset == f"../../../shared/{small_data.name}"
    Path("runs/a").mkdir(parents=True)
    assert data_from(saved, Path("runs/a")).data.dataset == f"../shared/{small_data.name}"
    elsewhere = tmp_path / "elsewhere/deep/runs"
    elsewhere.mkdir(parents=True)
    (project / "linked").symlink_to(elsewhere, target_is_directory=True)
    behind = data_relative_to(recipe, Path("linked/b"))  # linked/b/../.. is not the project
    (project / "linked/b").mkdir()
    assert (Path("linked/b") / behind.data.dataset).resolve() == small_data.resolve()
    assert Path(data_from(behind, Path("linked/b")).data.dataset).resolve() == \
        small_data.resolve()
