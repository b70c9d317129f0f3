"""The run folder (translate/run_folder.py): its run.json, its claim and its lock. A user's files
survive `average`, `train --overwrite` and a hostile `.lock`: each misuse is refused in one line
with every byte of the folder unchanged; what is allowed touches only what the command itself
wrote. (Marked `reliability`: misuse, beside its room.)"""

import json
import os
import stat
import shutil

import pytest

from helpers.cli import cli, refused, sets
from helpers.training import TINY_OVERRIDES
from translate.checkpoint import read_checkpoint, write_checkpoint

pytestmark = pytest.mark.reliability

SHORT = [*TINY_OVERRIDES, "train.eval_every=10", "train.log_every=5", "train.keep_last=5",
         "data.test_splits=[test_2016_flickr]"]


def contents(folder) -> dict:
    """Every file under `folder` (links as their targets' names), byte for byte."""
    return {str(p.relative_to(folder)): (os.readlink(p) if p.is_symlink() else p.read_bytes())
            for p in sorted(folder.rglob("*")) if p.is_symlink() or p.is_file()}


@pytest.fixture(scope="module")
def short_run(recipe_path, small_data, tmp_path_factory):
    """A run of 30 steps: step_10.pt, step_20.pt, step_30.pt, best.pt, its test translation."""
    run = tmp_path_factory.mktemp("short") / "run"
    result = cli("train", recipe_path, "--data", small_data, "--run-dir", run, "--no-progress",
                 *sets(*SHORT, "train.max_steps=30"))
    assert result.exit_code == 0, result.output
    return run


@pytest.fixture
def run(short_run, tmp_path):
    return shutil.copytree(short_run, tmp_path / "run", symlinks=True)


# -- average ----------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["best.pt", "last.pt", "step_30.pt", "step_99.pt"])
def test_average_never_writes_a_run_checkpoint_name(run, name):
    before = contents(run)
    for force in ([], ["--force"]):
        refused(cli("average", run, "--last", 2, "-o", run / name, *force),
                "is a name a run gives its own checkpoints")
    assert contents(run) == before


def test_average_replaces_only_an_earlier_average_and_only_with_force(run, tmp_path):
    mine = tmp_path / "mine.pt"
    mine.write_bytes(b"my own bytes")
    refused(cli("average", run, "--last", 2, "-o", mine), "exists: give another -o, or --force")
    refused(cli("average", run, "--last", 2, "-o", mine, "--force"),
            "is not an average that translate average wrote")
    link = tmp_path / "link.pt"
    link.symlink_to(mine)
    refused(cli("average", run, "--last", 2, "-o", link), "exists")
    refused(cli("average", run, "--last", 2, "-o", link, "--force"), "is a symbolic link")
    refused(cli("average", run, "--last", 2, "-o", tmp_path), "is a directory", code=2)
    assert mine.read_bytes() == b"my own bytes"
    average = tmp_path / "average.pt"
    assert cli("average", run, "--last", 3, "-o", average).exit_code == 0
    again = cli("average", run, "--last", 3, "-o", average)  # the same average: written again
    assert again.exit_code == 0, again.output
    refused(cli("average", run, "--last", 2, "-o", average), "exists: give another -o")
    refused(cli("average", run, "--last", 3, "--raw", "-o", average), "exists: give another -o")
    result = cli("average", run, "--last", 2, "-o", average, "--force")
    assert result.exit_code == 0, result.output
    assert read_checkpoint(average)["averaged"] == ["step_20.pt", "step_30.pt"]


@pytest.mark.parametrize("make", ["fifo", "device", "hard link to a step", "link to best"])
def test_average_output_that_is_not_a_file_of_its_own_is_refused(run, tmp_path, make):
    """Not a regular file (a FIFO, a device node: --force as root would put a regular file in
    its place), or another name for one of the run's checkpoints."""
    out = tmp_path / "out.pt"
    if make == "fifo":
        os.mkfifo(out)
    elif make == "device":
        try:
            os.mknod(out, 0o600 | stat.S_IFCHR, os.makedev(1, 3))  # what /dev/null is
        except PermissionError:
            pytest.skip("making a device node needs root")
    elif make == "hard link to a step":
        os.link(run / "step_20.pt", out)
    else:
        out.symlink_to(run / "best.pt")
    before = contents(run)
    says = {"fifo": "is a FIFO (named pipe); --force replaces only an earlier average",
            "device": "is a character device; --force replaces only an earlier average",
            "hard link to a step": "is the run's step_20.pt under another name",
            "link to best": "is the run's best.pt under another name"}[make]
    refused(cli("average", run, "--last", 2, "-o", out, "--force"), says)
    assert contents(run) == before
    assert stat.S_IFMT(os.lstat(out).st_mode) == {"fifo": stat.S_IFIFO, "device": stat.S_IFCHR,
                                                   "link to best": stat.S_IFLNK}.get(
        make, stat.S_IFREG)


def test_an_average_carries_the_run_id_and_resume_goes_on_beside_it(run):
    result = cli("average", run, "--last", 3)
    assert result.exit_code == 0, result.output
    own = json.loads((run / "run.json").read_text())["run_id"]
    assert read_checkpoint(run / "average_last3.pt")["run_id"] == own
    resumed = cli("train", "--resume", run, "--no-progress", *sets("train.max_steps=35"))
    assert resumed.exit_code == 0, resumed.output
    assert (run / "average_last3.pt").exists()


def rewrite(path, change) -> None:
    data = read_checkpoint(path)
    change(data)
    write_checkpoint(path, data)


@pytest.mark.parametrize("damage, says", [
    ("other run", "belongs to another run"),
    ("copied step", "its name says step 30 but it holds step 20"),
    ("nan weight", "holds NaN or infinite values"),
])
def test_average_refuses_inputs_it_cannot_trust(run, damage, says):
    if damage == "other run":
        rewrite(run / "step_20.pt", lambda d: d.update(run_id="f" * 32))
    elif damage == "copied step":
        (run / "step_30.pt").unlink()
        shutil.copy(run / "step_20.pt", run / "step_30.pt")
    else:
        rewrite(run / "step_30.pt",
                lambda d: d["model"]["output.weight"].view(-1).__setitem__(7, float("nan")))
    before = contents(run)
    refused(cli("average", run, "--last", 2), says)
    assert contents(run) == before


# -- train --overwrite ------------------------------------------------------------------------

def test_overwrite_deletes_only_what_the_run_wrote(run, recipe_path, small_data):
    (run / "notes.pt").write_bytes(b"my tensors")
    (run / "mine.hyp.txt").write_text("my hypotheses\n")
    (run / "tensorboard_mine").mkdir()
    kept = {n: (run / n).read_bytes() for n in ("notes.pt", "mine.hyp.txt")}
    result = cli("train", recipe_path, "--data", small_data, "--run-dir", run, "--overwrite",
                 "--no-progress", *sets(*SHORT, "train.max_steps=10"))
    assert result.exit_code == 0, result.output
    assert {n: (run / n).read_bytes() for n in kept} == kept
    assert (run / "tensorboard_mine").is_dir()
    assert not (run / "step_30.pt").exists()  # the old run's own checkpoints are gone, and
    assert read_checkpoint(run / "step_10.pt")["step"] == 10  # the new run wrote its own


@pytest.mark.parametrize("name, make, says", [
    ("step_5.pt", "foreign", "not this folder's run's checkpoint"),
    ("step_10.pt", "foreign", "not this folder's run's checkpoint"),
    ("best.pt", "foreign", "not this folder's run's checkpoint"),
    ("last.pt", "no id", "not this folder's run's checkpoint"),
    ("step_7.pt", "junk", "not this folder's run's checkpoint"),
    ("step_5.pt", "fifo", "is a FIFO (named pipe), where the run writes its checkpoints"),
    ("best.pt", "link", "is a symbolic link to"),
    ("train.log", "link", "the run writes its own train.log there"),
    ("metrics.jsonl", "dangling", "which does not exist"),
    ("test_2016_flickr.hyp.de", "link", "the run writes its own test_2016_flickr.hyp.de"),
    ("spm.model", "fifo", "is a FIFO (named pipe)"),
])
def test_overwrite_refuses_names_it_would_write_that_are_not_its_own(run, recipe_path,
                                                                      small_data, tmp_path,
                                                                      name, make, says):
    """--overwrite deletes the old run's own files only, so another run's checkpoint, a link or
    a FIFO under a name the new run writes would be written over or through: refused before
    anything is deleted."""
    mine = tmp_path / "mine.txt"
    mine.write_text("the user's own file\n")
    path = run / name
    if path.exists() or path.is_symlink():
        path.unlink()
    if make in ("foreign", "no id"):
        data = read_checkpoint(run / "step_20.pt")
        data = {**data, "run_id": "f" * 32} if make == "foreign" else \
            {k: v for k, v in data.items() if k != "run_id"}
        write_checkpoint(path, data)
    elif make == "junk":
        path.write_bytes(b"not a checkpoint")
    elif make == "fifo":
        os.mkfifo(path)
    elif make == "link":
        path.symlink_to(mine)
    else:
        path.symlink_to(tmp_path / "nowhere")
    before = contents(run)
    refused(cli("train", recipe_path, "--data", small_data, "--run-dir", run, "--overwrite",
                "--no-progress", *sets(*SHORT, "train.max_steps=10")), says)
    assert contents(run) == before
    assert mine.read_text() == "the user's own file\n" and not (tmp_path / "nowhere").exists()


def test_overwrite_in_a_folder_without_run_json_is_refused(run, recipe_path, small_data):
    (run / "run.json").unlink()
    before = contents(run)
    refused(cli("train", recipe_path, "--data", small_data, "--run-dir", run, "--overwrite",
                "--no-progress", *sets(*SHORT, "train.max_steps=10")),
            "has no run.json naming the run its files belong to")
    assert contents(run) == before


def test_overwrite_in_a_folder_of_someone_elses_files_is_refused(recipe_path, small_data,
                                                                tmp_path):
    folder = tmp_path / "experiments"
    folder.mkdir()
    (folder / "model.pt").write_bytes(b"a model of mine")
    (folder / "news.hyp.de").write_text("Nachrichten\n")
    before = contents(folder)
    refused(cli("train", recipe_path, "--data", small_data, "--run-dir", folder, "--overwrite",
                "--no-progress", *sets(*SHORT, "train.max_steps=10")), "has no run.json")
    assert {k: v for k, v in contents(folder).items() if k != ".lock"} == before  # lock: empty


# -- the lock file ----------------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["symlink to a file", "dangling symlink", "folder", "fifo"])
def test_a_lock_that_is_not_a_regular_file_is_refused(run, tmp_path, kind):
    target = tmp_path / "precious.txt"
    target.write_text("do not truncate me\n")
    (run / ".lock").unlink(missing_ok=True)
    if kind == "symlink to a file":
        (run / ".lock").symlink_to(target)
    elif kind == "dangling symlink":
        (run / ".lock").symlink_to(tmp_path / "nowhere")
    elif kind == "folder":
        (run / ".lock").mkdir()
    else:
        os.mkfifo(run / ".lock")
    before = contents(run)
    result = cli("train", "--resume", run, "--no-progress", *sets("train.max_steps=35"))
    refused(result, ".lock")
    assert target.read_text() == "do not truncate me\n"
    assert not (tmp_path / "nowhere").exists()
    assert contents(run) == before
