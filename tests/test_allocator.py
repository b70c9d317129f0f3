"""The allocator `translate train` runs under (translate.allocator): jemalloc or tcmalloc where
the system has one, chosen by TRANSLATE_ALLOCATOR, the process started again with it in
LD_PRELOAD; and what a CPU trainer does under each."""

import logging
import os
import subprocess
import sys

import pytest

from helpers.training import TINY_OVERRIDES
from translate import allocator
from translate.config import load_recipe
from translate.metrics import MetricsLog
from translate.training import build, build_trainer, prepare_data

JEMALLOC = allocator.find("jemalloc")
needs_jemalloc = pytest.mark.skipif(JEMALLOC is None or not sys.platform.startswith("linux"),
                                    reason="the system has no jemalloc (apt install libjemalloc2)")


class Started(Exception):
    """What the stand-in for os.execve raises: the program, arguments and environment."""


@pytest.fixture
def exec_recorded(monkeypatch):
    """os.execve replaced by a recorder; no allocator preloaded or chosen; jemalloc 'found'; a
    CPU with AMX."""
    def execve(program, args, env):
        raise Started(program, args, env)

    monkeypatch.setattr(allocator.os, "execve", execve)
    monkeypatch.delenv("LD_PRELOAD", raising=False)
    monkeypatch.delenv("MALLOC_CONF", raising=False)
    monkeypatch.delenv(allocator.SETTING, raising=False)
    monkeypatch.setattr(allocator, "find", {"jemalloc": "libjemalloc.so.2",
                                            "tcmalloc": "libtcmalloc_minimal.so.4"}.get)
    monkeypatch.setattr(allocator, "cpu_has_amx", lambda: True)


def started(argv):
    """The (program, args, env) `rerun_under_allocator(argv)` started; None where it returned."""
    try:
        allocator.rerun_under_allocator(argv)
    except Started as start:
        return start.args
    return None


@pytest.mark.parametrize("argv, expected", [
    (["translate", "train", "r.yaml"], "train"),
    (["translate", "-v", "train", "--set", "x=1"], "train"),
    (["translate", "decode", "train.txt"], "decode"),
    (["translate", "--help"], None),
    (["translate"], None),
])
def test_the_command_is_the_first_word_that_is_not_an_option(argv, expected):
    assert allocator.command(argv) == expected


def test_train_starts_again_under_jemalloc_with_its_arguments(exec_recorded):
    program, args, env = started(["translate", "-v", "train", "r.yaml", "--set", "a=b"])
    assert program == sys.executable
    assert args == [sys.executable, "-m", "translate", "-v", "train", "r.yaml", "--set", "a=b"]
    assert env["LD_PRELOAD"] == "libjemalloc.so.2"
    assert "MALLOC_CONF" not in env  # jemalloc as it comes


def test_what_the_user_preloads_and_configures_is_kept(exec_recorded, monkeypatch):
    monkeypatch.setenv("LD_PRELOAD", "/opt/libfoo.so")
    monkeypatch.setenv("MALLOC_CONF", "narenas:1")
    _, _, env = started(["translate", "train"])
    assert env["LD_PRELOAD"] == "libjemalloc.so.2:/opt/libfoo.so"
    assert env["MALLOC_CONF"] == "narenas:1"


def test_tcmalloc_where_it_is_the_only_one(exec_recorded, monkeypatch):
    monkeypatch.setattr(allocator, "find", {"tcmalloc": "libtcmalloc_minimal.so.4"}.get)
    _, _, env = started(["translate", "train"])
    assert env["LD_PRELOAD"] == "libtcmalloc_minimal.so.4"


@pytest.mark.parametrize("argv, env", [
    (["translate", "decode", "m.pt"], {}),  # only training runs long enough to fragment
    (["translate", "train"], {"TRANSLATE_ALLOCATOR": "system"}),
    (["translate", "train"], {"LD_PRELOAD": "/usr/lib/libjemalloc.so.2"}),  # started already
    (["translate", "train"], {"LD_PRELOAD": "libtcmalloc_minimal.so.4"}),
])
def test_no_second_start_where_none_is_wanted(exec_recorded, monkeypatch, argv, env):
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert started(argv) is None


def test_auto_leaves_cpus_without_amx_to_glibc_and_a_choice_applies_anywhere(exec_recorded,
                                                                             monkeypatch):
    """glibc's steps kept their pace over whole hours on the AMD EPYC and the Intel Xeon without
    AMX; TRANSLATE_ALLOCATOR=jemalloc still asks for jemalloc there."""
    monkeypatch.setattr(allocator, "cpu_has_amx", lambda: False)
    assert started(["translate", "train"]) is None
    monkeypatch.setenv(allocator.SETTING, "jemalloc")
    assert started(["translate", "train"])[2]["LD_PRELOAD"] == "libjemalloc.so.2"


def test_auto_runs_as_it_is_where_the_system_has_no_allocator(exec_recorded, monkeypatch):
    monkeypatch.setattr(allocator, "find", lambda name: None)
    assert started(["translate", "train"]) is None


@needs_jemalloc
def test_a_process_started_with_jemalloc_knows_it_runs_under_it():
    probe = "from translate.allocator import active; print(active())"
    under = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                           check=True, env={"LD_PRELOAD": JEMALLOC, "PATH": "/usr/bin:/bin"})
    plain = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                           check=True, env={"PATH": "/usr/bin:/bin"})
    assert (under.stdout.strip(), plain.stdout.strip()) == ("jemalloc", "None")


@needs_jemalloc
def test_translate_train_runs_under_jemalloc(recipe_path, small_data, tmp_path):
    """The whole path: the command starts again under jemalloc and its trainer says so."""
    run_dir = tmp_path / "run"
    sets = [*TINY_OVERRIDES, "train.max_steps=2", "data.test_splits=[]"]
    args = [sys.executable, "-m", "translate", "train", str(recipe_path), "--data",
            str(small_data), "--run-dir", str(run_dir), "--no-progress"]
    for s in sets:
        args += ["--set", s]
    env = {k: v for k, v in os.environ.items() if k not in ("TRANSLATE_ALLOCATOR", "LD_PRELOAD")}
    env["TRANSLATE_ALLOCATOR"] = "jemalloc"  # on any CPU
    out = subprocess.run(args, capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "memory: jemalloc allocates" in (run_dir / "train.log").read_text()


@pytest.mark.parametrize("active, precision, setting, kept", [
    ("jemalloc", "bf16", "", False),  # glibc's settings would not apply
    (None, "fp32", "", True),
    (None, "bf16", "", True),  # once the case that fragmented: no advice to install anything
    (None, "bf16", "system", True),
])
def test_a_cpu_trainer_under_each_allocator(recipe_path, small_data, tmp_path, monkeypatch,
                                           caplog, active, precision, setting, kept):
    monkeypatch.setenv(allocator.SETTING, setting)
    made = []
    monkeypatch.setattr(build, "keep_freed_memory", lambda: made.append(1) or True)
    monkeypatch.setattr(build.allocator, "active", lambda: active)
    monkeypatch.setattr(build, "training_precision", lambda cfg, device: precision)
    recipe = load_recipe(recipe_path, [*TINY_OVERRIDES, f"data.dataset={small_data}"])
    metrics = MetricsLog(tmp_path / "metrics.jsonl")
    with caplog.at_level(logging.INFO, logger="translate"):
        build_trainer(recipe, tmp_path, prepare_data(recipe, tmp_path), metrics, device="cpu",
                      progress=False)
    metrics.close()
    assert bool(made) == kept
    assert "apt install" not in caplog.text and "WARNING" not in caplog.text
    assert ("memory: jemalloc allocates" in caplog.text) == (active == "jemalloc")
