"""`translate serve` against hostile requests: a Host that names another site (DNS rebinding) is
421, a POST that is not application/json (what a cross-site page may send without asking) is
415, /attention's longest accepted input, on a model of the recipe's size, answers within
5 MB (with the longest target too), and a target of the wrong type, empty, too long or odd is a
400 or drawn. Each refusal is a JSON error, and the server answers the next request. SIGINT or
SIGTERM while the model works answers every client and exits without an abort."""

from __future__ import annotations

import json
import signal
import socket
import threading
import time
from typing import Callable
from urllib.parse import urlparse

import httpx
import pytest

pytest.importorskip("starlette")
pytest.importorskip("httpx")
from starlette.testclient import TestClient  # noqa: E402

from translate.analysis.attention import output_limit  # noqa: E402
from translate.checkpoint import read_checkpoint, write_checkpoint  # noqa: E402
from translate.config import load_recipe  # noqa: E402
from translate.models import build_model  # noqa: E402
from translate.serve import ServeConfig, build_app, load_translator  # noqa: E402
from translate.serve.attention_json import decode_weights  # noqa: E402
from translate.serve.process import ServerProcess  # noqa: E402

TEXT = {"text": "A dog runs in the snow."}


@pytest.fixture(scope="module")
def translator(trained_run):
    return load_translator(trained_run.run_dir, device="cpu", precision="fp32")


def client_for(translator, bound="127.0.0.1", host="localhost", **limits) -> TestClient:
    return TestClient(build_app(translator, ServeConfig(**limits), bound),
                      base_url=f"http://{host}")


def answers_after(client: TestClient) -> None:
    """The server goes on: a good request from a good host is answered."""
    good = client.post("/translate", json=TEXT, headers={"Host": "localhost"})
    assert good.status_code == 200 and good.json()["translations"]


@pytest.mark.parametrize("host", ["evil.example", "evil.example:8000", "127.0.0.1.evil.example",
                                  "localhost.evil.example", "[::2]:8000", "", "LOCALHOST:8000x"])
def test_a_host_that_names_another_site_is_421(translator, host):
    with client_for(translator) as client:
        for method, path in (("POST", "/translate"), ("POST", "/attention"), ("GET", "/health"),
                             ("GET", "/"), ("GET", "/page/app.js")):
            answer = client.request(method, path, json=TEXT if method == "POST" else None,
                                    headers={"Host": host})
            assert answer.status_code == 421, (method, path, answer.text)
            assert "not this server" in answer.json()["error"]
        answers_after(client)


@pytest.mark.parametrize("host", ["localhost", "localhost:8000", "127.0.0.1:8000", "[::1]:8000",
                                  "LocalHost"])
def test_loopback_names_are_this_server(translator, host):
    with client_for(translator) as client:
        answer = client.get("/health", headers={"Host": host})
        assert answer.status_code == 200 and answer.json()["status"] == "ok"


def test_allow_host_adds_a_name_and_a_wildcard_bind_takes_any(translator):
    with client_for(translator, allowed_hosts=("translate.lan",)) as client:
        assert client.get("/health", headers={"Host": "translate.lan:8000"}).status_code == 200
        assert client.get("/health", headers={"Host": "other.lan"}).status_code == 421
    with client_for(translator, bound="0.0.0.0") as client:
        assert client.get("/health", headers={"Host": "any.name:80"}).status_code == 200
    with client_for(translator, bound="0.0.0.0", allowed_hosts=("gpu1",)) as client:
        assert client.get("/health", headers={"Host": "gpu1"}).status_code == 200
        assert client.get("/health", headers={"Host": "evil.example"}).status_code == 421


@pytest.mark.parametrize("content_type", [None, "text/plain", "text/plain;charset=UTF-8",
                                          "application/x-www-form-urlencoded",
                                          "multipart/form-data; boundary=x",
                                          "application/jsonp", "application/json-seq"])
def test_a_post_not_declared_json_is_415(translator, content_type):
    headers = {} if content_type is None else {"Content-Type": content_type}
    with client_for(translator) as client:
        for path in ("/translate", "/attention"):
            answer = client.post(path, content=json.dumps(TEXT), headers=headers)
            assert answer.status_code == 415, (path, answer.text)
            assert "must be sent as application/json" in answer.json()["error"]
        answers_after(client)


@pytest.mark.parametrize("content_type", ["application/json", "application/json; charset=utf-8",
                                          "Application/JSON"])
def test_json_in_any_spelling_is_taken(translator, content_type):
    with client_for(translator) as client:
        answer = client.post("/translate", content=json.dumps(TEXT),
                             headers={"Content-Type": content_type})
        assert answer.status_code == 200, answer.text


@pytest.fixture(scope="module")
def recipe_sized_path(trained_run, recipe_path, tmp_path_factory):
    """The Multi30k recipe's model (untrained: it decodes to the length limit, the most work)
    with the tiny run's tokenizer."""
    data = read_checkpoint(trained_run.best_checkpoint)
    model_cfg = load_recipe(recipe_path).model
    data["recipe"]["model"] = load_recipe(recipe_path).to_dict()["model"]
    vocab = int(data["model"]["output.weight"].shape[0])
    data["model"] = build_model(model_cfg, vocab, vocab, True).state_dict()
    path = tmp_path_factory.mktemp("recipe_sized") / "model.pt"
    write_checkpoint(path, data)
    return path


@pytest.fixture(scope="module")
def recipe_sized(recipe_sized_path):
    return load_translator(recipe_sized_path, device="cpu", precision="fp32")


def longest(encode: Callable[[str], list[int]], word: str, limit: int) -> str:
    """The most copies of `word`, spaced, that `encode` makes at most `limit` pieces of."""
    n = max(n for n in range(1, limit + 1) if len(encode(" ".join([word] * n))) <= limit)
    return " ".join([word] * n)


def test_attention_on_the_longest_accepted_input_answers_within_5_mb(recipe_sized):
    """The longest source, greedy decoding to the length limit; and the same source with the
    longest target it takes."""
    tokenizer, limit = recipe_sized.tokenizer, ServeConfig().max_attention_pieces
    text = longest(lambda text: tokenizer.encode_src([text])[0], "dog", limit)
    assert len(tokenizer.encode_src([text])[0]) >= limit - 1
    out_limit = output_limit(len(tokenizer.encode_src([text])[0]), recipe_sized.recipe.decode,
                             recipe_sized.model.cfg.max_positions)
    target = longest(lambda text: tokenizer.encode_tgt([text])[0][:-1], "Hund", out_limit)
    with client_for(recipe_sized) as client:
        over = client.post("/attention", json={"text": " ".join(["dog"] * 400)})
        assert over.status_code == 400 and "over the limit of 128" in over.json()["error"]
        for body in ({"text": text}, {"text": text, "target": target}):
            answer = client.post("/attention", json=body)
            assert answer.status_code == 200, answer.text
            size = len(answer.content)
            modules = answer.json()["modules"]
            cells = sum(m["shape"][0] * m["shape"][1] * m["shape"][2] for m in modules)
            print(f"attention ({', '.join(body)}): {cells} weights, {size} bytes")
            assert cells > 500_000 and size <= 5 * 2 ** 20, (cells, size)
            for module in modules[:2]:
                assert decode_weights(module["weights"], module["shape"]).shape[0] == 4


@pytest.mark.parametrize("target, message", [
    (None, "target must be a string, not null"),
    (3, "target must be a string, not a number"),
    (True, "target must be a string, not a boolean"),
    (["Ein Hund rennt."], "target must be a string, not a list"),
    ({"text": "Ein Hund rennt."}, "target must be a string, not an object"),
    ("", "target is empty"),
    (" \t ", "target is empty"),
    ("Ein Hund rennt.\nEine Katze schläft.", "target holds a line break"),
    ("Hund " * 200, "pieces, over the limit of"),
    ("Hund" * 8000, "pieces, over the limit of"),  # one 32 kB word
])
def test_a_bad_attention_target_is_400_and_the_server_goes_on(translator, target, message):
    with client_for(translator) as client:
        answer = client.post("/attention", json={**TEXT, "target": target})
        assert answer.status_code == 400, answer.text
        assert message in answer.json()["error"]
        answers_after(client)


def test_an_attention_target_at_the_limit_is_drawn_one_over_is_400(translator):
    """The limit is the longest translation the model may give the source (greedy's)."""
    limit = output_limit(len(translator.tokenizer.encode_src([TEXT["text"]])[0]),
                         translator.recipe.decode, translator.model.cfg.max_positions)
    def encode(text: str) -> list[int]:
        return translator.tokenizer.encode_tgt([text])[0][:-1]

    at_limit = longest(encode, "Hund", limit)
    over = at_limit + " Hund Hund"
    with client_for(translator) as client:
        answer = client.post("/attention", json={**TEXT, "target": at_limit})
        assert answer.status_code == 200, answer.text
        assert len(answer.json()["out_pieces"]) == len(encode(at_limit)) + 1 <= limit + 1
        refused = client.post("/attention", json={**TEXT, "target": over})
        assert refused.status_code == 400
        assert refused.json()["error"] == (
            f"the target has {len(encode(over))} pieces, over the limit of {limit} for this "
            f"source (the longest translation the model may give it)")
        huge = client.post("/attention", json={**TEXT, "target": "Hund " * 20_000})
        assert huge.status_code == 413 and "over the limit of 65536" in huge.json()["error"]
        answers_after(client)


@pytest.mark.parametrize("target", ["\u0000", "😀 🐕‍🦺 ∑", "<script>alert(1)</script>",
                                    "\u202eEin Hund", "Ein\u00a0Hund\u200b."])
def test_odd_characters_in_a_target_are_drawn_not_a_crash(translator, target):
    with client_for(translator) as client:
        answer = client.post("/attention", json={**TEXT, "target": target})
        assert answer.status_code == 200, answer.text
        body = answer.json()
        assert body["forced"] is True and body["out_pieces"][-1] == "</s>"
        assert body["out_pieces"] == [translator.tokenizer.tgt.id_to_piece(i) for i in
                                      translator.tokenizer.encode_tgt([target])[0]]


STOPPING = {"error": "the server is shutting down"}


def posting(url: str, body: dict, answers: list) -> threading.Thread:
    """A client posting `body` to /translate in a thread of its own; its answer (or error)
    goes to `answers`."""
    def post():
        try:
            answers.append(httpx.post(url + "translate", json=body, timeout=120))
        except httpx.HTTPError as e:
            answers.append(e)

    sender = threading.Thread(target=post)
    sender.start()
    return sender


def await_health(url: str, field: str, value: int) -> None:
    deadline = time.monotonic() + 60
    while httpx.get(url + "health").json()[field] != value:
        assert time.monotonic() < deadline, f"/health's {field} never came to {value}"
        time.sleep(0.02)


@pytest.mark.parametrize("signum, status", [(signal.SIGINT, 130),
                                            (signal.SIGTERM, -signal.SIGTERM)])
def test_a_signal_mid_work_answers_every_client_and_exits_cleanly(recipe_sized_path, signum,
                                                                  status):
    """SIGINT or SIGTERM while a long call decodes and three requests wait behind it: each gets
    a JSON 503 at once, the call is ended at its next step, and the process exits within 10 s
    as the signal asks (130 on SIGINT, as after Ctrl-C; by the signal on SIGTERM), not by an
    abort (`terminate called without an active exception`, from torch still running in the
    model's thread as the interpreter finalized)."""
    server = on_cpu(recipe_sized_path, "--max-call-work", "1000000",
                    "--max-request-work", "1000000")
    answers: list = []
    try:
        senders = [posting(server.url, {"texts": [" ".join(["dog"] * 40)] * 16, "beam": 16},
                           answers)]
        await_health(server.url, "decoding", 16)
        senders += [posting(server.url, {"text": "A dog runs.", "beam": 2}, answers)
                    for _ in range(3)]
        await_health(server.url, "queue", 3)
        stopped = time.monotonic()
        server.process.send_signal(signum)
        for sender in senders:
            sender.join(30)
        assert [getattr(a, "status_code", a) for a in answers] == [503] * 4, answers
        assert all(a.json() == STOPPING and a.headers["content-type"] == "application/json"
                   for a in answers)
        assert server.wait(30) == status
        assert time.monotonic() - stopped < 10
        log = "".join(server.said)
        assert "terminate called" not in log and "Traceback" not in log, log
    finally:
        server.stop()


STUCK = ("import time; from translate.serve.app import Endpoints; "
         "Endpoints.work = lambda self, key, texts: time.sleep(60); "
         "from translate.cli import main; main()")


def test_a_call_that_cannot_end_in_time_is_left_and_the_process_exits(trained_run):
    """SIGINT while the model's thread is held where it cannot be stopped (one long operation;
    here a sleep): the client gets its 503, the call has 2 s to end, then the process exits at
    once with 130, skipping the finalization that would abort it."""
    server = ServerProcess(trained_run.run_dir, "--device", "cpu", timeout=120,
                           python=("-c", STUCK))
    answers: list = []
    try:
        sender = posting(server.url, TEXT, answers)
        await_health(server.url, "decoding", 1)
        stopped = time.monotonic()
        server.process.send_signal(signal.SIGINT)
        sender.join(30)
        assert answers[0].status_code == 503 and answers[0].json() == STOPPING
        assert server.wait(30) == 130
        assert 2 <= time.monotonic() - stopped < 10
        log = "".join(server.said)
        assert "the model's call did not end in time: exiting without waiting for it" in log
        assert "terminate called" not in log and "Traceback" not in log, log
    finally:
        server.stop()


def on_cpu(path, *options: str, nofile: int | None = None) -> ServerProcess:
    """`translate serve PATH` on the CPU in a subprocess (with a descriptor limit)."""
    return ServerProcess(path, "--device", "cpu", *options, timeout=120, nofile=nofile)


def address(server: ServerProcess) -> tuple[str, int]:
    parts = urlparse(server.url)
    return parts.hostname, parts.port


def test_stalled_clients_past_the_descriptor_limit_never_starve_health(trained_run):
    """300 connections that send nothing (or half a request line) against a server limited to
    256 descriptors: /health answers within 2 s throughout, and the log grows by a few lines."""
    server = on_cpu(trained_run.run_dir, nofile=256)
    url, said = server.url, server.said
    stalled, slowest = [], 0.0
    try:
        logged_before = len(said)
        for i in range(300):
            sock = socket.create_connection(address(server), timeout=5)
            if i % 3 == 0:
                sock.sendall(b"GET /health HT")  # half a request line, never finished
            stalled.append(sock)
            if i % 25 == 0:
                start = time.monotonic()
                answer = httpx.get(url + "health", timeout=10)
                slowest = max(slowest, time.monotonic() - start)
                assert answer.status_code == 200, answer.text
        for _ in range(10):  # and while they all stay open
            start = time.monotonic()
            assert httpx.get(url + "health", timeout=10).status_code == 200
            slowest = max(slowest, time.monotonic() - start)
            time.sleep(0.2)
        assert slowest < 2.0, slowest
        assert len(said) - logged_before <= 5, said[logged_before:]
        good = httpx.post(url + "translate", json=TEXT, timeout=30)
        assert good.status_code == 200 and good.json()["translations"]
    finally:
        for sock in stalled:
            sock.close()
        server.stop()


def test_a_head_or_body_that_never_comes_is_dropped_in_time(trained_run):
    server = on_cpu(trained_run.run_dir, "--head-timeout-s", "1", "--body-timeout-s", "1")
    url = server.url
    try:
        silent = socket.create_connection(address(server), timeout=10)
        silent.sendall(b"POST /translate HTTP/1.1\r\nHost: localhost\r\n")  # no end of head
        start = time.monotonic()
        assert silent.recv(100) == b""  # closed by the server, unanswered
        assert time.monotonic() - start < 5
        body_less = socket.create_connection(address(server), timeout=10)
        body_less.sendall(b"POST /translate HTTP/1.1\r\nHost: localhost\r\nContent-Type: "
                          b"application/json\r\nContent-Length: 100\r\n\r\n{\"text\"")
        answer = b""
        while b"\r\n\r\n" not in answer or not answer.endswith(b"}"):  # head and body may
            part = body_less.recv(4096)  # come in separate packets
            if not part:
                break
            answer += part
        answer = answer.decode()
        assert answer.startswith("HTTP/1.1 408"), answer
        assert '"error":"the body did not arrive within 1 s"' in answer
        assert httpx.get(url + "health", timeout=5).status_code == 200
    finally:
        server.stop()


IGNORING_SIGINT = ("import signal; signal.signal(signal.SIGINT, signal.SIG_IGN); "
                   "from translate.cli import main; main()")


def test_sigint_stops_a_server_started_with_sigint_ignored(trained_run):
    """A shell starts a background job (`translate serve ... &`) with SIGINT ignored: uvicorn
    still catches a SIGINT sent to it, and the process exits 130 as after Ctrl-C, not 0."""
    server = ServerProcess(trained_run.run_dir, "--device", "cpu", timeout=120,
                           python=("-c", IGNORING_SIGINT))
    try:
        await_health(server.url, "queue", 0)  # serving: uvicorn's handlers are in place
        server.process.send_signal(signal.SIGINT)
        assert server.wait(30) == 130
        assert not any("terminate called" in line for line in server.said)
    finally:
        server.stop()
