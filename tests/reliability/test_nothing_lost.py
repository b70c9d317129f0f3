"""Nothing a user had is lost by a command that fails or is misused: decode's output file."""

import os

from click.testing import CliRunner

from translate.cli import main

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
