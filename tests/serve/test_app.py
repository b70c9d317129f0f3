"""`translate serve`'s app on a tiny trained model: the answers equal the Python API's, requests
from many clients share decoding calls, and every refusal is a JSON error after which the server
still answers."""

from __future__ import annotations

import asyncio
import threading
from contextlib import contextmanager

import pytest
import torch

pytest.importorskip("starlette", reason="translate serve needs the serve extra")
httpx = pytest.importorskip("httpx", reason="the tests talk to the app through httpx")

from starlette.testclient import TestClient  # noqa: E402

from helpers.files import read_jsonl  # noqa: E402
from translate.analysis.attention import CROSS, DECODER_SELF, ENCODER_SELF  # noqa: E402
from translate.loading import load_checkpoint  # noqa: E402
from translate.serve import ServeConfig, build_app, load_translator  # noqa: E402
from translate.serve.attention_json import decode_weights  # noqa: E402


@pytest.fixture(scope="module")
def translator(trained_run):
    return load_translator(trained_run.run_dir, device="cpu", precision="fp32")


@pytest.fixture(scope="module")
def sources(small_data) -> list[str]:
    return [row["en"] for row in read_jsonl(small_data / "test_2016_flickr.jsonl", 8)]


JSON = {"Content-Type": "application/json"}


@contextmanager
def serving(translator, **limits):
    """A TestClient on the app (its batcher running) with these limits."""
    with TestClient(build_app(translator, ServeConfig(**limits)),
                    base_url="http://localhost") as client:
        yield client


@pytest.fixture(scope="module")
def client(translator):
    with serving(translator) as client:
        yield client


def still_answers(client, translator) -> None:
    answer = client.post("/translate", json={"text": "A dog runs.", "beam": 2})
    assert answer.status_code == 200
    assert answer.json()["translations"] == [translator.translate("A dog runs.", beam=2,
                                                                  return_scores=True).text]


def posting(app, path: str, bodies: list[dict]) -> list:
    """The app's answers to `bodies` all sent at once, as many clients would."""

    async def main():
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as c:
                return await asyncio.gather(*(c.post(path, json=body) for body in bodies))

    return asyncio.run(main())


def test_translate_equals_the_translator_for_the_same_settings(client, translator, sources):
    answer = client.post("/translate", json={"texts": sources, "beam": 3})
    assert answer.status_code == 200
    expected = translator.translate(sources, beam=3, return_scores=True)
    body = answer.json()
    assert body["translations"] == [h.text for h in expected]
    assert body["scores"] == pytest.approx([h.score for h in expected], abs=1e-4)
    assert (body["beam"], body["nbest"]) == (3, 1)
    one = client.post("/translate", json={"text": sources[1], "beam": 3}).json()
    assert one["translations"] == [expected[1].text]
    default = client.post("/translate", json={"text": sources[1]}).json()  # the recipe's beam
    assert default["beam"] == translator.recipe.decode.beam
    assert default["translations"] == [translator.translate(sources[1])]


def test_nbest_gives_a_list_per_input_best_first_with_scores(client, translator, sources):
    body = client.post("/translate", json={"texts": sources[:3], "beam": 4, "nbest": 3}).json()
    expected = translator.translate(sources[:3], beam=4, nbest=3, return_scores=True)
    assert body["translations"] == [[h.text for h in hyps] for hyps in expected]
    for scores in body["scores"]:
        assert len(scores) == 3 and scores == sorted(scores, reverse=True)
        assert all(s < 0 for s in scores)


def test_alignments_on_request_are_the_apis_per_hypothesis(client, translator, sources):
    one = client.post("/translate", json={"texts": sources[:3], "beam": 3,
                                          "alignments": True}).json()
    expected = translator.translate(sources[:3], beam=3, return_alignments=True)
    assert one["translations"] == [t.text for t in expected]
    assert one["alignments"] == [[list(link) for link in t.alignment] for t in expected]
    assert any(one["alignments"])
    many = client.post("/translate", json={"texts": sources[:2], "beam": 3, "nbest": 2,
                                           "alignments": True}).json()
    expected = translator.translate(sources[:2], beam=3, nbest=2, return_alignments=True)
    assert many["alignments"] == [[[list(link) for link in h.alignment] for h in hyps]
                                  for hyps in expected]
    assert "alignments" not in client.post("/translate", json={"text": sources[0]}).json()


def test_attention_carries_the_word_alignment_decode_gives(client, translator):
    text = "A dog runs in the snow."
    body = client.post("/attention", json={"text": text}).json()
    greedy = translator.translate(text, beam=1, return_alignments=True)
    assert body["alignment"]["links"] == [list(link) for link in greedy.alignment]
    assert body["alignment"]["layer"] == translator.recipe.model.decoder_layers - 1  # the last
    assert len(body["alignment"]["src_words"]) == len(body["src_pieces"])
    assert len(body["alignment"]["out_words"]) == len(body["out_pieces"])
    assert body["alignment"]["src_words"][-1] == -1  # EOS belongs to no word


def test_attention_has_every_transformer_module_with_its_role_and_labels(client, translator):
    body = client.post("/attention", json={"text": "A dog runs in the snow."}).json()
    cfg = translator.recipe.model
    assert body["translation"] == translator.translate("A dog runs in the snow.", beam=1)
    assert body["src_pieces"][-1] == "</s>" and body["tgt_in_pieces"][0] == "<s>"
    assert len(body["out_pieces"]) == len(body["tgt_in_pieces"])
    roles = [m["role"] for m in body["modules"]]
    assert roles.count(ENCODER_SELF) == cfg.encoder_layers
    assert roles.count(DECODER_SELF) == roles.count(CROSS) == cfg.decoder_layers
    axes = {ENCODER_SELF: ("src_pieces", "src_pieces"),
            DECODER_SELF: ("tgt_in_pieces", "tgt_in_pieces"), CROSS: ("out_pieces", "src_pieces")}
    for module in body["modules"]:
        assert (module["queries"], module["keys"]) == axes[module["role"]]
        shape = [cfg.heads, len(body[module["queries"]]), len(body[module["keys"]])]
        assert module["shape"] == shape
        weights = decode_weights(module["weights"], shape)
        torch.testing.assert_close(weights.sum(-1), torch.ones(shape[:2]), atol=2e-3, rtol=0)
    causal = decode_weights(*next((m["weights"], m["shape"]) for m in body["modules"]
                                  if m["role"] == DECODER_SELF))[0]
    assert causal[0, 0] == 1 and not causal[0, 1:].any()  # the first query sees only itself
    maps = translator.attention("A dog runs in the snow.")
    for module in body["modules"]:  # the recorded weights, to the encoding's 1 / 65535
        torch.testing.assert_close(decode_weights(module["weights"], module["shape"]),
                                   maps.weights[module["name"]].float(), atol=1e-5, rtol=0)


def test_attention_of_a_candidate_is_its_own_teacher_forced(client, translator):
    """The page's pick: the second n-best candidate, sent back as the target."""
    text = "A dog runs in the snow."
    second = client.post("/translate", json={"text": text, "beam": 5, "nbest": 2}
                         ).json()["translations"][0][1]
    body = client.post("/attention", json={"text": text, "target": second}).json()
    maps = translator.attention(text, second)
    pieces = [translator.tokenizer.tgt.id_to_piece(i)
              for i in translator.tokenizer.encode_tgt([second])[0]]  # EOS last
    assert (body["forced"], body["translation"]) == (True, maps.translation)
    assert body["out_pieces"] == pieces and body["tgt_in_pieces"] == ["<s>"] + pieces[:-1]
    for module in body["modules"]:
        torch.testing.assert_close(decode_weights(module["weights"], module["shape"]),
                                   maps.weights[module["name"]].float(), atol=1e-5, rtol=0)
    greedy = client.post("/attention", json={"text": text}).json()
    assert greedy["forced"] is False
    assert greedy["translation"] == translator.attention(text).translation
    assert greedy["modules"][0]["weights"] == body["modules"][0]["weights"]  # encoder: the same


def test_attention_of_the_rnn_is_its_alignment(trained_rnn_run):
    rnn = load_translator(trained_rnn_run.run_dir, device="cpu", precision="fp32")
    with serving(rnn) as client:
        body = client.post("/attention", json={"text": "Two dogs play."}).json()
        assert body["model"] == "rnn"
        [module] = body["modules"]
        assert (module["role"], module["queries"], module["keys"]) == (
            "additive attention", "out_pieces", "src_pieces")
        assert module["shape"] == [1, len(body["out_pieces"]), len(body["src_pieces"])]
        assert body["translation"] == rnn.translate("Two dogs play.", beam=1)


def test_health_names_the_model_and_the_queue(client, translator, trained_run):
    body = client.get("/health").json()
    assert body["model"] == "transformer" and body["step"] == translator.step
    loaded = load_checkpoint(trained_run.best_checkpoint)  # each tied tensor once
    assert body["parameters"] == sum(p.numel() for p in loaded.model.parameters())
    assert (body["device"], body["precision"], body["queue"]) == ("cpu", "fp32", 0)
    assert body["limits"]["max_beam"] == ServeConfig().max_beam
    assert (body["source_lang"], body["target_lang"]) == ("en", "de")


def test_health_names_the_runs_languages_not_a_fixed_pair(trained_run):
    """A German → English run says so: the page labels its boxes from these fields."""
    from dataclasses import replace

    reverse = load_translator(trained_run.run_dir, device="cpu", precision="fp32")
    data = replace(reverse.recipe.data, src_lang="de", tgt_lang="en")
    reverse.recipe = replace(reverse.recipe, data=data)
    with serving(reverse) as client:
        body = client.get("/health").json()
    assert (body["source_lang"], body["target_lang"]) == ("de", "en")


def test_the_page_and_its_files_are_served(client):
    page = client.get("/")
    assert page.status_code == 200 and 'id="heatmap"' in page.text
    assert "src=\"/page/app.js\"" in page.text and "http" not in page.text.split("<body>")[0]
    script = client.get("/page/app.js")
    assert script.status_code == 200 and "javascript" in script.headers["content-type"]
    assert client.get("/page/style.css").status_code == 200
    for name in ("figure.js", "export.js"):  # the drawing and the downloads, loaded first
        assert f'src="/page/{name}"' in page.text
        assert client.get(f"/page/{name}").status_code == 200
    missing = client.get("/nothing")
    assert missing.status_code == 404 and missing.json() == {"error": "Not Found"}


@pytest.mark.parametrize("path, body, message", [
    ("/translate", b"{not json", "the body is not JSON"),
    ("/translate", b"\xff\xfe", "the body is not JSON"),
    ("/translate", b'["a"]', "must be a JSON object, not a list"),
    ("/translate", {"texts": ["a"], "beem": 3}, "unknown field 'beem'"),
    ("/translate", {"texts": ["a"], "text": "b"}, "give 'texts'"),
    ("/translate", {"beam": 2}, "give 'texts'"),
    ("/translate", {"texts": []}, "'texts' holds 0 sentences; give 1 to 4"),
    ("/translate", {"texts": ["a"] * 5}, "'texts' holds 5 sentences; give 1 to 4"),
    ("/translate", {"texts": "a dog"}, "'texts' must be a list of strings, not a string"),
    ("/translate", {"texts": ["a", 3]}, "texts[1] must be a string, not a number"),
    ("/translate", {"texts": ["a", "  "]}, "texts[1] is empty"),
    ("/translate", {"texts": ["one\ntwo"]}, "texts[0] holds a line break"),
    ("/translate", {"text": "one\r\ntwo"}, "text holds a line break"),
    ("/translate", b'{"texts": ["a", "a \\ud800 dog"]}', "texts[1] holds a lone surrogate "
                                                         "(U+D800) at character 2"),
    ("/attention", b'{"text": "\\udfff"}', "text holds a lone surrogate (U+DFFF)"),
    ("/translate", {"text": "a", "beam": 0}, "beam must be an integer from 1 to 6, got 0"),
    ("/translate", {"text": "a", "beam": 7}, "beam must be an integer from 1 to 6, got 7"),
    ("/translate", {"text": "a", "beam": 2.5}, "beam must be an integer"),
    ("/translate", {"text": "a", "beam": True}, "beam must be an integer"),
    ("/translate", {"text": "a", "beam": 2, "nbest": 3}, "nbest must be an integer from 1 to 2"),
    ("/attention", {"texts": ["a"]}, "unknown field 'texts'; valid: text, target"),
    ("/attention", {"text": None}, "text must be a string, not null"),
    ("/attention", {"text": "dog " * 2000}, "over the limit of 128 that /attention draws"),
])
def test_a_malformed_request_is_400_with_a_json_error(translator, path, body, message):
    with serving(translator, max_texts=4, max_beam=6) as client:
        send = {"content": body, "headers": JSON} if isinstance(body, bytes) else {"json": body}
        answer = client.post(path, **send)
        assert answer.status_code == 400
        assert message in answer.json()["error"]
        still_answers(client, translator)


def test_a_body_over_the_limit_is_413_declared_or_streamed(translator):
    with serving(translator, max_request_bytes=100) as client:
        big = {"texts": ["A dog runs in the snow."] * 5}
        answer = client.post("/translate", json=big)
        assert answer.status_code == 413
        assert "over the limit of 100" in answer.json()["error"]
        chunks = (b'{"texts": [' + b'"a dog", ' * 20 + b'"a cat"]}' for _ in range(1))
        streamed = client.post("/translate", content=chunks, headers=JSON)  # chunked
        assert streamed.status_code == 413
        assert streamed.json() == {"error": "the body is over the limit of 100 bytes"}
        still_answers(client, translator)


def test_a_full_queue_is_429_and_the_waiting_requests_are_answered(translator, monkeypatch):
    gate, real = threading.Event(), translator.translate

    def slow(*args, **kwargs):
        gate.wait(30)
        return real(*args, **kwargs)

    monkeypatch.setattr(translator, "translate", slow)
    app = build_app(translator, ServeConfig(max_queue=4, max_texts=4, batch_wait_ms=0))

    async def main():
        async with app.router.lifespan_context(app):
            batcher = app.state.batcher
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as c:
                first = asyncio.ensure_future(c.post("/translate", json={"text": "A dog."}))
                while batcher.decoding == 0:  # the first request is in the model
                    await asyncio.sleep(0.01)
                body = {"texts": ["A cat.", "A man.", "Two dogs.", "A girl."]}
                waiting = asyncio.ensure_future(c.post("/translate", json=body))
                while batcher.queued < 4:
                    await asyncio.sleep(0.01)
                refused = await c.post("/translate", json={"text": "A bird."})
                health = (await c.get("/health")).json()
                gate.set()
                return refused, health, await first, await waiting

    try:
        refused, health, first, waiting = asyncio.run(main())
    finally:
        gate.set()
    assert refused.status_code == 429 and refused.headers["retry-after"] == "1"
    assert "the queue is full (4 sentences wait, at most 4)" in refused.json()["error"]
    assert (health["queue"], health["decoding"]) == (4, 1)
    assert first.status_code == waiting.status_code == 200
    assert len(waiting.json()["translations"]) == 4
    monkeypatch.undo()
    with serving(translator, max_queue=4, max_texts=4) as client:
        still_answers(client, translator)


def test_a_decoding_error_is_500_and_the_next_request_works(client, translator, monkeypatch):
    real, calls = translator.translate, []

    def fails_once(*args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("out of memory, say")
        return real(*args, **kwargs)

    monkeypatch.setattr(translator, "translate", fails_once)
    answer = client.post("/translate", json={"text": "A dog runs."})
    assert answer.status_code == 500
    assert answer.json() == {"error": "decoding failed: RuntimeError: out of memory, say"}
    still_answers(client, translator)


def test_concurrent_requests_share_calls_and_each_gets_its_own_answers(translator, sources,
                                                                       monkeypatch):
    real, calls = translator.translate, []

    def counted(texts, beam, nbest, return_scores, return_alignments):
        calls.append((beam, nbest, len(texts)))
        return real(texts, beam=beam, nbest=nbest, return_scores=return_scores,
                    return_alignments=return_alignments)

    monkeypatch.setattr(translator, "translate", counted)
    bodies = [{"texts": sources[i:i + 1 + i % 2], "beam": 2 + i % 2} for i in range(8)]
    answers = posting(build_app(translator, ServeConfig(batch_wait_ms=100)), "/translate", bodies)

    assert len(calls) < len(bodies)
    assert sum(n for _, _, n in calls) == sum(len(b["texts"]) for b in bodies)
    monkeypatch.undo()
    for body, answer in zip(bodies, answers):
        expected = translator.translate(body["texts"], beam=body["beam"], return_scores=True)
        assert answer.status_code == 200
        assert answer.json()["translations"] == [h.text for h in expected]


def test_batching_off_decodes_each_request_alone(translator, sources, monkeypatch):
    real, calls = translator.translate, []
    monkeypatch.setattr(translator, "translate",
                        lambda texts, **kw: calls.append(len(texts)) or real(texts, **kw))
    bodies = [{"text": s, "beam": 2} for s in sources[:4]]
    cfg = ServeConfig(batch_wait_ms=0, max_batch=1)
    answers = posting(build_app(translator, cfg), "/translate", bodies)
    assert calls == [1, 1, 1, 1] and all(a.status_code == 200 for a in answers)


def test_the_limits_are_checked_when_the_server_is_set_up():
    with pytest.raises(ValueError, match=r"max_queue \(8\) must be at least max_texts \(64\)"):
        ServeConfig(max_queue=8)
    with pytest.raises(ValueError, match="max_beam must be a positive number, got 0"):
        ServeConfig(max_beam=0)
