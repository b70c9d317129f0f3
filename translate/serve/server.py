"""`translate serve`: load a run once and serve it with uvicorn on a socket of our own.

The socket is bound before uvicorn starts, so `--port 0` picks a free port that the startup
line names, and a port in use is one `Error:` line (translate.serve.process starts the command
in a subprocess on such a port).
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import sys
from pathlib import Path
from typing import NoReturn

import uvicorn

from translate.api import Translator
from translate.ready import Ready
from translate.serve.app import ServeConfig, build_app
from translate.serve.connections import guarded_protocol, quiet_accept_errors

log = logging.getLogger("translate.serve")


def load_translator(path: str | Path, device: str | None = None, precision: str | None = None,
                    engine: str | None = None) -> Translator:
    """A run folder's or checkpoint's Translator, set up as `translate decode` sets its model up
    (`Ready.load`: None is its default); a bad device is named as --device names it."""
    return Translator(Ready.load(path, device, precision, engine))


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on host:port (port 0: a free one)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as e:
        sock.close()
        raise OSError(f"cannot listen on {host}:{port}: {e.strerror or e}") from None
    sock.listen(2048)
    return sock


def url(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"http://{f'[{host}]' if ':' in host else host}:{port}/"


def serve(path: str | Path, cfg: ServeConfig = ServeConfig(), host: str = "127.0.0.1",
          port: int = 8000, device: str | None = None, precision: str | None = None,
          engine: str | None = None) -> None:
    """Serve the model at `path` until SIGINT or SIGTERM."""
    sock = bind(host, port)  # first: a port in use fails before the model loads
    with sock:
        translator = load_translator(path, device, precision, engine)
        quiet_accept_errors()
        config = uvicorn.Config(build_app(translator, cfg, host), log_config=None,
                                log_level="warning", access_log=False, lifespan="on",
                                timeout_graceful_shutdown=5,
                                http=guarded_protocol(cfg.head_timeout_s, cfg.max_connections))
        log.info("serving %s (%s, step %d, %s, %s) at %s", path, translator.arch,
                 translator.step, translator.device, translator.precision, url(sock))
        server = Server(config)
        try:
            server.run(sockets=[sock])
            if signal.SIGINT in server.stop_signals:  # re-raised by uvicorn, unless ignored
                raise KeyboardInterrupt  # where SIGINT was ignored (a background job)
        finally:
            log.info("stopped serving %s", path)
            if server.model_alive():  # a call that did not end within `Batcher.stop`'s grace
                log.warning("the model's call did not end in time: exiting without waiting for it")
                interrupted = isinstance(sys.exc_info()[1], KeyboardInterrupt) or \
                    signal.SIGINT in server.stop_signals
                exit_at_once(130 if interrupted else 1)


class Server(uvicorn.Server):
    """uvicorn's server that, as it begins to stop, answers every request still waiting for
    the model (the running call's too) with a JSON 503, so none is cut off with a bare 500 and
    none holds the exit; the call itself is ended as the app stops (`Batcher.stop`)."""

    def __init__(self, config: uvicorn.Config):
        super().__init__(config)
        self.stop_signals: list[int] = []  # the signals that stopped it, first first

    def handle_exit(self, sig: int, frame) -> None:
        """Note the signal: a SIGINT that a background job's shell set to be ignored is not
        raised again after the shutdown, yet the server still exits as after Ctrl-C."""
        self.stop_signals.append(sig)
        super().handle_exit(sig, frame)

    async def shutdown(self, sockets=None) -> None:
        batcher = getattr(self.config.app.state, "batcher", None)
        if batcher is not None:
            batcher.close()
        await super().shutdown(sockets)

    def model_alive(self) -> bool:
        """Whether the model's thread still runs: in a call that did not end in time."""
        batcher = getattr(self.config.app.state, "batcher", None)
        return batcher is not None and batcher.model_alive


def exit_at_once(status: int) -> NoReturn:
    """End the process now, its log flushed, without the interpreter's finalization: with the
    model's thread still inside torch, finalization aborts (C++'s `terminate`)."""
    logging.shutdown()  # (flushes every handler)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)
