"""Ctrl-C stops the test suite even while a test trains in-process (training holds SIGINT and
raises Interrupted after saving): conftest's report hook turns that into a stopped session,
which pytest ends after the current test."""

import signal
from types import SimpleNamespace

import pytest

from conftest import pytest_runtest_makereport  # the hook under test: hooks stay in conftest
from translate.training.loop import Interrupted

def report_of(error: BaseException):
    item = SimpleNamespace(session=SimpleNamespace(shouldstop=False))
    try:
        raise error
    except type(error):
        call = SimpleNamespace(excinfo=pytest.ExceptionInfo.from_current())
    pytest_runtest_makereport(item, call)
    return item.session.shouldstop


def test_a_sigint_while_training_stops_the_session_and_nothing_else_does(tmp_path):
    assert report_of(Interrupted(signal.SIGINT, 7, tmp_path / "last.pt"))
    assert not report_of(Interrupted(signal.SIGTERM, 7, tmp_path / "last.pt"))
    assert not report_of(ValueError("a failing test"))
