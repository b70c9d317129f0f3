"""Reading a request: its body as strict JSON, then each field checked, before anything queues.

Python's `json` reads more than a request may hold, and some of it fails later, far from the
body: an integer of over 4,300 digits raises ValueError (not JSONDecodeError) as it converts,
nesting a thousand deep a RecursionError, and a lone surrogate (`"\\ud800"`, a valid escape)
makes a string that no tokenizer or UTF-8 answer can take. Here each is a `RequestError` (400)
that names the field where there is one: a body that is not UTF-8, starts with a byte order
mark or is not JSON; NaN and Infinity (not JSON); a field given twice (which one counts?);
nesting past the recursion limit; an integer of over `MAX_DIGITS` digits (kept as its length,
`LongNumber`, which no field takes); a text with a lone surrogate. Errors show a value cut
short and escaped (`shown`), never the request echoed back.

Tests: tests/reliability/test_serve_malformed.py, tests/serve/test_app.py.
"""

from __future__ import annotations

import asyncio
import json
import math
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request

from translate.tokenizer import unicode_error

MAX_DIGITS = 20  # an integer literal longer than this is no field's value (int64 has 19 digits)


class RequestError(Exception):
    """A request the server refuses: its HTTP status and a message for the client."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class LongNumber:
    """An integer literal of more than MAX_DIGITS digits, kept as its length (not converted)."""

    digits: int


def _integer(literal: str) -> int | LongNumber:
    digits = len(literal.lstrip("-"))
    return LongNumber(digits) if digits > MAX_DIGITS else int(literal)


def _not_json(constant: str):
    raise RequestError(400, f"the body is not JSON: {constant} is not JSON; give a number")


def _unique_fields(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    fields: dict[str, Any] = {}
    for name, value in pairs:
        if name in fields:
            raise RequestError(400, f"the field {cut(name)!r} is given twice; give it once")
        fields[name] = value
    return fields


DECODER = json.JSONDecoder(parse_int=_integer, parse_constant=_not_json,
                           object_pairs_hook=_unique_fields)


async def read_json(request: Request, limit: int, fields: tuple[str, ...],
                    timeout: float = 10.0) -> dict[str, Any]:
    """The body as a JSON object with only `fields`, read no further than `limit` bytes and
    for no longer than `timeout` seconds."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise RequestError(413, f"the body has {declared} bytes, over the limit of {limit}")

    async def read() -> bytearray:
        body = bytearray()
        async for chunk in request.stream():
            body += chunk
            if len(body) > limit:
                raise RequestError(413, f"the body is over the limit of {limit} bytes")
        return body

    try:
        body = await asyncio.wait_for(read(), timeout)
    except asyncio.TimeoutError:
        raise RequestError(408, f"the body did not arrive within {timeout:g} s") from None
    value = parse_json(bytes(body))
    if not isinstance(value, dict):
        raise RequestError(400, f"the body must be a JSON object, not {json_type(value)}")
    unknown = sorted(set(value) - set(fields))
    if unknown:
        raise RequestError(400, f"unknown field {cut(unknown[0])!r}; valid: {', '.join(fields)}")
    return value


def parse_json(body: bytes) -> Any:
    """`body` read as strict JSON in UTF-8 (see the module's docstring)."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as e:
        raise RequestError(400, f"the body is not JSON: byte {e.start} (0x{body[e.start]:02x}) "
                                f"is not UTF-8; send JSON in UTF-8") from None
    if text.startswith("\ufeff"):
        raise RequestError(400, "the body starts with a byte order mark; send JSON in UTF-8 "
                                "without one")
    try:
        return DECODER.decode(text)
    except json.JSONDecodeError as e:
        raise RequestError(400, f"the body is not JSON: {e}") from None
    except RecursionError:
        raise RequestError(400, "the body nests too deeply to read; a request is an object "
                                "of strings, numbers and one list of strings") from None


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
    """The field `name`: one sentence of whole characters."""
    if not isinstance(text, str):
        raise RequestError(400, f"{name} must be a string, not {json_type(text)}")
    why = unicode_error(text)  # a lone surrogate: half of a character beyond U+FFFF
    if why:
        raise RequestError(400, f"{name} {why}: send each character beyond U+FFFF whole, in "
                                f"UTF-8 or as a surrogate pair")
    if not text.strip():
        raise RequestError(400, f"{name} is empty")
    if any(c in text.strip() for c in "\r\n"):
        raise RequestError(400, f"{name} holds a line break: give one sentence per item")
    return text


def read_int(body: dict[str, Any], name: str, default: int, low: int, high: int) -> int:
    value = body.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise RequestError(400, f"{name} must be an integer from {low} to {high}, got "
                                f"{shown(value)}")
    return value


def read_bool(body: dict[str, Any], name: str, default: bool) -> bool:
    value = body.get(name, default)
    if not isinstance(value, bool):
        raise RequestError(400, f"{name} must be true or false, got {shown(value)}")
    return value


def json_type(value: Any) -> str:
    names = {dict: "an object", list: "a list", str: "a string", bool: "a boolean",
             int: "a number", float: "a number", LongNumber: "a number", type(None): "null"}
    return names.get(type(value), type(value).__name__)


def shown(value: Any) -> str:
    """A field's value as an error names it: a list or object by its type, a number or string
    as JSON (surrogates escaped), cut short."""
    if isinstance(value, LongNumber):
        return f"a {value.digits}-digit number"
    if isinstance(value, float) and not math.isfinite(value):  # 1e999
        return "a number out of range"
    if isinstance(value, (list, dict)):
        return json_type(value)
    return cut(json.dumps(value))


def cut(text: str, most: int = 40) -> str:
    return text if len(text) <= most else text[:most - 3] + "..."
