"""The files a user names, and those a run folder holds, are what they seem: writing to the one
a user is told to use (best.pt) changes no other; an output is compared with every path read
(standard input and output included) by identity; a FIFO, a device or a link where a
checkpoint should be is named at once, never read; bad weights and versions get one line."""

import os
import shutil
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import torch

from helpers.cli import cli, refused, without_blocking
from translate.checkpoint import read_checkpoint, write_checkpoint

SENTENCES = "A man rides a bike.\nTwo dogs play in the snow.\n"


def contents(folder: Path) -> dict:
    return {p.name: (os.readlink(p) if p.is_symlink() else p.read_bytes())
            for p in sorted(folder.iterdir()) if p.is_symlink() or p.is_file()}


@pytest.fixture
def run(trained_run, tmp_path) -> Path:
    """A copy of the shared tiny run: step_200.pt, step_300.pt, best.pt, last.pt."""
    return Path(shutil.copytree(trained_run.run_dir, tmp_path / "run"))


@pytest.fixture
def best_step(run) -> Path:
    """The step checkpoint whose weights best.pt holds."""
    return run / f"step_{read_checkpoint(run / 'best.pt')['step']}.pt"


def translated(checkpoint: Path, source: Path) -> str:
    result = cli("decode", checkpoint, "-i", source, "--beam", "1")
    assert result.exit_code == 0, result.output
    return result.output


# -- best.pt is a file of its own ----------------------------------------------------------------

def in_place(best: Path, other: Path, how: str) -> None:
    """Write `other`'s bytes over best.pt without replacing the file, as users' tools do."""
    if how == "cp":
        shutil.copyfile(other, best)  # opens best.pt for writing: the same inode
    elif how == "torch.save":
        torch.save(torch.load(other, weights_only=True), best)
    elif how == "rsync --inplace":
        data = other.read_bytes()
        with open(best, "r+b") as f:
            f.write(data)
            f.truncate()
    else:  # an editor that saves in place
        with open(best, "w") as f:
            f.write("notes typed into the wrong file\n")


@pytest.mark.parametrize("how", ["cp", "torch.save", "rsync --inplace", "editor"])
def test_writing_over_best_pt_in_place_changes_no_step_file(run, best_step, tmp_path, how):
    source = tmp_path / "news.en"
    source.write_text(SENTENCES)
    steps = {p.name: p.read_bytes() for p in run.glob("step_*.pt")}
    before = translated(best_step, source)
    other = tmp_path / "other.pt"
    data = read_checkpoint(run / "step_200.pt")
    write_checkpoint(other, {**data, "run_id": "f" * 32})  # another run's model
    in_place(run / "best.pt", other, how)
    assert {p.name: p.read_bytes() for p in run.glob("step_*.pt")} == steps
    assert translated(best_step, source) == before
    result = cli("average", run, "--last", 2, "-o", tmp_path / "average.pt")
    assert result.exit_code == 0, result.output  # no step file is blamed for best.pt's bytes


def test_a_step_file_rewritten_through_an_old_hard_link_names_the_cause(run, best_step,
                                                                       tmp_path):
    """Runs written before best.pt became a file of its own hold it as a hard link: a write to
    best.pt rewrote the step file too, and using that file says so."""
    best = run / "best.pt"
    best.unlink()
    os.link(best_step, best)
    other = tmp_path / "other.pt"
    write_checkpoint(other, {**read_checkpoint(run / "step_200.pt"), "run_id": "f" * 32})
    in_place(best, other, "cp")
    source = tmp_path / "news.en"
    source.write_text(SENTENCES)
    says = f"its name says step {best_step.stem[5:]} but it holds step 200; it is the same " \
           f"file as best.pt (a hard link), so a write to best.pt changed it too"
    refused(cli("decode", best_step, "-i", source), says)
    refused(cli("average", run, "--last", 2, "-o", tmp_path / "average.pt"), says)


def test_new_best_and_step_files_never_share_an_inode(run):
    names = [p for p in run.glob("*.pt")]
    assert len({p.stat().st_ino for p in names}) == len(names)
    assert all(p.stat().st_nlink == 1 for p in names)


# -- decode's output against everything it reads -------------------------------------------------

def decode_process(*args, stdin=None, stdout=subprocess.PIPE):
    return subprocess.run([sys.executable, "-m", "translate", "decode", *map(str, args)],
                          stdin=stdin, stdout=stdout, stderr=subprocess.PIPE, timeout=300,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})


def test_decode_refuses_an_output_that_is_its_standard_input(run, tmp_path):
    source = tmp_path / "news.en"
    source.write_text(SENTENCES)
    for output in (source, tmp_path / "hard.en", tmp_path / "soft.en"):
        if output.name == "hard.en":
            os.link(source, output)
        elif output.name == "soft.en":
            output.symlink_to(source)
        with open(source, "rb") as stdin:
            done = decode_process(run, "-o", output, stdin=stdin)
        assert done.returncode == 1
        assert done.stderr.decode().strip().splitlines() == [
            f"Error: the output {output} is standard input: translating into it would destroy "
            f"what is being read; choose another -o"]
        assert source.read_text() == SENTENCES


@pytest.mark.parametrize("mode", ["wb", "ab"])
def test_decode_refuses_standard_output_that_is_its_input_file(run, tmp_path, mode):
    """`> news.en` has emptied it already; `>> news.en` would read its own translations back."""
    source = tmp_path / "news.en"
    source.write_text(SENTENCES)
    with open(source, mode) as stdout:
        done = decode_process(run, "-i", source, stdout=stdout)
    assert done.returncode == 1
    assert "standard output is the input file" in done.stderr.decode()
    assert source.read_text() == ("" if mode == "wb" else SENTENCES)


def test_decode_writes_into_standard_output_named_dev_stdout(run, tmp_path):
    source, log = tmp_path / "news.en", tmp_path / "job.log"
    source.write_text(SENTENCES)
    log.write_text("earlier lines\n")
    with open(log, "ab") as stdout:
        done = decode_process(run, "-i", source, "-o", "/dev/stdout", "--beam", "1",
                              stdout=stdout)
    assert done.returncode == 0, done.stderr.decode()
    lines = log.read_text().splitlines()
    assert lines[0] == "earlier lines" and len(lines) == 3  # appended to, never replaced


@pytest.mark.parametrize("output, says", [
    ("best.pt", "is the checkpoint"),
    ("hard link to best", "is the checkpoint"),
    ("last.pt", "is the run's last.pt: writing there would destroy it"),
    ("step_200.pt", "is the run's step_200.pt: writing there would destroy it"),
    ("socket", "is a socket; give a file, a FIFO or a device to write"),
])
def test_decode_refuses_an_output_that_is_a_checkpoint_or_no_file(run, tmp_path, output, says):
    source = tmp_path / "news.en"
    source.write_text(SENTENCES)
    if output == "hard link to best":
        target = tmp_path / "translations.txt"
        os.link(run / "best.pt", target)
    elif output == "socket":
        import socket

        target = tmp_path / "s"
        server = socket.socket(socket.AF_UNIX)
        server.bind(str(target))
    else:
        target = run / output
    before = contents(run)
    refused(cli("decode", run, "-i", source, "-o", target), says)
    assert contents(run) == before


def test_decode_writes_through_a_link_and_into_a_fifo_or_device(run, tmp_path):
    source = tmp_path / "news.en"
    source.write_text(SENTENCES)
    mine, link = tmp_path / "mine.de", tmp_path / "link.de"
    mine.write_text("old\n")
    link.symlink_to(mine)
    assert cli("decode", run, "-i", source, "-o", link, "--beam", "1").exit_code == 0
    assert link.is_symlink() and len(mine.read_text().splitlines()) == 2
    fifo, read = tmp_path / "fifo", []
    os.mkfifo(fifo)
    reader = threading.Thread(target=lambda: read.append(fifo.read_text()), daemon=True)
    reader.start()
    assert cli("decode", run, "-i", source, "-o", fifo, "--beam", "1").exit_code == 0
    reader.join(60)
    assert len(read[0].splitlines()) == 2 and stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert cli("decode", run, "-i", source, "-o", os.devnull).exit_code == 0
    assert stat.S_ISCHR(os.stat(os.devnull).st_mode)


@pytest.mark.parametrize("command", ["attention", "curve"])
@pytest.mark.parametrize("target", ["best.pt", "metrics.jsonl", "recipe.yaml"])
def test_a_figure_never_replaces_a_file_that_is_not_an_image(run, command, target):
    before = contents(run)
    args = ["--text", "A man rides a bike."] if command == "attention" else []
    refused(cli(command, run, *args, "-o", run / target), "exists and is not an image")
    assert contents(run) == before


# -- special files where a checkpoint should be ---------------------------------------------------


@pytest.mark.parametrize("make, says", [
    ("fifo", "is a FIFO (named pipe), not a checkpoint"),
    ("link to /dev/zero", "is a character device, not a checkpoint"),
    ("link loop", "is a symbolic link to loop.pt (a loop), not a checkpoint"),
    ("dangling link", "is a symbolic link to nowhere.pt (which does not exist)"),
    ("empty", "the file is empty"),
])
def test_a_special_file_named_as_a_checkpoint_is_named_at_once(tmp_path, make, says):
    path = tmp_path / "loop.pt"
    if make == "fifo":
        os.mkfifo(path)
    elif make == "link to /dev/zero":
        path.symlink_to("/dev/zero")
    elif make == "link loop":
        path.symlink_to("loop.pt")
    elif make == "dangling link":
        path.symlink_to("nowhere.pt")
    else:
        path.write_bytes(b"")
    for command in (["decode", path], ["evaluate", path], ["export", path, "-o",
                                                           tmp_path / "out"]):
        result = without_blocking(lambda: cli(*command, input=""))
        refused(result, says)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("make", ["fifo", "link out", "link to /dev/zero"])
def test_a_run_folders_best_pt_is_not_followed_out_or_read_if_special(run, tmp_path, make):
    best = run / "best.pt"
    elsewhere = tmp_path / "elsewhere.pt"
    shutil.copyfile(best, elsewhere)
    best.unlink()
    if make == "fifo":
        os.mkfifo(best)
        says = "best.pt is a FIFO (named pipe), not a checkpoint"
    elif make == "link out":
        best.symlink_to(elsewhere)
        says = "best.pt is a symbolic link to"
    else:
        best.symlink_to("/dev/zero")
        says = "best.pt is a symbolic link to /dev/zero"
    refused(without_blocking(lambda: cli("decode", run, input="")), says)


@pytest.mark.parametrize("make, says", [
    ("fifo", "run.json is a FIFO (named pipe), not a run.json"),
    ("deep", "run.json cannot be read (maximum recursion depth"),
    ("bad id", "its run_id is '../../x', not 32 hex digits"),
    ("link", "run.json is a symbolic link to"),
])
def test_a_run_json_that_is_special_or_deep_is_refused_without_blocking(run, tmp_path, make,
                                                                       says):
    path = run / "run.json"
    path.unlink()
    if make == "fifo":
        os.mkfifo(path)
    elif make == "deep":
        path.write_text("[" * 100_000 + "]" * 100_000)
    elif make == "bad id":
        path.write_text('{"run_id": "../../x"}')
    else:
        (tmp_path / "their.json").write_text('{"run_id": "' + "a" * 32 + '"}')
        path.symlink_to(tmp_path / "their.json")
    before = contents(run)
    refused(without_blocking(lambda: cli("train", "--resume", run, "--no-progress")), says)
    assert {k: v for k, v in contents(run).items() if k != ".lock"} == \
        {k: v for k, v in before.items() if k != ".lock"}


# -- one line for what a checkpoint holds ----------------------------------------------------------

@pytest.mark.parametrize("change, says", [
    (lambda d: d["model"]["output.weight"].view(-1).__setitem__(3, float("nan")),
     "holds NaN or infinite values"),
    (lambda d: d["model"]["output.weight"].view(-1).__setitem__(3, float("-inf")),
     "holds NaN or infinite values"),
    (lambda d: d.update(format_version="1"), "its format_version is '1', not a version number"),
    (lambda d: d.update(format_version=True), "its format_version is True"),
    (lambda d: d.update(format_version=-3), "its format_version is -3"),
    (lambda d: d.update(format_version=99), "format version 99 is newer than this translate"),
    (lambda d: d.update(step="12"), "its step is '12', not a whole number"),
    (lambda d: d.update(step=1.5), "its step is 1.5, not a whole number"),
])
def test_a_checkpoint_with_bad_weights_or_fields_is_one_line(run, tmp_path, change, says):
    data = read_checkpoint(run / "best.pt")
    change(data)
    path = tmp_path / "bad.pt"
    write_checkpoint(path, data)
    refused(cli("decode", path, input="A man.\n"), says)
    refused(cli("attention", path, "--text", "A man.", "-o", tmp_path / "a.png"), says)


@pytest.mark.parametrize("split, says", [
    ("validation", "the dev split has no usable pairs (0 read)"),
    ("test_2016_flickr", "the test_2016_flickr split holds no sentences"),
])
def test_an_empty_dev_or_test_split_is_refused_before_training(small_data, recipe_path,
                                                              tmp_path, split, says):
    from helpers.training import TINY_OVERRIDES

    data = Path(shutil.copytree(small_data, tmp_path / "data"))
    (data / f"{split}.jsonl").write_text("")
    sets = [a for o in [*TINY_OVERRIDES, "train.max_steps=5"] for a in ("--set", o)]
    refused(cli("train", recipe_path, "--data", data, "--run-dir", tmp_path / "run",
                "--no-progress", *sets), says)
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("make, says", [
    ("fifo", "step_300.pt is a FIFO (named pipe), not a checkpoint"),
    ("link out", "step_300.pt is a symbolic link to"),
    ("link to /dev/zero", "step_300.pt is a symbolic link to /dev/zero"),
])
def test_average_never_reads_a_step_file_that_is_special_or_a_link(run, tmp_path, make, says):
    step = run / "step_300.pt"
    elsewhere = tmp_path / "elsewhere.pt"
    shutil.copyfile(step, elsewhere)
    step.unlink()
    if make == "fifo":
        os.mkfifo(step)
    elif make == "link out":
        step.symlink_to(elsewhere)
    else:
        step.symlink_to("/dev/zero")
    refused(without_blocking(lambda: cli("average", run, "--last", 2, "-o", tmp_path / "a.pt")), says)
    assert not (tmp_path / "a.pt").exists()
