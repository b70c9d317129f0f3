"""How a `translate` command fails: a user error is one `Error:` line and exit code 1, and so is
anything unforeseen (a bug), unless --verbose or TRANSLATE_DEBUG=1 asks for its traceback.

Tests: tests/test_cli.py, tests/reliability/test_hostile_input.py.
"""

from __future__ import annotations

import os
import signal
import sys

import click

from translate.checkpoint import CheckpointError
from translate.config import ConfigError
from translate.data import DataError
from translate.training import TrainingError
from translate.training.distributed import RankFailed, current_rank, reported_failure

USER_ERRORS = (ConfigError, DataError, CheckpointError, TrainingError, ValueError, OSError)


def fail(error: Exception) -> None:
    """Exit with `error` as one `Error:` line, which names the rank of a torchrun run (not 0).

    A broken pipe (`translate decode ... | head -1`) is no error: Click ends the command
    quietly, as Unix tools do."""
    if isinstance(error, BrokenPipeError):
        raise error
    rank = current_rank()
    exiting()
    raise click.ClickException(f"rank {rank}: {error}" if rank else str(error)) from None


def fail_together(error: RankFailed) -> None:
    """Report a failure the ranks of a torchrun run agreed on: once, by rank 0; a bug keeps its
    traceback, on the rank it happened on (`reported_failure`)."""
    exiting()
    reported = reported_failure(error, (*USER_ERRORS, click.ClickException))
    if reported is None:
        sys.exit(1)
    if isinstance(reported, click.ClickException):
        raise reported from None
    fail(reported)


def exiting() -> None:
    """Before a failing process exits under torchrun, ignore the SIGTERM torchrun sends every
    process once one has exited: this one is exiting already, and its message and exit code must
    not be cut short."""
    if os.environ.get("TORCHELASTIC_RUN_ID"):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)


class Commands(click.Group):
    """The command group, with one boundary for failures: a user error was already turned into
    one `Error:` line; anything else that escapes a command (a bug, or a library failing in a
    way no check foresaw) becomes one line too, naming what failed, unless --verbose or
    TRANSLATE_DEBUG=1 asks for the traceback."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except (click.ClickException, click.exceptions.Exit, click.Abort, SystemExit,
                KeyboardInterrupt, BrokenPipeError):
            raise
        except Exception as e:
            if ctx.params.get("verbose") or os.environ.get("TRANSLATE_DEBUG", "") not in ("", "0"):
                raise
            exiting()
            from translate.utils import first_line

            raise click.ClickException(f"{type(e).__name__}: {first_line(e)[:300]} (unexpected: "
                                       f"rerun with --verbose for the traceback, and please "
                                       f"report it)") from None
