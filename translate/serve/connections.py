"""Connections that cannot starve the server: uvicorn's HTTP/1.1 protocol with a deadline for
each request's head, a cap on open connections, and an accept-error log that cannot flood.

A client that opens a connection and sends nothing, or trickles a request's head a byte at a
time, would hold a file descriptor for as long as it likes; a few hundred of them exhaust the
process's descriptors, after which no one, `/health` included, is answered, and every failed
`accept()` logs a traceback. Here:

    head_timeout     a request's head (its line and headers) must arrive within this many
                     seconds of the connection opening, or of the previous answer
    max_connections  past it, the connection idle longest (no request in progress) is closed
                     to make room for the new one; with none idle, the new one is refused
    the log          errors of the event loop's `accept()` are logged once per 10 s, counted

The body is the app's to time (`read_json`'s `body_timeout`).

Tests: tests/reliability/test_serve_hostile.py.
"""

from __future__ import annotations

import logging
import resource
import time

from uvicorn.protocols.http.h11_impl import H11Protocol

log = logging.getLogger("translate.serve")


def default_max_connections() -> int:
    """Room for the connections within the process's descriptor limit, with 64 left for the
    model's files, logs and the event loop; at most 1024."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return max(8, min(1024, soft - 64)) if soft != resource.RLIM_INFINITY else 1024


def guarded_protocol(head_timeout: float, max_connections: int) -> type[H11Protocol]:
    """An H11Protocol class with these limits, for `uvicorn.Config(http=...)`."""
    return type("GuardedH11Protocol", (GuardedH11Protocol,),
                {"head_timeout": head_timeout, "max_connections": max_connections})


class GuardedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with a deadline for request heads and a connection cap."""

    head_timeout: float = 10.0
    max_connections: int = 1024

    def connection_made(self, transport) -> None:
        super().connection_made(transport)
        self.opened = time.monotonic()
        self.head_timer = None
        self.arm_head_timer()
        if len(self.connections) > self.max_connections:
            self.make_room()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)  # (which cancels uvicorn's keep-alive timer)
        if self.in_request():
            self.cancel_head_timer()
        else:  # between requests: the next head has its deadline too
            self.arm_head_timer()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self.arm_head_timer()

    def connection_lost(self, exc) -> None:
        self.cancel_head_timer()
        super().connection_lost(exc)

    def in_request(self) -> bool:
        return self.cycle is not None and not self.cycle.response_complete

    def arm_head_timer(self) -> None:
        if self.head_timer is None and not self.transport.is_closing():
            self.head_timer = self.loop.call_later(self.head_timeout, self.drop_silent)

    def cancel_head_timer(self) -> None:
        if self.head_timer is not None:
            self.head_timer.cancel()
            self.head_timer = None

    def drop_silent(self) -> None:
        """The head did not come in time: close the connection (nothing to answer yet)."""
        self.head_timer = None
        if not self.in_request() and not self.transport.is_closing():
            self.transport.close()

    def make_room(self) -> None:
        """Close the connection idle longest; with none idle, this new one."""
        idle = [c for c in self.connections if isinstance(c, GuardedH11Protocol)
                and c is not self and not c.in_request() and not c.transport.is_closing()]
        victim = min(idle, key=lambda c: c.opened) if idle else self
        victim.transport.close()
        log_sparingly(f"{len(self.connections) - 1} connections open, the most "
                      f"--max-connections allows: closed the one idle longest")


class Sparse(logging.Filter):
    """Let one record through every `every` seconds, saying how many it held back."""

    def __init__(self, every: float = 10.0):
        super().__init__()
        self.every, self.last, self.held = every, -float("inf"), 0

    def filter(self, record: logging.LogRecord) -> bool:
        now = time.monotonic()
        if now - self.last < self.every:
            self.held += 1
            return False
        if self.held:
            record.msg = f"{record.msg} ({self.held} more like it in the last {self.every:g} s)"
        self.last, self.held = now, 0
        record.exc_info = record.exc_text = None  # the message says it; no traceback per line
        return True


_sparse = Sparse()


def log_sparingly(message: str) -> None:
    record = log.makeRecord(log.name, logging.WARNING, __file__, 0, message, (), None)
    if _sparse.filter(record):
        log.handle(record)


def quiet_accept_errors() -> None:
    """asyncio logs each failed `accept()` (out of descriptors) with a traceback: once per
    10 s instead."""
    logger = logging.getLogger("asyncio")
    if not any(isinstance(f, Sparse) for f in logger.filters):
        logger.addFilter(Sparse())
