"""The ASGI app: JSON endpoints over one `Translator`, and the page that shows its attention.

    POST /translate  {"texts": [...], "beam": 5, "nbest": 1, "alignments": false}  ->
                     {"translations", "scores"} and, asked for, "alignments": each translation's
                     word links [[source word, output word], ...] from 0
    POST /attention  {"text": "...", "target": "..."}  ->  the greedy translation (or the
                     target, fed to the decoder), token labels, every weight (base64 uint16,
                     weight x 65535: `attention_json.decode_weights`) and its word alignment,
                     which the page outlines on the map it is read from
    GET  /health     ->  model, parameters, step, languages, device, precision, queue depth
    GET  /           ->  the page (translate/serve/page/)

Every request is checked before it queues: a `Host` header that does not name this server is
refused with 421 (a web page the user has open cannot reach a local server through a DNS name
of its own), a POST that is not `application/json` with 415, a body over `max_request_bytes`
or work over `max_request_work` (source pieces x beam) with 413, a full queue with 429, a
malformed request with 400: a body that is not JSON in UTF-8 (or holds NaN, a field twice,
nesting past the recursion limit), a field unknown or of the wrong type or range, an integer of
thousands of digits, a text that is empty, holds a line break or a lone surrogate
(`translate.serve.reading`). A request past `deadline_s`, or cut short by the server stopping,
is answered 503; a failed decoding 500, while the server goes on. Errors are JSON,
`{"error": "..."}`. `/attention` takes at most `max_attention_pieces` source pieces: its answer
grows with their square.

Shapes: H heads, S source pieces, T target pieces.
"""

from __future__ import annotations

import logging
import time
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Awaitable, Callable, Hashable

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from translate.analysis.attention import output_limit, target_ids
from translate.api import Translator
from translate.serve.attention_json import attention_json
from translate.serve.batching import Batcher, DeadlineExceeded, QueueFull, ShuttingDown
from translate.serve.connections import default_max_connections
from translate.serve.reading import (RequestError, read_bool, read_int, read_json, read_text,
                                     read_texts)
from translate.utils import first_line

log = logging.getLogger("translate.serve")
PAGE = Path(__file__).resolve().parent / "page"


@dataclass(frozen=True)
class ServeConfig:
    """The server's limits and batching (each has a `translate serve` flag of the same name)."""

    batch_wait_ms: float = 5.0  # how long a request waits for others to decode with it
    max_batch: int = 64  # sentences decoded in one call at most
    max_queue: int = 256  # sentences waiting at most; more: 429
    max_texts: int = 64  # sentences in one request at most; more: 400
    max_beam: int = 16  # largest beam a request may ask for; more: 400
    max_request_bytes: int = 64 * 1024  # request body at most; more: 413
    max_attention_pieces: int = 128  # source pieces /attention draws at most; more: 400
    # work, in source pieces x beam: in one decoding call at most (a request over it is decoded
    # in parts, others served between them), and in one request at most (more: 413)
    max_call_work: int = 8192
    max_request_work: int = 65_536
    deadline_s: float = 120.0  # a request not answered by then: 503
    # a request's head must arrive within head_timeout_s (else the connection is closed), its
    # body within body_timeout_s (else 408); past max_connections open, the one idle longest
    # is closed (default: what the process's descriptor limit leaves room for)
    head_timeout_s: float = 10.0
    body_timeout_s: float = 10.0
    max_connections: int = field(default_factory=default_max_connections)
    allowed_hosts: tuple = ()  # Host names besides the bound address's (and loopback's)

    def __post_init__(self):
        for name, value in asdict(self).items():
            if name == "allowed_hosts":
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0 \
                    or (value == 0 and name != "batch_wait_ms"):
                raise ValueError(f"{name} must be a positive number, got {value!r}")
        if self.max_request_work < self.max_call_work:
            raise ValueError(f"max_request_work ({self.max_request_work}) must be at least "
                             f"max_call_work ({self.max_call_work})")
        if self.max_queue < self.max_texts:
            raise ValueError(f"max_queue ({self.max_queue}) must be at least max_texts "
                             f"({self.max_texts}), or a full request could never queue")


def error_response(status: int, message: str, **headers: str) -> JSONResponse:
    # a lone surrogate from the request, in any message, escaped: the answer is UTF-8
    message = message.encode("utf-8", "backslashreplace").decode("utf-8")
    return JSONResponse({"error": message}, status_code=status, headers=headers or None)


def build_app(translator: Translator, cfg: ServeConfig = ServeConfig(),
              bound: str = "127.0.0.1") -> HostGuard:
    """The app serving `translator` on address `bound`; its batcher (`app.state.batcher`)
    lives with the app."""
    endpoints = Endpoints(translator, cfg)

    @asynccontextmanager
    async def lifespan(app: Starlette):
        app.state.batcher = Batcher(endpoints.work, cfg.batch_wait_ms, cfg.max_batch,
                                    cfg.max_queue, cfg.max_call_work, cfg.deadline_s)
        app.state.batcher.start()
        yield
        await app.state.batcher.stop()

    routes = [Route("/translate", logged(endpoints.translate), methods=["POST"]),
              Route("/attention", logged(endpoints.attention), methods=["POST"]),
              Route("/health", logged(endpoints.health), methods=["GET"]),
              Route("/", logged(endpoints.page), methods=["GET"]),
              Mount("/page", StaticFiles(directory=PAGE), name="page")]
    app = Starlette(routes=routes, lifespan=lifespan,
                    exception_handlers={HTTPException: http_error})
    return HostGuard(app, allowed_hosts(bound, cfg.allowed_hosts))


class Endpoints:
    """The app's handlers over one `Translator`, within `cfg`'s limits, and the model's work
    they queue (`work`, which the batcher runs)."""

    def __init__(self, translator: Translator, cfg: ServeConfig):
        self.translator, self.cfg = translator, cfg
        self.max_positions = translator.model.cfg.max_positions
        tokenizer = translator.tokenizer  # the model's size, for /health, counted once
        self.parameters = translator.recipe.model.parameter_count(
            tokenizer.src_vocab_size, tokenizer.tgt_vocab_size, tokenizer.joint)

    def work(self, key: Hashable, texts: list[str]) -> list:
        """The model's work (and the attention's JSON), in the batcher's worker thread."""
        translator = self.translator
        if key[0] == "attention":  # ("attention", the translation to draw or None: greedy)
            return [attention_json(translator.attention(text, key[1]), translator.arch)
                    for text in texts]
        _, beam, nbest, alignments = key
        return translator.translate(texts, beam=beam, nbest=nbest, return_scores=True,
                                    return_alignments=alignments)

    async def translate(self, request: Request) -> Response:
        cfg = self.cfg
        body = await read_json(request, cfg.max_request_bytes,
                               ("texts", "text", "beam", "nbest", "alignments"), cfg.body_timeout_s)
        texts = read_texts(body, cfg.max_texts)
        beam = read_int(body, "beam", min(self.translator.recipe.decode.beam, cfg.max_beam), 1,
                        cfg.max_beam)  # by default the recipe's
        nbest = read_int(body, "nbest", 1, 1, beam)
        alignments = read_bool(body, "alignments", False)
        work = [len(ids) * beam for ids in self.translator.tokenizer.encode_src(texts)]
        if sum(work) > cfg.max_request_work:
            raise RequestError(413, f"the request is {sum(work)} units of work (source pieces "
                                    f"x beam), over the limit of {cfg.max_request_work}: send "
                                    f"fewer or shorter sentences, or a smaller beam")
        found = await submit(request, ("translate", beam, nbest, alignments), texts, work)
        per_text = found if nbest > 1 else [[h] for h in found]  # nbest > 1: best first
        answer = {"translations": [[h.text for h in hyps] for hyps in per_text],
                  "scores": [[round(h.score, 4) for h in hyps] for hyps in per_text]}
        if alignments:
            answer["alignments"] = [[[list(link) for link in h.alignment] for h in hyps]
                                    for hyps in per_text]
        if nbest == 1:  # one per text, not a list of one
            answer = {key: [hyps[0] for hyps in value] for key, value in answer.items()}
        return JSONResponse({**answer, "beam": beam, "nbest": nbest})

    async def attention(self, request: Request) -> Response:
        cfg = self.cfg
        body = await read_json(request, cfg.max_request_bytes, ("text", "target"),
                               cfg.body_timeout_s)
        text = read_text(body.get("text"), "text")
        pieces = len(self.translator.tokenizer.encode_src([text])[0])
        limit = min(self.max_positions - 1, cfg.max_attention_pieces)
        if pieces > limit:
            raise RequestError(400, f"the text has {pieces} pieces, over the limit of {limit} "
                                    f"that /attention draws; give a shorter sentence")
        target = self.read_target(body, pieces)
        return JSONResponse((await submit(request, ("attention", target), [text], [pieces]))[0])

    def read_target(self, body: dict[str, Any], src_pieces: int) -> str | None:
        """The translation /attention draws (say, a candidate /translate listed), checked
        against the longest the model may give a source of `src_pieces`; None: greedy's."""
        if "target" not in body:
            return None
        target = read_text(body["target"], "target")
        limit = output_limit(src_pieces, self.translator.recipe.decode, self.max_positions)
        try:
            target_ids(self.translator.tokenizer, target, limit)
        except ValueError as e:
            raise RequestError(400, str(e)) from None
        return target

    async def health(self, request: Request) -> Response:
        batcher, translator = request.app.state.batcher, self.translator
        return JSONResponse({
            "status": "ok", "model": translator.arch, "parameters": self.parameters,
            "step": translator.step,
            "source_lang": translator.recipe.data.src_lang,
            "target_lang": translator.recipe.data.tgt_lang,
            "device": str(translator.device), "precision": translator.precision,
            "engine": translator.engine.name, "queue": batcher.queued,
            "decoding": batcher.decoding, "calls": batcher.calls, "limits": asdict(self.cfg)})

    async def page(self, request: Request) -> Response:
        return FileResponse(PAGE / "index.html")


LOOPBACK = ("localhost", "127.0.0.1", "::1")


def allowed_hosts(bound: str, extra: tuple = ()) -> set[str] | None:
    """The names a request's Host may give for a server bound to `bound`: the address itself
    and, for a loopback or specific address, the loopback names; None (any) for a wildcard
    address (0.0.0.0, ::) unless names are given."""
    if bound in ("0.0.0.0", "::", "") and not extra:
        return None
    return {name.lower() for name in (bound, *LOOPBACK, *extra)}


class HostGuard:
    """ASGI middleware that refuses requests whose Host is not one of `hosts` (421), and POSTs
    whose body is not declared `application/json` (415): a page on another site can send a
    "simple" cross-site POST (text/plain) without asking the browser first, and can reach
    127.0.0.1 under a DNS name of its own. Both answers are JSON."""

    def __init__(self, app: Starlette, hosts: set[str] | None):
        self.app, self.hosts = app, hosts
        self.state, self.router = app.state, app.router  # the app's, as Starlette has them

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http":
            headers = {k.decode("latin-1").lower(): v.decode("latin-1")
                       for k, v in scope["headers"]}
            refusal = self.refusal(scope["method"], headers)
            if refusal is not None:
                await error_response(*refusal)(scope, receive, send)
                return
        await self.app(scope, receive, send)

    def refusal(self, method: str, headers: dict[str, str]) -> tuple[int, str] | None:
        if self.hosts is not None:
            host = host_name(headers.get("host", ""))
            if host not in self.hosts:
                return 421, (f"the Host header names {host or 'nothing'!r}, not this server; "
                             f"start it with --allow-host {host or 'NAME'} to accept that name")
        if method == "POST":
            kind = headers.get("content-type", "").split(";")[0].strip().lower()
            if kind != "application/json":
                return 415, (f"the body must be sent as application/json, not "
                             f"{kind or 'without a Content-Type'}")
        return None


def host_name(header: str) -> str:
    """The host of a Host header, without its port: 'localhost:8000' -> 'localhost',
    '[::1]:8000' -> '::1'."""
    header = header.strip().lower()
    if header.startswith("["):
        host, _, rest = header[1:].partition("]")
        return host if rest in ("", ":") or (rest[:1] == ":" and rest[1:].isdigit()) else header
    if header.count(":") == 1:  # name:port (a bare IPv6 address has several)
        host, port = header.split(":")
        return host if port.isdigit() else header
    return header


async def submit(request: Request, key: Hashable, texts: list[str], work: list[int]) -> list:
    """The batcher's results for `texts`: a full queue is 429, a request past its deadline or
    cut short by the server stopping 503, and a failed decoding 500."""
    try:
        return await request.app.state.batcher.submit(key, texts, work)
    except QueueFull as e:
        raise RequestError(429, str(e)) from None
    except (DeadlineExceeded, ShuttingDown) as e:
        raise RequestError(503, str(e)) from None
    except Exception as e:
        log.exception("decoding failed")
        raise RequestError(500, f"decoding failed: {type(e).__name__}: {first_line(e)}") from None


def logged(handler: Callable[[Request], Awaitable[Response]]
           ) -> Callable[[Request], Awaitable[Response]]:
    """`handler` with refusals turned into JSON errors and one debug line per request."""

    async def endpoint(request: Request) -> Response:
        start = time.perf_counter()
        try:
            response = await handler(request)
        except RequestError as e:
            response = error_response(e.status, str(e),
                                      **({"Retry-After": "1"} if e.status in (429, 503) else {}))
        except Exception as e:  # a bug: still JSON, and the server goes on
            log.exception("%s %s failed", request.method, request.url.path)
            response = error_response(500, f"{type(e).__name__}: {first_line(e)}")
        log.debug("%s %s %d %.1f ms", request.method, request.url.path, response.status_code,
                  1000 * (time.perf_counter() - start))
        return response

    return endpoint


async def http_error(request: Request, exc: HTTPException) -> Response:
    """Starlette's own refusals (404, 405) as JSON too."""
    return error_response(exc.status_code, exc.detail)
