"""The `translate serve` command: it serves a run on a free port, and its user errors are one
`Error:` line."""

from __future__ import annotations

import socket
import sys

import pytest
from click.testing import CliRunner

pytest.importorskip("starlette", reason="translate serve needs the serve extra")
httpx = pytest.importorskip("httpx", reason="the test talks to the server through httpx")

from translate.cli import main  # noqa: E402
from translate.serve import load_translator  # noqa: E402
from translate.serve.process import running  # noqa: E402


def test_the_command_serves_a_run_on_a_free_port(trained_run):
    text = "A woman is playing the guitar."
    with running(trained_run.run_dir, "--device", "cpu", "--precision", "fp32") as url:
        assert url.startswith("http://127.0.0.1:") and not url.endswith(":0/")
        health = httpx.get(url + "health").json()
        answer = httpx.post(url + "translate", json={"text": text, "beam": 3}, timeout=60)
    assert (health["model"], health["precision"]) == ("transformer", "fp32")
    translator = load_translator(trained_run.run_dir, "cpu", "fp32")
    assert answer.json()["translations"] == [translator.translate(text, beam=3,
                                                                  return_scores=True).text]


def test_a_port_in_use_is_one_error_line(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = CliRunner().invoke(main, ["serve", str(tmp_path), "--port", str(port)])
    assert result.exit_code == 1
    assert result.output.startswith(f"Error: cannot listen on 127.0.0.1:{port}: ")


def test_a_run_that_is_not_there_is_one_error_line(tmp_path):
    result = CliRunner().invoke(main, ["serve", str(tmp_path / "nothing"), "--port", "0"])
    assert result.exit_code == 1 and result.output.startswith("Error: ")
    assert "nothing" in result.output and "Traceback" not in result.output


def test_limits_that_cannot_work_are_one_error_line(tmp_path):
    result = CliRunner().invoke(main, ["serve", str(tmp_path), "--max-queue", "8"])
    assert result.exit_code == 1
    assert result.output == ("Error: max_queue (8) must be at least max_texts (64), or a full "
                             "request could never queue\n")


def test_without_the_serve_extra_one_line_says_how_to_install_it(monkeypatch):
    for name in [m for m in sys.modules if m.startswith("translate.serve")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "starlette.applications", None)  # as if not installed
    result = CliRunner().invoke(main, ["serve", "runs/any"])
    assert result.exit_code == 1
    assert result.output.startswith("Error: translate serve needs Starlette and uvicorn: "
                                    "pip install starlette uvicorn httpx (in a clone: pip install -e '.[serve]')")
