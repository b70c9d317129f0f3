"""The ASGI app: JSON endpoints over one `Translator`, and the page that shows its attention.

    POST /translate  {"texts": [...], "beam": 5, "nbest": 1}  ->  {"translations", "scores"}
    POST /attention  {"text": "..."}  ->  the greedy translation, token labels, every weight
    GET  /health     ->  model, step, device, precision, queue depth
    GET  /           ->  the page (translate/serve/page/)

Every request is checked before it queues: a body over `max_request_bytes` is refused with 413,
a full queue with 429, a malformed request with 400, and a failed decoding answers 500 while the
server goes on. Errors are JSON, `{"error": "..."}`.

Shapes: H heads, S source pieces, T target pieces.
"""

from __future__ import annotations

import json
import logging
import time
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Awaitable, Callable, Hashable

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from translate.analysis.attention import AttentionMaps
from translate.api import Translator
from translate.models.attention import DECODER_SELF, ENCODER_SELF
from translate.serve.batching import Batcher, QueueFull
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

    def __post_init__(self):
        for name, value in asdict(self).items():
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0 \
                    or (value == 0 and name != "batch_wait_ms"):
                raise ValueError(f"{name} must be a positive number, got {value!r}")
        if self.max_queue < self.max_texts:
            raise ValueError(f"max_queue ({self.max_queue}) must be at least max_texts "
                             f"({self.max_texts}), or a full request could never queue")


class RequestError(Exception):
    """A request the server refuses: its HTTP status and a message for the client."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


def error_response(status: int, message: str, **headers: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status, headers=headers or None)


def build_app(translator: Translator, cfg: ServeConfig = ServeConfig()) -> Starlette:
    """The app serving `translator`; its batcher (`app.state.batcher`) lives with the app."""
    max_positions = translator.model.cfg.max_positions

    def run(key: Hashable, texts: list[str]) -> list:
        """The model's work (and the attention's JSON), in the batcher's worker thread."""
        if key == "attention":
            return [attention_json(translator.attention(text), translator.arch) for text in texts]
        _, beam, nbest = key
        return translator.translate(texts, beam=beam, nbest=nbest, return_scores=True)

    @asynccontextmanager
    async def lifespan(app: Starlette):
        app.state.batcher = Batcher(run, cfg.batch_wait_ms, cfg.max_batch, cfg.max_queue)
        app.state.batcher.start()
        yield
        await app.state.batcher.stop()

    async def translate(request: Request) -> Response:
        body = await read_json(request, cfg.max_request_bytes, ("texts", "text", "beam", "nbest"))
        texts = read_texts(body, cfg.max_texts)
        beam = read_int(body, "beam", 5, 1, cfg.max_beam)
        nbest = read_int(body, "nbest", 1, 1, beam)
        found = await submit(request, ("translate", beam, nbest), texts)
        if nbest == 1:  # a Translation per text
            translations, scores = [h.text for h in found], [round(h.score, 4) for h in found]
        else:  # a list of `nbest` per text, best first
            translations = [[h.text for h in hyps] for hyps in found]
            scores = [[round(h.score, 4) for h in hyps] for hyps in found]
        return JSONResponse({"translations": translations, "scores": scores, "beam": beam,
                             "nbest": nbest})

    async def attention(request: Request) -> Response:
        body = await read_json(request, cfg.max_request_bytes, ("text",))
        text = read_text(body.get("text"), "text")
        pieces, limit = len(translator.tokenizer.encode_src([text])[0]), max_positions - 1
        if pieces > limit:
            raise RequestError(400, f"the text has {pieces} pieces, over the model's limit of "
                                    f"{limit}")
        return JSONResponse((await submit(request, "attention", [text]))[0])

    async def health(request: Request) -> Response:
        batcher = request.app.state.batcher
        return JSONResponse({
            "status": "ok", "model": translator.arch, "step": translator.step,
            "device": str(translator.device), "precision": translator.precision,
            "engine": translator.engine.name, "queue": batcher.queued,
            "decoding": batcher.decoding, "calls": batcher.calls, "limits": asdict(cfg)})

    async def page(request: Request) -> Response:
        return FileResponse(PAGE / "index.html")

    routes = [Route("/translate", logged(translate), methods=["POST"]),
              Route("/attention", logged(attention), methods=["POST"]),
              Route("/health", logged(health), methods=["GET"]),
              Route("/", logged(page), methods=["GET"]),
              Mount("/page", StaticFiles(directory=PAGE), name="page")]
    return Starlette(routes=routes, lifespan=lifespan,
                     exception_handlers={HTTPException: http_error})


async def submit(request: Request, key: Hashable, texts: list[str]) -> list:
    """The batcher's results for `texts`: a full queue is 429 and a failed decoding 500."""
    try:
        return await request.app.state.batcher.submit(key, texts)
    except QueueFull as e:
        raise RequestError(429, str(e)) from None
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
                                      **({"Retry-After": "1"} if e.status == 429 else {}))
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


async def read_json(request: Request, limit: int, fields: tuple[str, ...]) -> dict[str, Any]:
    """The body as a JSON object with only `fields`, read no further than `limit` bytes."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise RequestError(413, f"the body has {declared} bytes, over the limit of {limit}")
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise RequestError(413, f"the body is over the limit of {limit} bytes")
    try:
        value = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise RequestError(400, f"the body is not JSON: {e}") from None
    if not isinstance(value, dict):
        raise RequestError(400, f"the body must be a JSON object, not {json_type(value)}")
    unknown = sorted(set(value) - set(fields))
    if unknown:
        raise RequestError(400, f"unknown field {unknown[0]!r}; valid: {', '.join(fields)}")
    return value


def read_texts(body: dict[str, Any], max_texts: int) -> list[str]:
    """`texts` (a list of sentences) or `text` (one), checked."""
    if ("texts" in body) == ("text" in body):
        raise RequestError(400, "give 'texts' (a list of sentences) or 'text' (one sentence)")
    if "text" in body:
        return [read_text(body["text"], "text")]
    texts = body["texts"]
    if not isinstance(texts, list):
        raise RequestError(400, f"'texts' must be a list of strings, not {json_type(texts)}")
    if not 1 <= len(texts) <= max_texts:
        raise RequestError(400, f"'texts' holds {len(texts)} sentences; give 1 to {max_texts}")
    return [read_text(text, f"texts[{i}]") for i, text in enumerate(texts)]


def read_text(text: Any, name: str) -> str:
    if not isinstance(text, str):
        raise RequestError(400, f"{name} must be a string, not {json_type(text)}")
    if not text.strip():
        raise RequestError(400, f"{name} is empty")
    if any(c in text.strip() for c in "\r\n"):
        raise RequestError(400, f"{name} holds a line break: give one sentence per item")
    return text


def read_int(body: dict[str, Any], name: str, default: int, low: int, high: int) -> int:
    value = body.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise RequestError(400, f"{name} must be an integer from {low} to {high}, got "
                                f"{json.dumps(value)}")
    return value


def json_type(value: Any) -> str:
    names = {dict: "an object", list: "a list", str: "a string", bool: "a boolean",
             int: "a number", float: "a number", type(None): "null"}
    return names.get(type(value), type(value).__name__)


def attention_json(maps: AttentionMaps, arch: str) -> dict[str, Any]:
    """Token labels and every module's weights, (H, T_query, T_key) rounded to 4 places, with
    the labels of its axes: `queries` and `keys` name one of the three piece lists."""
    modules = []
    for name, w in maps.weights.items():
        role, layer = maps.roles[name]
        if role == ENCODER_SELF:
            queries = keys = "src_pieces"
        elif role == DECODER_SELF:
            queries = keys = "tgt_in_pieces"
        else:  # cross-attention and the RNN's alignment: each output piece over the source
            queries, keys = "out_pieces", "src_pieces"
        modules.append({"name": name, "role": role, "layer": layer, "queries": queries,
                        "keys": keys, "shape": list(w.shape),
                        "weights": w.double().mul(1e4).round().div(1e4).tolist()})
    return {"translation": maps.translation, "model": arch, "src_pieces": maps.src_pieces,
            "tgt_in_pieces": maps.tgt_in_pieces, "out_pieces": maps.out_pieces,
            "modules": modules}

