"""Alignments against hostile input: a gold file that is not one (wrong line count, links outside
the sentences, broken or negative links, digits of other scripts, bytes that are not UTF-8, a
folder, a FIFO) is a ValueError or one `Error:` line naming the line; `translate decode
--alignments` refuses a file that would overwrite the translations, the input or the
checkpoint, before anything is written; a reading out of the model's range is one line."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from translate.alignment import read_gold
from translate.cli import main

WORDS = [(3, 3), (2, 4)]


@pytest.mark.parametrize("text, message", [
    ("0-0\n", "1 lines of links for 2 sentence pairs"),
    ("0-0\n0-0\n0-0\n", "3 lines of links for 2 sentence pairs"),
    ("0-3\n0-0\n", ":1: link 0-3 is outside the pair's 3 source and 3 target words"),
    ("0-0\n2-0\n", ":2: link 2-0 is outside"),
    ("0-0\n-1-0\n", ":2: '-1-0' is not a link"),
    ("0-0 1\n0-0\n", ":1: '1' is not a link"),
    ("0-0 1-\n0-0\n", ":1: '1-' is not a link"),
    ("0-0 a-b\n0-0\n", ":1: 'a-b' is not a link"),
    ("0-0 1p\n0-0\n", ":1: '1p' is not a link"),
    ("0-0 1s1\n0-0\n", ":1: '1s1' is not a link"),
    ("0-0 1-1-1\n0-0\n", ":1: '1-1-1' is not a link"),
    ("0-0 ١-٢\n0-0\n", ":1: '١-٢' is not a link"),  # Arabic-Indic digits
    ("0-0 ¹-²\n0-0\n", ":1: '¹-²' is not a link"),  # superscripts, which isdigit() accepts
])
def test_a_gold_file_that_is_not_one_is_refused_by_line(tmp_path, text, message):
    gold = tmp_path / "gold.links"
    gold.write_text(text, encoding="utf-8")
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        read_gold(gold, "pharaoh", WORDS)


def test_talp_counts_from_one_and_a_zero_there_is_refused(tmp_path):
    gold = tmp_path / "gold.talp"
    gold.write_text("0-1\n1-1\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r":1: link 0-1 counts from 1"):
        read_gold(gold, "talp", WORDS)
    with pytest.raises(ValueError, match="gold format 'moses': use one of pharaoh, talp"):
        read_gold(gold, "moses", WORDS)


def test_bytes_a_folder_and_a_fifo_are_refused_by_name(tmp_path):
    latin = tmp_path / "latin.links"
    latin.write_bytes(b"0-0\n\xe9\n")
    with pytest.raises(ValueError, match=r"latin.links: not UTF-8 text \(byte 4\)"):
        read_gold(latin, "pharaoh", WORDS)
    with pytest.raises(OSError, match="folder"):
        read_gold(tmp_path, "pharaoh", WORDS)
    fifo = tmp_path / "fifo.links"
    os.mkfifo(fifo)
    with pytest.raises(OSError, match="FIFO"):
        read_gold(fifo, "pharaoh", WORDS)  # refused before a byte is read: no hang


def gold_set(folder: Path, en: str, de: str, links: str) -> str:
    for suffix, text in (("en", en), ("de", de), ("links", links)):
        (folder / f"g.{suffix}").write_text(text, encoding="utf-8")
    return str(folder / "g")


@pytest.mark.parametrize("en, de, links, message", [
    ("A dog.\nA cat.\n", "Ein Hund.\n", "0-0\n", "g.en has 2 lines and "),
    ("A dog.\n \n", "Ein Hund.\nEine Katze.\n", "0-0\n0-0\n", "pair 2 has an empty sentence"),
    ("A dog.\n", "Ein Hund.\n", "0-0 5-0\n", ":1: link 5-0 is outside"),
])
def test_a_gold_set_whose_files_disagree_is_one_error_line(trained_run, tmp_path, en, de, links,
                                                           message):
    prefix = gold_set(tmp_path, en, de, links)
    result = CliRunner().invoke(main, ["align-score", str(trained_run.run_dir), prefix,
                                       "--device", "cpu"])
    assert result.exit_code == 1 and result.output.count("\n") == 1
    assert result.output.startswith("Error: ") and message in result.output


@pytest.fixture
def source(tmp_path) -> Path:
    path = tmp_path / "in.en"
    path.write_text("A dog runs.\nTwo men sit on a bench.\n", encoding="utf-8")
    return path


def decode(*args: str):
    return CliRunner().invoke(main, ["decode", *args, "--device", "cpu", "--precision", "fp32"])


def test_decode_writes_a_line_of_links_per_output_line(trained_run, source, tmp_path):
    out, links = tmp_path / "out.de", tmp_path / "out.align"
    result = decode(str(trained_run.run_dir), "-i", str(source), "-o", str(out),
                    "--alignments", str(links), "--beam", "3", "--nbest", "2")
    assert result.exit_code == 0, result.output
    outputs = out.read_text(encoding="utf-8").splitlines()
    lines = links.read_text(encoding="utf-8").splitlines()
    assert len(outputs) == len(lines) == 4
    for output, line in zip(outputs, lines):
        text = output.split(" ||| ")[1]
        for link in line.split():
            i, j = map(int, link.split("-"))
            assert j < len(text.split())


@pytest.mark.parametrize("target, message", [
    ("output", "would be written into the translations"),
    ("input", "the input"),
    ("-", "would be written into the translations"),
    ("checkpoint", "the checkpoint"),
    ("folder", "is a directory"),
])
def test_decode_refuses_an_alignments_file_that_would_destroy_something(
        trained_run, source, tmp_path, target, message):
    out = tmp_path / "out.de"
    out.write_text("kept\n", encoding="utf-8")
    path = {"output": out, "input": source, "-": "-", "folder": tmp_path,
            "checkpoint": trained_run.run_dir / "best.pt"}[target]
    before = {p: p.read_bytes() for p in (out, source, trained_run.run_dir / "best.pt")}
    result = decode(str(trained_run.run_dir), "-i", str(source), "-o", str(out),
                    "--alignments", str(path))
    assert result.exit_code != 0 and message in result.output, result.output
    assert "Traceback" not in result.output
    assert {p: p.read_bytes() for p in before} == before  # nothing touched


def test_a_reading_the_model_does_not_have_is_one_line_and_writes_nothing(trained_run, source,
                                                                           tmp_path):
    out, links = tmp_path / "out.de", tmp_path / "out.align"
    for args, message in ((["--align-layer", "7"], "layer 7: the model has 2 cross-attention"),
                          (["--align-head", "9"], "head 9: the model's attention has 4 heads")):
        result = decode(str(trained_run.run_dir), "-i", str(source), "-o", str(out),
                        "--alignments", str(links), *args)
        assert result.exit_code == 1 and message in result.output, result.output
        assert not out.exists() and not links.exists()
