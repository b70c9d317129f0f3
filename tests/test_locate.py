"""`translate.locate`: what a model path is and which files are the model's; no command writes
over one of them, or over a file it reads, under any name (each file checked by its hash)."""

import hashlib
import os
import shutil
from pathlib import Path

import pytest

from helpers.cli import cli, refused
from translate.export import export
from translate.locate import OutputClashError, check_output_free, locate

GOLD = Path(__file__).resolve().parents[1] / "gold" / "multi30k"
SENTENCES = "A man rides a bike.\nTwo dogs play in the snow.\n"
RUN_OWN = ("spm.model", "recipe.yaml", "run.json", "train.log", "metrics.jsonl", "last.pt")
EXPORT_OWN = ("model.safetensors", "config.json", "spm.model")


def hashes(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.iterdir()) if p.is_file()}


@pytest.fixture
def run(trained_run, tmp_path) -> Path:
    return Path(shutil.copytree(trained_run.run_dir, tmp_path / "run"))


@pytest.fixture(scope="module")
def exported(trained_run, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("export") / "model"
    export(trained_run.run_dir, "inference", out)
    return out


@pytest.fixture
def source(tmp_path) -> Path:
    path = tmp_path / "news.en"
    path.write_text(SENTENCES)
    return path


def test_locate_tells_a_run_a_checkpoint_and_an_export_apart(run, exported, tmp_path):
    folder = locate(run)
    assert (folder.kind, folder.folder) == ("run folder", run)
    assert folder.files["the checkpoint"] == run / "best.pt"
    assert {p.name for p in folder.files.values()} >= {*RUN_OWN, "best.pt"}
    inside = locate(run / "last.pt")
    assert (inside.kind, inside.folder) == ("checkpoint", run)
    assert inside.files["the checkpoint"] == run / "last.pt"
    alone = tmp_path / "alone.pt"
    shutil.copy(run / "best.pt", alone)
    assert locate(alone).folder is None and list(locate(alone).files.values()) == [alone]
    export_ = locate(exported)
    assert export_.kind == "exported model"
    assert sorted(p.name for p in export_.files.values()) == sorted(EXPORT_OWN)


@pytest.mark.parametrize("name", RUN_OWN)
def test_decode_never_writes_over_a_file_of_the_run(run, source, name):
    before = hashes(run)
    refused(cli("decode", run, "-i", source, "-o", run / name), f"is the run's {name}")
    refused(cli("decode", run / "step_300.pt", "-i", source, "-o", source.parent / "x.de",
                "--alignments", run / name), f"--alignments {run / name} is the run's {name}")
    assert hashes(run) == before


@pytest.mark.parametrize("name", EXPORT_OWN)
def test_decode_never_writes_over_a_file_of_the_export(exported, source, name):
    before = hashes(exported)
    refused(cli("decode", exported, "-i", source, "-o", exported / name),
            f"is the exported model's {name}")
    assert hashes(exported) == before


def test_a_link_to_a_run_file_is_that_file(run, source, tmp_path):
    (tmp_path / "translations.de").symlink_to(run / "train.log")
    os.link(run / "spm.model", tmp_path / "hard.de")
    before = hashes(run)
    for output in ("translations.de", "hard.de"):
        refused(cli("decode", run, "-i", source, "-o", tmp_path / output), "is the run's")
    assert hashes(run) == before


def test_a_name_the_run_writes_is_refused_before_it_exists(run, source):
    (run / "train.log").unlink()
    refused(cli("decode", run, "-i", source, "-o", run / "train.log"),
            "is a name the run in")
    assert not (run / "train.log").exists()
    assert cli("decode", run, "-i", source, "-o", run / "news.de", "--beam", "1").exit_code == 0
    assert len((run / "news.de").read_text().splitlines()) == 2  # a new file of the user's


def test_align_score_json_never_writes_over_what_it_reads(run, tmp_path):
    gold = tmp_path / "gold"
    gold.mkdir()
    for suffix in ("en", "de", "links"):
        shutil.copy(GOLD / f"dev.{suffix}", gold / f"dev.{suffix}")
    before, gold_before = hashes(run), hashes(gold)
    for target, says in ((run / "best.pt", "is the checkpoint"),
                         (run / "metrics.jsonl", "is the run's metrics.jsonl"),
                         (gold / "dev.links", "is the gold file")):
        refused(cli("align-score", run, gold / "dev", "--json", target), says)
    assert hashes(run) == before and hashes(gold) == gold_before


def test_curve_json_never_writes_over_a_metrics_log(run):
    before = hashes(run)
    refused(cli("curve", run, "-o", run.parent / "c.png", "--json", run / "metrics.jsonl"),
            "is the run's metrics.jsonl")
    assert hashes(run) == before


def test_average_never_writes_over_a_run_file(run):
    before = hashes(run)
    refused(cli("average", run, "--last", "2", "-o", run / "train.log", "--force"),
            "is the run's train.log")
    assert hashes(run) == before
    (run / "recipe.yaml").rename(run / "kept.yaml")
    refused(cli("average", run, "--last", "2", "-o", run / "recipe.yaml"),
            "is a name the run in")
    assert not (run / "recipe.yaml").exists()


def test_check_output_free_compares_with_every_file_read(tmp_path):
    read = tmp_path / "gold.links"
    read.write_text("0-0\n")
    with pytest.raises(OutputClashError, match="is the gold links"):
        check_output_free(read, reads={"the gold links": read}, option="--json")
    check_output_free(tmp_path / "new.json", reads={"the gold links": read})
