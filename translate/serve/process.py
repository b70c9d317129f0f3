"""`translate serve` in a subprocess, on a free port (`--port 0`), for the tests, the load
benchmarks and the screenshot script.

    ServerProcess   the command started: its URL once it listens, its log lines, its memory
    running         a context manager: the URL while the server runs, stopped on exit

Tests: tests/serve/test_server.py, tests/reliability/test_serve_hostile.py.
"""

from __future__ import annotations

import queue
import signal
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator


class ServerProcess:
    """`translate serve PATH --port 0 OPTIONS` in a subprocess, started at once: `url` once it
    listens, `said` its log lines so far (also copied to this process's stderr), `process`.
    `nofile` limits its file descriptors (ulimit -n); `python` is how the interpreter starts
    the command (`-c CODE` to change the server before it runs `translate.cli.main()`).
    `stop()` sends SIGINT, then kills; `wait()` waits for an exit."""

    def __init__(self, path: str | Path, *options: str, timeout: float = 300,
                 nofile: int | None = None, python: tuple[str, ...] = ("-m", "translate")):
        self.command = [sys.executable, *python, "serve", str(path), "--port", "0", *options]
        self.said: list[str] = []
        self.process = subprocess.Popen(
            self.command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
            encoding="utf-8", errors="replace",
            preexec_fn=None if nofile is None else lambda: _limit_descriptors(nofile))
        lines: queue.Queue[str | None] = queue.Queue()
        self._reader = threading.Thread(target=self._forward, args=(lines,), daemon=True)
        self._reader.start()
        try:
            self.url = _await_url(lines, timeout, " ".join(self.command))
        except BaseException:
            self.stop()
            raise

    def rss_mb(self) -> float:
        """The server's resident memory now, in MiB (Linux)."""
        with open(f"/proc/{self.process.pid}/status", encoding="ascii") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("VmRSS")) / 1024

    def wait(self, timeout: float) -> int:
        """The exit status, once the process has exited and its log is read to the end."""
        status = self.process.wait(timeout)
        self._reader.join(timeout)
        return status

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)  # uvicorn's graceful stop
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def _forward(self, lines: queue.Queue) -> None:
        for line in self.process.stderr:
            sys.stderr.write(line)
            self.said.append(line)
            lines.put(line)
        lines.put(None)


def _limit_descriptors(nofile: int) -> None:
    import resource

    resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))


@contextmanager
def running(path: str | Path, *options: str, timeout: float = 300) -> Iterator[str]:
    """`translate serve PATH --port 0 OPTIONS` in a subprocess: its URL once it listens.

    Its log goes on to this process's stderr; it is stopped (SIGINT, then killed) on exit.
    """
    server = ServerProcess(path, *options, timeout=timeout)
    try:
        yield server.url
    finally:
        server.stop()


def _await_url(lines: queue.Queue, timeout: float, command: str) -> str:
    said, deadline = [], time.monotonic() + timeout
    while True:
        try:
            line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            raise RuntimeError(f"{command} did not start in {timeout:.0f} s") from None
        if line is None:
            raise RuntimeError(f"{command} exited: {''.join(said[-5:]).strip()}")
        said.append(line)
        if "serving " in line and " at http://" in line:
            return line.rsplit(" at ", 1)[1].strip()
