"""`translate serve` against malformed requests: a body that is not UTF-8 JSON, JSON that Python
reads but a request never holds (NaN, a field given twice, an integer of thousands of digits,
nesting thousands deep), and fields of the wrong type, range or text (lone surrogates, line
breaks) are each a 400 whose JSON error names what is wrong (the field, where there is one),
answered before the model is called; the server then answers a good request."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("starlette")
pytest.importorskip("httpx")
from starlette.testclient import TestClient  # noqa: E402

from translate.serve import ServeConfig, build_app, load_translator  # noqa: E402

JSON = {"Content-Type": "application/json"}
GOOD = {"text": "A dog runs in the snow."}
DIGITS = "1" * 5000  # past Python's 4,300-digit limit on converting an integer


def nested(depth: int, inner: str = "1", opening: str = "[", closing: str = "]") -> str:
    return opening * depth + inner + closing * depth


def case(name: str, path: str, body: bytes | dict, message: str):
    """A malformed request: `body` is sent as it is (bytes) or as JSON (a dict, its lone
    surrogates escaped); `message` is part of the error it must get."""
    return pytest.param(path, body, message, id=name)


CASES = [
    # the body: not JSON, or not UTF-8
    case("empty body", "/translate", b"", "the body is not JSON"),
    case("only whitespace", "/translate", b" \r\n\t ", "the body is not JSON"),
    case("a form", "/translate", b"text=A+dog+runs", "the body is not JSON"),
    case("cut short", "/translate", b'{"text": "A dog', "the body is not JSON"),
    case("trailing data", "/translate", b'{"text": "A dog."} x', "the body is not JSON"),
    case("two objects", "/translate", b'{"text": "a"}{"text": "b"}', "the body is not JSON"),
    case("single quotes", "/translate", b"{'text': 'A dog.'}", "the body is not JSON"),
    case("trailing comma", "/translate", b'{"text": "A dog.",}', "the body is not JSON"),
    case("a comment", "/translate", b'{"text": "A dog." /* a dog */}', "the body is not JSON"),
    case("unquoted key", "/translate", b'{text: "A dog."}', "the body is not JSON"),
    case("raw control character", "/translate", b'{"text": "A\x01dog"}', "the body is not JSON"),
    case("unknown escape", "/translate", b'{"text": "A \\q dog"}', "the body is not JSON"),
    case("short \\u escape", "/attention", b'{"text": "\\u12"}', "the body is not JSON"),
    case("a list", "/translate", b'["A dog."]', "must be a JSON object, not a list"),
    case("a string", "/translate", b'"A dog."', "must be a JSON object, not a string"),
    case("null", "/attention", b"null", "must be a JSON object, not null"),
    case("true", "/translate", b"true", "must be a JSON object, not a boolean"),
    case("a 5000-digit number", "/translate", DIGITS.encode(),
         "must be a JSON object, not a number"),
    case("Latin-1", "/translate", '{"text": "Café"}'.encode("latin-1"),
         "byte 13 (0xe9) is not UTF-8"),
    case("lone continuation byte", "/translate", b'{"text": "\x80"}', "(0x80) is not UTF-8"),
    case("overlong encoding", "/translate", b'{"text": "\xc0\xaf"}', "(0xc0) is not UTF-8"),
    case("UTF-8 encoded surrogate", "/attention", b'{"text": "\xed\xa0\x80"}',
         "(0xed) is not UTF-8"),
    case("byte 0xff", "/translate", b'{"text": "\xff"}', "(0xff) is not UTF-8"),
    case("cut inside a character", "/translate", b'{"text": "\xe2\x82', "(0xe2) is not UTF-8"),
    case("UTF-16", "/translate", json.dumps(GOOD).encode("utf-16"), "byte 0 (0xff) is not UTF-8"),
    case("UTF-16 without its mark", "/translate", json.dumps(GOOD).encode("utf-16-le"),
         "the body is not JSON"),
    case("UTF-8 byte order mark", "/translate", b"\xef\xbb\xbf" + json.dumps(GOOD).encode(),
         "the body starts with a byte order mark"),
    # numbers JSON does not have
    case("NaN beam", "/translate", b'{"text": "A dog.", "beam": NaN}', "NaN is not JSON"),
    case("Infinity beam", "/translate", b'{"text": "A dog.", "beam": Infinity}',
         "Infinity is not JSON"),
    case("-Infinity nbest", "/translate", b'{"text": "A dog.", "nbest": -Infinity}',
         "-Infinity is not JSON"),
    case("NaN in texts", "/translate", b'{"texts": ["A dog.", NaN]}', "NaN is not JSON"),
    case("NaN target", "/attention", b'{"text": "A dog.", "target": NaN}', "NaN is not JSON"),
    # nesting
    case("20,000 nested lists", "/translate", nested(20_000).encode(), "nests too deeply"),
    case("12,000 nested objects", "/translate", nested(12_000, "1", '{"":', "}").encode(),
         "nests too deeply"),
    case("10,000 lists and objects", "/translate",
         nested(5_000, "1", '[{"a":', "}]").encode(), "nests too deeply"),
    case("5,000 deep in texts", "/translate", f'{{"texts": {nested(5_000)}}}'.encode(),
         "nests too deeply"),
    case("5,000 deep in beam", "/translate",
         f'{{"text": "A dog.", "beam": {nested(5_000)}}}'.encode(), "nests too deeply"),
    case("20,000 deep in target", "/attention",
         f'{{"text": "A dog.", "target": {nested(20_000)}}}'.encode(), "nests too deeply"),
    case("50 deep in texts", "/translate", f'{{"texts": [{nested(50)}]}}'.encode(),
         "texts[0] must be a string, not a list"),
    # integers of thousands of digits, and numbers out of range
    case("5000-digit beam", "/translate", f'{{"text": "A dog.", "beam": {DIGITS}}}'.encode(),
         "beam must be an integer from 1 to 16, got a 5000-digit number"),
    case("-5000-digit nbest", "/translate",
         f'{{"text": "A", "beam": 5, "nbest": -{DIGITS}}}'.encode(),
         "nbest must be an integer from 1 to 5, got a 5000-digit number"),
    case("5000-digit text", "/translate", f'{{"text": {DIGITS}}}'.encode(),
         "text must be a string, not a number"),
    case("5000-digit in texts", "/translate", f'{{"texts": ["A dog.", {DIGITS}]}}'.encode(),
         "texts[1] must be a string, not a number"),
    case("5000-digit target", "/attention", f'{{"text": "A dog.", "target": {DIGITS}}}'.encode(),
         "target must be a string, not a number"),
    case("5000-digit attention text", "/attention", f'{{"text": {DIGITS}}}'.encode(),
         "text must be a string, not a number"),
    case("4300-digit beam", "/translate", f'{{"text": "A", "beam": {DIGITS[:4300]}}}'.encode(),
         "beam must be an integer from 1 to 16, got a 4300-digit number"),
    case("21-digit beam", "/translate", {"text": "A", "beam": 10 ** 20},
         "beam must be an integer from 1 to 16, got a 21-digit number"),
    case("1e999 beam", "/translate", b'{"text": "A dog.", "beam": 1e999}',
         "beam must be an integer from 1 to 16, got a number out of range"),
    case("5000-digit float beam", "/translate",
         f'{{"text": "A dog.", "beam": {DIGITS}.5}}'.encode(),
         "beam must be an integer from 1 to 16, got a number out of range"),
    # a field given twice
    case("text twice", "/translate", b'{"text": "A dog.", "text": "A cat."}',
         "the field 'text' is given twice"),
    case("beam twice", "/translate", b'{"text": "A dog.", "beam": 2, "beam": 16}',
         "the field 'beam' is given twice"),
    case("texts twice", "/translate", b'{"texts": ["a"], "texts": ["b"]}',
         "the field 'texts' is given twice"),
    case("target twice", "/attention", b'{"text": "A dog.", "target": "a", "target": "b"}',
         "the field 'target' is given twice"),
    case("a key twice in a nested object", "/translate", b'{"texts": [{"a": 1, "a": 2}]}',
         "the field 'a' is given twice"),
    # the fields: which, and their types and ranges
    case("unknown field", "/translate", {"txt": "A dog."}, "unknown field 'txt'"),
    case("field in capitals", "/translate", {"Text": "A dog."}, "unknown field 'Text'"),
    case("a surrogate in a field's name", "/translate", {"te\ud800xt": "A dog."},
         "unknown field 'te\\ud800xt'"),
    case("a 10,000-character field name", "/translate", {"x" * 10_000: 1},
         "unknown field 'xxxxxxxx"),
    case("text and texts", "/translate", {"text": "a", "texts": ["b"]}, "give 'texts'"),
    case("no field", "/translate", {}, "give 'texts'"),
    case("only beam", "/translate", {"beam": 2}, "give 'texts'"),
    case("texts a string", "/translate", {"texts": "A dog."},
         "'texts' must be a list of strings, not a string"),
    case("texts an object", "/translate", {"texts": {"0": "A dog."}},
         "'texts' must be a list of strings, not an object"),
    case("texts null", "/translate", {"texts": None},
         "'texts' must be a list of strings, not null"),
    case("texts a number", "/translate", {"texts": 3}, "'texts' must be a list of strings, not a"),
    case("texts empty", "/translate", {"texts": []}, "'texts' holds 0 sentences; give 1 to 64"),
    case("65 texts", "/translate", {"texts": ["a"] * 65}, "'texts' holds 65 sentences"),
    case("a null in texts", "/translate", {"texts": ["a", None]},
         "texts[1] must be a string, not null"),
    case("a list in texts", "/translate", {"texts": [["a"]]},
         "texts[0] must be a string, not a list"),
    case("an object in texts", "/translate", {"texts": [{"text": "a"}]},
         "texts[0] must be a string, not an object"),
    case("a boolean in texts", "/translate", {"texts": [True]},
         "texts[0] must be a string, not a boolean"),
    case("an empty text in texts", "/translate", {"texts": ["a", "b", ""]}, "texts[2] is empty"),
    case("a blank text in texts", "/translate", {"texts": ["\u00a0\u3000 "]}, "texts[0] is empty"),
    case("a line break in texts", "/translate", {"texts": ["one\ntwo"]},
         "texts[0] holds a line break"),
    case("a carriage return", "/translate", {"text": "one\rtwo"}, "text holds a line break"),
    case("beam 0", "/translate", {"text": "a", "beam": 0},
         "beam must be an integer from 1 to 16, got 0"),
    case("beam -1", "/translate", {"text": "a", "beam": -1}, "got -1"),
    case("beam over the limit", "/translate", {"text": "a", "beam": 17}, "got 17"),
    case("beam 2.5", "/translate", {"text": "a", "beam": 2.5}, "got 2.5"),
    case("beam 5.0", "/translate", {"text": "a", "beam": 5.0}, "got 5.0"),
    case("beam 1e2", "/translate", b'{"text": "a", "beam": 1e2}', "got 100.0"),
    case("beam a string", "/translate", {"text": "a", "beam": "5"}, 'got "5"'),
    case("beam a boolean", "/translate", {"text": "a", "beam": True}, "got true"),
    case("beam null", "/translate", {"text": "a", "beam": None}, "got null"),
    case("beam a list", "/translate", {"text": "a", "beam": [5]}, "got a list"),
    case("beam an object", "/translate", {"text": "a", "beam": {"size": 5}}, "got an object"),
    case("beam a 10,000-character string", "/translate", {"text": "a", "beam": "5" * 10_000},
         'got "555555'),
    case("nbest 0", "/translate", {"text": "a", "nbest": 0}, "nbest must be an integer from 1"),
    case("nbest over the beam", "/translate", {"text": "a", "beam": 2, "nbest": 3},
         "nbest must be an integer from 1 to 2, got 3"),
    case("nbest a string", "/translate", {"text": "a", "nbest": "1"}, 'got "1"'),
    case("nbest a boolean", "/translate", {"text": "a", "nbest": False}, "got false"),
    case("alignments a string", "/translate", {"text": "a", "alignments": "true"},
         'alignments must be true or false, got "true"'),
    case("alignments a number", "/translate", {"text": "a", "alignments": 1},
         "alignments must be true or false, got 1"),
    case("alignments null", "/translate", {"text": "a", "alignments": None}, "got null"),
    case("alignments a list", "/translate", {"text": "a", "alignments": [True]}, "got a list"),
    case("alignments twice", "/translate", b'{"text": "a", "alignments": true, "alignments": 1}',
         "the field 'alignments' is given twice"),
    # lone surrogates: valid JSON escapes, not text
    case("lone high surrogate", "/translate", b'{"text": "\\ud800"}',
         "text holds a lone surrogate (U+D800) at character 0"),
    case("lone low surrogate", "/translate", b'{"text": "A dog \\udfff"}',
         "text holds a lone surrogate (U+DFFF) at character 6"),
    case("surrogate in texts", "/translate", b'{"texts": ["A dog.", "a\\udc00b"]}',
         "texts[1] holds a lone surrogate (U+DC00) at character 1"),
    case("a pair reversed", "/translate", b'{"text": "\\ude00\\ud83d"}',
         "text holds a lone surrogate (U+DE00) at character 0"),
    case("high surrogate and a letter", "/translate", b'{"text": "\\ud800\\u0041"}',
         "text holds a lone surrogate (U+D800) at character 0"),
    case("surrogate at the end of a long text", "/translate",
         {"text": "A dog runs. " * 300 + "\ud83d"}, "text holds a lone surrogate (U+D83D)"),
    case("surrogate in an attention text", "/attention", b'{"text": "A dog \\ud83d"}',
         "text holds a lone surrogate (U+D83D) at character 6"),
    case("surrogate in a target", "/attention",
         b'{"text": "A dog.", "target": "Ein Hund \\udead"}',
         "target holds a lone surrogate (U+DEAD) at character 9"),
    case("surrogate before a pair in a target", "/attention",
         b'{"text": "A dog.", "target": "\\ud83d\\ud83d\\ude00"}',
         "target holds a lone surrogate (U+D83D) at character 0"),
    # /attention's fields
    case("attention: no field", "/attention", {}, "text must be a string, not null"),
    case("attention: only a target", "/attention", {"target": "Ein Hund."},
         "text must be a string, not null"),
    case("attention: text a list", "/attention", {"text": ["A dog."]},
         "text must be a string, not a list"),
    case("attention: text a number", "/attention", {"text": 7}, "text must be a string, not a"),
    case("attention: texts", "/attention", {"texts": ["a"]},
         "unknown field 'texts'; valid: text, target"),
    case("attention: beam", "/attention", {"text": "a", "beam": 2}, "unknown field 'beam'"),
    case("attention: empty text", "/attention", {"text": " "}, "text is empty"),
    case("attention: a line break", "/attention", {"text": "one\ntwo"}, "text holds a line break"),
    case("attention: too long", "/attention", {"text": "dog " * 2000},
         "over the limit of 128 that /attention draws"),
]


@pytest.fixture(scope="module")
def client(trained_run):
    translator = load_translator(trained_run.run_dir, device="cpu", precision="fp32")
    with TestClient(build_app(translator, ServeConfig()), base_url="http://localhost") as client:
        yield client


def encoded(body: bytes | dict) -> bytes:
    return body if isinstance(body, bytes) else json.dumps(body).encode()


def test_the_cases_are_distinct():
    bodies = [(p.values[0], encoded(p.values[1])) for p in CASES]
    assert len(set(bodies)) == len(bodies) >= 50


@pytest.mark.parametrize("path, body, message", CASES)
def test_a_malformed_request_is_400_before_the_model(client, path, body, message):
    batcher = client.app.state.batcher
    calls = batcher.calls
    answer = client.post(path, content=encoded(body), headers=JSON)
    assert answer.status_code == 400, answer.text
    assert answer.headers["content-type"] == "application/json"
    error = answer.json()["error"]
    assert list(answer.json()) == ["error"] and message in error, error
    assert len(error) < 300, error  # the request is not echoed back
    assert batcher.calls == calls  # refused before any call to the model
    good = client.post("/translate", json=GOOD)
    assert good.status_code == 200 and good.json()["translations"][0], good.text


@pytest.mark.parametrize("text", ["\u0000", "\ufeffA dog.", "\U0001f600 \U0010ffff", "\ufffe",
                                  "a" + "\u0301" * 5000, "\u202eA dog.", "A\u2029dog.",
                                  "\x1f\x7f A dog."])
def test_odd_but_whole_characters_are_translated(client, text):
    """Characters SentencePiece may not know, but text all the same: translated, not refused."""
    for path in ("/translate", "/attention"):
        answer = client.post(path, json={"text": text})
        assert answer.status_code == 200, (path, answer.text)
