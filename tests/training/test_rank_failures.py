"""Under torchrun, a failure ends every rank, clearly and without a hang: a rank that cannot read
the data or the recipe fails them all with one line; a rank that dies, raises or stops answering
mid-training ends the run; Ctrl-C saves last.pt once, and the run resumes from it."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers.limits import within
from test_distributed import (assert_resumed_as_straight, free_port, process_env, sets,
                              torchrun, train_losses)
from translate.checkpoint import read_checkpoint
from translate.config import ConfigError
from translate.training.distributed import (RankFailed, World, raise_any_failure,
                                            timeout_seconds, together)

REPO = Path(__file__).resolve().parents[2]
FAULTY = Path(__file__).resolve().with_name("faulty_rank.py")
# No validation, test decode or periodic save: the run trains until a fault or signal ends it.
ENDLESS = ["train.max_steps=100000", "train.eval_every=0", "train.save_every=0",
           "train.log_every=5", "data.test_splits=[]"]


def limit() -> float:
    """Seconds a failing run may take to end, start-up included: 60 on a quiet two-core
    machine, more where starting the toolkit takes longer."""
    return within(starts=25, floor=60)


def start(args: list[str], cwd: Path, **env: str) -> subprocess.Popen:
    """torchrun --nproc_per_node 2 ARGS in its own process group, as a terminal starts it;
    stdout and stderr together."""
    limit()  # the machine's pace, timed before the run's own processes load it
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
           "--master_addr", "127.0.0.1", "--master_port", str(free_port()), *args]
    return subprocess.Popen(cmd, cwd=cwd, env=process_env(PYTHONPATH=str(REPO), **env),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)


def finish(proc: subprocess.Popen) -> str:
    """The run's output once torchrun has ended, within `limit()`: else the test fails, and
    torchrun and its workers (each in a session of its own) are killed."""
    seconds = limit()
    try:
        return proc.communicate(timeout=seconds)[0]
    except subprocess.TimeoutExpired:
        children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
        for pid in children:
            os.killpg(int(pid), signal.SIGKILL)
        proc.kill()
        out = proc.communicate()[0]
        pytest.fail(f"torchrun still running after {seconds:.0f} s:\n{out[-3000:]}")


def train_with_fault(fault: str, recipe: Path, data: Path, run_dir: Path,
                     extra: tuple = (), **env: str) -> tuple[int, str]:
    """`translate train` under torchrun with FAULT on rank 1 (faulty_rank.py): exit code, output."""
    proc = start([str(FAULTY), "train", str(recipe), "--data", str(data), "--run-dir",
                  str(run_dir), "--no-progress", *sets(*ENDLESS, *extra)], run_dir.parent,
                 FAULT=fault, **env)
    out = finish(proc)
    return proc.returncode, out


def error_lines(out: str) -> list[str]:
    return [line for line in out.splitlines() if line.startswith("Error:")]


@pytest.mark.parametrize("rank", [0, 1])
def test_a_rank_without_the_data_fails_every_rank_with_one_line(rank, recipe_path, small_data,
                                                                tmp_path):
    """Rank 0 fails before it shares the tokenizer, rank 1 while rank 0 trains it: either way
    the other rank does not wait forever, and rank 0 alone reports, naming the rank."""
    code, out = train_with_fault(f"hide:{small_data}", recipe_path, small_data, tmp_path / "run",
                                 FAULT_RANK=str(rank))
    who = f"rank {rank}: " if rank else ""
    assert code != 0
    assert error_lines(out) == [f"Error: {who}data folder not found: {small_data}.hidden"], out
    assert out.count("exitcode  : 1 ") == 2, out  # torchrun's summary: both ranks exited with 1
    assert "[rank0]" not in out and "[rank1]" not in out, out  # no traceback from a rank


@pytest.mark.slow
def test_a_rank_without_the_recipe_fails_every_rank_with_one_line(recipe_path, small_data,
                                                                   tmp_path):
    """The recipe is read before the run starts, but under the same agreement."""
    code, out = train_with_fault(f"hide:{recipe_path}", recipe_path, small_data, tmp_path / "run")
    assert code != 0
    assert error_lines(out) == [f"Error: rank 1: recipe not found: {recipe_path}.hidden"], out
    assert out.count("exitcode  : 1 ") == 2, out


def test_a_rank_killed_mid_training_ends_the_run(recipe_path, small_data, tmp_path):
    code, out = train_with_fault("kill:3", recipe_path, small_data, tmp_path / "run")
    assert code != 0
    assert "Signal 9 (SIGKILL)" in out, out  # torchrun's summary names the killed rank
    (line,) = error_lines(out)  # rank 0's
    assert line.startswith("Error: lost contact with another process of the run"), out
    assert "[rank0]" not in out, out  # no traceback from rank 0


@pytest.mark.slow  # three torchrun runs
def test_after_a_rank_is_killed_the_run_resumes_exactly(recipe_path, small_data, tmp_path):
    """kill -9 of rank 1 at step 13, with dropout on and last.pt every 5 steps: resumed from
    step 10 to 20, the run logs every loss and ends with every weight as a run never stopped."""
    run, straight = tmp_path / "run", tmp_path / "straight"
    extra = ("model.dropout=0.3", "train.save_every=5")
    code, _ = train_with_fault("kill:12", recipe_path, small_data, run, extra)
    assert code != 0 and read_checkpoint(run / "last.pt")["step"] == 10
    out = torchrun(small_data, tmp_path, "train", "--resume", str(run),
                   "--set", "train.max_steps=20")
    assert f"resuming from {run / 'last.pt'}: step 10" in out
    torchrun(small_data, tmp_path, "train", str(recipe_path), "--run-dir", str(straight),
             *sets(*ENDLESS, *extra, "train.max_steps=20"))
    assert [s for s, _ in train_losses(run)] == [5, 10, 15, 20]
    assert_resumed_as_straight(run, straight, 20)


@pytest.mark.slow
def test_an_error_on_one_rank_mid_training_ends_the_run(recipe_path, small_data, tmp_path):
    code, out = train_with_fault("raise:3", recipe_path, small_data, tmp_path / "run")
    assert code != 0
    assert "Error: rank 1: injected failure at step 4" in error_lines(out), out
    assert any(line.startswith("Error: lost contact") for line in error_lines(out)), out


@pytest.mark.slow  # ~14 s; the other rank failures run by default
def test_a_rank_that_stops_answering_times_out(recipe_path, small_data, tmp_path):
    """Its process lives on, so torchrun sees nothing wrong: the collective's timeout ends the
    run (TRANSLATE_DIST_TIMEOUT)."""
    code, out = train_with_fault("hang:3", recipe_path, small_data, tmp_path / "run",
                                 TRANSLATE_DIST_TIMEOUT="4")
    assert code != 0
    assert any(line.startswith("Error: lost contact with another process of the run (it "
                               "stopped, crashed, or did not answer for 4 s") for line in
               error_lines(out)), out


def stop_with_ctrl_c(recipe_path: Path, data: Path, run: Path, *extra: str) -> int:
    """Train under torchrun until rank 0 logged step 5, then SIGINT to torchrun's process group,
    as a terminal sends it: torchrun passes it to every rank; they agree on the step, rank 0
    saves last.pt and says so once. Returns the step saved."""
    proc = start(["-m", "translate", "train", str(recipe_path), "--data", str(data),
                  "--run-dir", str(run), "--no-progress", *sets(*ENDLESS, *extra)], run.parent)
    deadline = time.monotonic() + limit()
    while not (run / "metrics.jsonl").is_file() and time.monotonic() < deadline:
        time.sleep(0.2)  # rank 0 writes the first train record at step 5
    os.killpg(proc.pid, signal.SIGINT)
    out = finish(proc)
    assert proc.returncode != 0
    step = read_checkpoint(run / "last.pt")["step"]
    assert step >= 5
    said = (f"SIGINT received: stopped at step {step} and saved {run / 'last.pt'}; resume with: "
            f"translate train --resume {run}")
    assert out.count(said) == 1 and out.count("SIGINT received: saving a checkpoint") == 1, out
    return step


def resume_to(data: Path, run: Path, end: int, step: int) -> list[dict]:
    """`--resume` under torchrun to step `end`; the run's metrics records."""
    out = torchrun(data, run.parent, "train", "--resume", str(run),
                   "--set", f"train.max_steps={end}")
    assert f"resuming from {run / 'last.pt'}: step {step}" in out
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records if r["kind"] == "valid"] == [end]
    return records


# slow: a torchrun pair trained, stopped and resumed (18 s); test_loop_signals covers one process
@pytest.mark.slow
def test_ctrl_c_saves_once_and_the_run_resumes(recipe_path, small_data, tmp_path):
    run = tmp_path / "run"
    step = stop_with_ctrl_c(recipe_path, small_data, run)
    resume_to(small_data, run, step + 5, step)


@pytest.mark.slow  # three torchrun runs
def test_after_ctrl_c_the_run_resumes_exactly(recipe_path, small_data, tmp_path):
    """With dropout on, the resumed run logs every loss and ends with every weight as a run
    never stopped."""
    run, straight = tmp_path / "run", tmp_path / "straight"
    step = stop_with_ctrl_c(recipe_path, small_data, run, "model.dropout=0.3")
    resume_to(small_data, run, step + 5, step)
    torchrun(small_data, tmp_path, "train", str(recipe_path), "--run-dir", str(straight),
             *sets(*ENDLESS, "model.dropout=0.3", f"train.max_steps={step + 5}"))
    assert_resumed_as_straight(run, straight, step + 5)


def test_a_lone_process_keeps_its_own_error():
    with pytest.raises(KeyError):
        with together(World()):
            raise KeyError("x")
    raise_any_failure(None, World())  # nothing failed: nothing to agree on


def test_a_failure_names_the_rank_unless_it_is_rank_0():
    assert str(RankFailed(1, "data folder not found: /x")) == "rank 1: data folder not found: /x"
    assert str(RankFailed(0, "data folder not found: /x")) == "data folder not found: /x"


@pytest.mark.parametrize("value", ["0", "-5", "soon"])
def test_the_collective_timeout_must_be_positive_seconds(value, monkeypatch):
    monkeypatch.setenv("TRANSLATE_DIST_TIMEOUT", value)
    with pytest.raises(ConfigError, match="TRANSLATE_DIST_TIMEOUT"):
        timeout_seconds()
    monkeypatch.setenv("TRANSLATE_DIST_TIMEOUT", "2.5")
    assert timeout_seconds() == 2.5


def test_a_used_run_folder_fails_every_rank_with_one_line(recipe_path, small_data, trained_run,
                                                         tmp_path):
    """The run-folder checks (rank 0's) end every rank of a torchrun run as they end one."""
    import shutil

    used = shutil.copytree(trained_run.run_dir, tmp_path / "used")
    proc = start(["-m", "translate", "train", str(recipe_path), "--data", str(small_data),
                  "--run-dir", str(used), "--no-progress", *sets(*ENDLESS)], tmp_path)
    out = finish(proc)
    assert proc.returncode != 0
    assert len(error_lines(out)) == 1 and "already holds a run" in error_lines(out)[0], out
    assert out.count("exitcode  : 1 ") == 2, out  # torchrun's summary: both ranks exited with 1
    assert "[rank0]" not in out and "[rank1]" not in out, out  # no traceback from a rank
