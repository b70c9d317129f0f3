"""A write that runs out of room (a full disk, a quota, `ulimit -f`) leaves every file as it was:
decode's output, an export, an average, a resumed run's log; one line says so, and no
temporary file or half-written folder stays behind. The file-size limit stands in for a full
disk everywhere (the same errors reach the same code); where the tests may mount a small tmpfs,
a real full file system too."""

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from helpers.files import ignore_sigxfsz_and_limit_files

REPO = Path(__file__).resolve().parents[2]
SENTENCES = "A man rides a bike.\nTwo dogs play in the snow.\nA woman reads a book.\n" * 20


def hashes(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "folder"
            for p in sorted(folder.iterdir())}


def translate(*args, limit: int | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "translate", *map(str, args)],
                          capture_output=True, text=True, env=env,
                          preexec_fn=ignore_sigxfsz_and_limit_files(limit) if limit else None)


def one_error(done: subprocess.CompletedProcess) -> str:
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr and "unexpected" not in done.stderr, done.stderr
    [line] = [line for line in done.stderr.splitlines() if line.startswith("Error:")]
    return line


@pytest.fixture
def run(trained_run, tmp_path) -> Path:
    return Path(shutil.copytree(trained_run.run_dir, tmp_path / "run"))


@pytest.fixture
def source(tmp_path) -> Path:
    path = tmp_path / "news.en"
    path.write_text(SENTENCES)
    return path


def test_decode_out_of_room_keeps_the_old_output(run, source, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.de").write_text("yesterday's translations\n")
    before = hashes(out)
    line = one_error(translate("decode", run, "-i", source, "-o", out / "keep.de", "--beam", "1",
                               limit=300))
    assert line == f"Error: could not write {out / 'keep.de'} (File too large); " \
                   f"{out / 'keep.de'} is unchanged"
    assert hashes(out) == before  # and no temporary file beside it


def test_export_out_of_room_writes_no_folder(run, tmp_path):
    out = tmp_path / "exports"
    out.mkdir()
    line = one_error(translate("export", run, "-o", out / "model", limit=64 * 1024))
    assert line == f"Error: could not write {out / 'model'} (File too large); nothing of it " \
                   f"was written"
    assert list(out.iterdir()) == []


def test_average_out_of_room_keeps_the_earlier_average(run):
    assert translate("average", run, "--last", "2").returncode == 0
    before = hashes(run)
    line = one_error(translate("average", run, "--last", "2", "--force", limit=64 * 1024))
    assert "(File too large); the file is unchanged" in line
    assert hashes(run) == before


def test_a_resume_out_of_room_changes_nothing_in_the_run(run):
    log = (run / "train.log").read_text()
    before = {**hashes(run), "train.log": None}
    size = (run / "metrics.jsonl").stat().st_size
    line = one_error(translate("train", "--resume", run, "--set", "train.max_steps=400",
                               limit=size // 2))
    assert line.startswith("Error: could not write") and "(File too large)" in line
    assert {**hashes(run), "train.log": None} == before  # no metrics.jsonl.tmp left
    assert (run / "train.log").read_text().startswith(log)  # the attempt logged after the run


@pytest.fixture
def full_disk(tmp_path):
    """A 1 MiB tmpfs, filled but for what a test puts there first; skips where mounting is
    not allowed (not root, or in a container without the capability)."""
    mount = tmp_path / "small"
    mount.mkdir()
    if os.geteuid() != 0 or shutil.which("mount") is None or subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)],
            capture_output=True).returncode != 0:
        pytest.skip("cannot mount a small tmpfs here")
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=False)


def fill(folder: Path) -> None:
    try:
        with open(folder / "filler", "wb") as f:
            while True:
                f.write(b"\0" * 4096)
                f.flush()
    except OSError:
        pass


def test_a_real_full_disk_leaves_every_file_as_it_was(run, source, full_disk):
    (full_disk / "keep.de").write_text("yesterday's translations\n")
    (full_disk / "exports").mkdir()
    fill(full_disk)
    before = hashes(full_disk)
    line = one_error(translate("decode", run, "-i", source, "-o", full_disk / "keep.de"))
    assert "(No space left on device)" in line and "is unchanged" in line
    line = one_error(translate("export", run, "-o", full_disk / "exports" / "model"))
    assert "(No space left on device); nothing of it was written" in line
    line = one_error(translate("average", run, "--last", "2", "-o", full_disk / "avg.pt"))
    assert "(No space left on device); the file was not written" in line
    assert hashes(full_disk) == before and list((full_disk / "exports").iterdir()) == []


def test_a_metrics_log_cut_back_out_of_room_stays_whole(tmp_path):
    """What a resume does first to the run's log (`MetricsLog.truncate`), at a file-size limit
    set in this process: the log as it was, and no temporary file beside it."""
    import resource

    from translate.metrics import MetricsLog
    from translate.utils import WriteError

    path = tmp_path / "metrics.jsonl"
    path.write_text("".join(f'{{"kind": "train", "step": {s}, "loss": 1.0}}\n'
                            for s in range(1, 200)))
    before = hashes(tmp_path)
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (path.stat().st_size // 2, hard))
    try:
        with pytest.raises(WriteError) as error:
            MetricsLog(path).truncate(150)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    assert str(error.value) == f"could not write {path} (File too large); {path} is unchanged"
    assert hashes(tmp_path) == before
