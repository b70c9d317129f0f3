"""What the reliability tests ask of a command: run it in-process, and check that a refusal is
one `Error:` line that says what it should, with no traceback; and a wait bounded by the
machine's pace, so that a read that blocks fails the test instead of hanging the suite."""

from __future__ import annotations

import threading
from typing import Any, Callable

from click.testing import CliRunner

from helpers.limits import within
from translate.cli import main


def sets(*items: str) -> list[str]:
    """`--set` options for each `key=value`."""
    return [arg for item in items for arg in ("--set", item)]


def cli(*args, **kwargs):
    """`translate ARGS...` run in-process (paths may be Path objects)."""
    return CliRunner().invoke(main, [*map(str, args)], **kwargs)


def refused(result, says: str, code: int = 1) -> None:
    """The command failed with `code` and one `Error:` line holding `says`, no traceback."""
    assert result.exit_code == code, result.output
    errors = [line for line in result.output.splitlines() if line.startswith("Error")]
    assert len(errors) == 1 and says in errors[0], result.output
    assert "Traceback" not in result.output and "unexpected" not in result.output


def without_blocking(work: Callable[[], Any], starts: float = 20, floor: float = 60) -> Any:
    """`work()`'s result, run in a thread that must end within
    `helpers.limits.within(starts, floor)` seconds."""
    box: list = []
    thread = threading.Thread(target=lambda: box.append(work()), daemon=True)
    thread.start()
    thread.join(within(starts, floor))
    assert not thread.is_alive(), "still running: a read or a write blocked"
    return box[0]
