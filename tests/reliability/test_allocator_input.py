"""TRANSLATE_ALLOCATOR and LD_PRELOAD as a user may leave them: a value that names no allocator,
or one the system lacks, is one Error line before anything starts; a preload the loader cannot
load, or a malformed LD_PRELOAD, never makes the command start itself over and over."""

import os
import subprocess
import sys

import pytest

from translate import allocator


def translate(*args, **env):
    """`python -m translate ARGS` with `env` added (None: removed); its completed process."""
    environ = {k: v for k, v in os.environ.items()
               if k not in ("TRANSLATE_ALLOCATOR", "LD_PRELOAD")}
    environ.update({k: v for k, v in env.items() if v is not None})
    return subprocess.run([sys.executable, "-m", "translate", *args], capture_output=True,
                          text=True, env=environ, timeout=120)


@pytest.mark.parametrize("value", ["bogus", "jemalloc;rm -rf /", "glibc"])
def test_a_value_that_names_no_allocator_is_one_error_line(value, tmp_path):
    out = translate("train", "missing.yaml", "--run-dir", str(tmp_path / "run"),
                    TRANSLATE_ALLOCATOR=value)
    assert out.returncode == 1
    assert out.stderr.strip().splitlines() == [
        f"Error: TRANSLATE_ALLOCATOR={value!r} is not an allocator: use auto (jemalloc or "
        "tcmalloc where the system has one), system (the C library's), jemalloc or tcmalloc"]
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("value", ["", "  ", "AUTO", "System"])
def test_empty_and_any_case_are_understood(value, monkeypatch):
    monkeypatch.setenv(allocator.SETTING, value)
    assert allocator.setting() == (value.strip().lower() or "auto")


def test_an_allocator_the_system_lacks_is_named_with_how_to_get_it(monkeypatch):
    monkeypatch.setenv(allocator.SETTING, "jemalloc")
    monkeypatch.delenv("LD_PRELOAD", raising=False)
    monkeypatch.setattr(allocator, "find", lambda name: None)
    with pytest.raises(ValueError, match=r"TRANSLATE_ALLOCATOR=jemalloc: the system has no "
                                         r"jemalloc library \(for jemalloc: apt install "
                                         r"libjemalloc2"):
        allocator.rerun_under_allocator(["translate", "train", "r.yaml"])


def test_other_commands_never_read_the_setting(monkeypatch):
    monkeypatch.setenv(allocator.SETTING, "bogus")
    allocator.rerun_under_allocator(["translate", "decode", "m.pt"])  # no error, no start


@pytest.mark.parametrize("preload", ["/nowhere/libjemalloc.so.2", "libtcmalloc.so.4"])
def test_a_preload_the_loader_cannot_load_runs_once_under_glibc(preload, tmp_path):
    """The loader warns and goes on without it; the command runs once, under glibc's allocator
    (it does not start again: LD_PRELOAD already names an allocator)."""
    out = translate("train", "--help", LD_PRELOAD=preload)
    assert out.returncode == 0, out.stderr
    assert "Usage:" in out.stdout and out.stdout.count("Usage:") == 1


@pytest.mark.parametrize("preload", [":::", " ", "libjemalloc", "/x/libjemallocX.so",
                                     "a b:c"])
def test_malformed_preload_lists_are_read_without_error(preload, monkeypatch):
    monkeypatch.setenv("LD_PRELOAD", preload)
    assert allocator.preloaded() is False
