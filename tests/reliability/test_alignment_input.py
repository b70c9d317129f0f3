"""Alignments against hostile input: a gold file that is not one (wrong line count, links outside
the sentences, broken or negative links, digits of other scripts, bytes that are not UTF-8, a
folder, a FIFO, a device behind a link, a file too big, links counted from 1 read as pharaoh)
is a ValueError or one `Error:` line naming the file or the line, and so is an empty gold set;
`translate decode --alignments` refuses a file that would overwrite the translations, the input
or the checkpoint, before anything is written; a reading out of the model's range is one line,
and so is a reading asked for without alignments to read. Characters that SentencePiece drops
or turns into spaces never shift the words links name: words are what `str.split()` separates."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from helpers.cli import cli, refused, without_blocking
from translate.analysis.gold import MAX_GOLD_BYTES, read_gold
from translate.analysis.align_score import read_gold_set
from translate.cli import main
from translate.markup import strip

GOLD = Path(__file__).resolve().parents[2] / "gold/multi30k"

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
    with pytest.raises(ValueError, match=r"latin.links: line 2 is not valid UTF-8"):
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


def test_a_gold_file_behind_a_link_is_read_and_one_too_big_is_refused_unread(tmp_path):
    real = tmp_path / "real.links"
    real.write_text("0-0\n1-1\n", encoding="utf-8")
    (tmp_path / "linked.links").symlink_to(real)
    assert len(read_gold(tmp_path / "linked.links", "pharaoh", WORDS)) == 2
    huge = tmp_path / "huge.links"
    with open(huge, "wb") as f:
        f.truncate(MAX_GOLD_BYTES + 1)  # sparse: nothing written, nothing read
    with pytest.raises(ValueError, match=rf"huge.links holds {MAX_GOLD_BYTES + 1:,} bytes, more "
                                         rf"than a gold alignment file may"):
        read_gold(huge, "pharaoh", WORDS)


@pytest.mark.parametrize("which", ["en", "de", "links"])
@pytest.mark.parametrize("kind", ["fifo", "zero"])
def test_a_gold_file_that_is_a_fifo_or_a_device_is_one_line_without_blocking(
        trained_run, tmp_path, which, kind):
    says = {"fifo": "is a FIFO (named pipe), not a gold",
            "zero": "is a character device, not a gold"}[kind]
    prefix = gold_set(tmp_path, "A dog.\n", "Ein Hund.\n", "0-0 1-1\n")
    path = tmp_path / f"g.{which}"
    path.unlink()
    if kind == "fifo":
        os.mkfifo(path)
    else:
        path.symlink_to("/dev/zero")  # a link to a device: followed, then refused
    result = without_blocking(lambda: cli("align-score", trained_run.run_dir, prefix, "--device",
                                          "cpu"))
    refused(result, f"{path} {says}")


def test_an_empty_gold_set_is_one_line_as_the_set_scored_or_chosen_on(trained_run, tmp_path):
    prefix = gold_set(tmp_path, "", "", "")
    says = f"the gold set {prefix} holds no sentence pairs"
    refused(cli("align-score", trained_run.run_dir, prefix, "--device", "cpu"), says)
    refused(cli("align-score", trained_run.run_dir, GOLD / "test", "--choose-on", prefix,
                "--device", "cpu"), says)


def test_links_counted_from_one_are_refused_as_pharaoh_and_scored_as_talp(trained_run, tmp_path):
    prefix = gold_set(tmp_path, "A dog runs.\nTwo men sit on a bench.\n",
                      "Ein Hund rennt.\nZwei Männer sitzen auf einer Bank.\n",
                      "1-1 2-2 3-3\n1-1 2-2 3-3 4-4 5p5 6-6\n")  # talp: from 1
    result = cli("align-score", trained_run.run_dir, prefix, "--device", "cpu")
    refused(result, "g.links: none of its 9 links names a sentence's word 0: its indices look "
                    "counted from 1; if so, pass --format talp")
    result = cli("align-score", trained_run.run_dir, prefix, "--device", "cpu", "--format",
                 "talp")
    assert result.exit_code == 0, result.output
    for part, pairs in (("dev", 50), ("test", 100)):  # the project's own set counts from 0
        assert len(read_gold_set(GOLD / part, "en", "de").gold) == pairs


def test_a_reading_without_alignments_to_read_is_refused_before_anything_is_done(source,
                                                                               tmp_path):
    out = tmp_path / "out.de"
    for option, value in (("--align-layer", "0"), ("--align-head", "1")):
        result = cli("decode", tmp_path / "no-such-checkpoint.pt", "-i", source, "-o", out,
                     option, value)
        refused(result, f"{option} says where alignments are read: give it with "
                        f"--alignments FILE or --markup", code=2)
        assert not out.exists()


ODD = {"DEL": "\x7f", "zero-width space": "\u200b", "BOM": "\ufeff", "unit separator": "\x1f"}


def odd_lines(odd: str) -> list[str]:
    """Five-word lines with `odd` inside word 1, as a word of its own, first and last."""
    return [f"A dog{odd}s runs on grass.", f"A {odd} dog runs home.",
            f"{odd}Two men sit on benches.", f"A girl eats an apple{odd}"]


@pytest.mark.parametrize("name", ODD)
def test_odd_characters_never_shift_the_words_links_and_markup_count(trained_run, tmp_path,
                                                                     name):
    """Each source word with a piece gets exactly one link (the default reading), numbered as
    `str.split()` numbers it; a word that is only a character SentencePiece drops gets none.
    A unit separator is whitespace to `str.split()`: "dog\x1fs" is two words there."""
    odd = ODD[name]
    lines = odd_lines(odd)
    source, out, links = tmp_path / "in.en", tmp_path / "out.de", tmp_path / "out.align"
    source.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    result = cli("decode", trained_run.run_dir, "-i", source, "-o", out, "--alignments", links,
                 "--device", "cpu", "--precision", "fp32")
    assert result.exit_code == 0, result.output
    outputs = out.read_text(encoding="utf-8").splitlines()
    found_links = links.read_text(encoding="utf-8").splitlines()
    for line, output, found in zip(lines, outputs, found_links):
        pairs = [tuple(map(int, link.split("-"))) for link in found.split()]
        words = line.split()
        alone = {i for i, word in enumerate(words) if word == odd}  # no piece: never linked
        assert sorted(i for i, _ in pairs) == [i for i in range(len(words)) if i not in alone], \
            (line, found)
        assert all(j < len(output.split()) for _, j in pairs), (output, found)
    # markup counts the same words: the tag on "runs" (word 2 of the first line) lands on the
    # output word linked to word 2
    tagged = tmp_path / "tagged.en"
    tagged.write_text(f"A dog{odd}s <b>runs</b> on grass.\n", encoding="utf-8")
    result = cli("decode", trained_run.run_dir, "-i", tagged, "-o", out, "--alignments", links,
                 "--markup", "--device", "cpu", "--precision", "fp32")
    assert result.exit_code == 0, result.output
    marked = strip(out.read_text(encoding="utf-8").splitlines()[0])
    runs = strip(f"A dog{odd}s <b>runs</b> on grass.").tags[0].first
    pairs = [tuple(map(int, link.split("-"))) for link in links.read_text().split()]
    assert [(t.first, t.last) for t in marked.tags] == \
        [(min(j for i, j in pairs if i == runs), max(j for i, j in pairs if i == runs))]
