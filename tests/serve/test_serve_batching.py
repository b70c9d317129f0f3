"""The batcher against a scripted model: who is decoded with whom, in what order, and what each
request gets back."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

pytest.importorskip("starlette", reason="translate serve needs the serve extra")

from translate.serve.batching import (Batcher, DeadlineExceeded, QueueFull,  # noqa: E402
                                      ShuttingDown)


class Model:
    """Upper-cases texts and records each call's settings and texts; may fail on a text."""

    def __init__(self, fail_on: str | None = None, gate: threading.Event | None = None):
        self.calls: list[tuple] = []
        self.fail_on, self.gate = fail_on, gate

    def __call__(self, key, texts):
        if self.gate is not None:
            self.gate.wait(10)
        self.calls.append((key, list(texts)))
        if self.fail_on in texts:
            raise RuntimeError(f"cannot decode {self.fail_on}")
        return [f"{key}:{text.upper()}" for text in texts]


async def in_the_model(batcher: Batcher, key, texts) -> asyncio.Future:
    """Submit `texts` and wait until the model is decoding them (held at its gate)."""
    answer = asyncio.ensure_future(batcher.submit(key, texts))
    while batcher.decoding == 0:
        await asyncio.sleep(0.005)
    return answer


def serve(model: Model, requests: list[tuple], **limits) -> list:
    """Submit every (key, texts) at once; the results (or exceptions) in request order."""

    async def main():
        batcher = Batcher(model, **limits)
        batcher.start()
        try:
            return await asyncio.gather(*(batcher.submit(k, t) for k, t in requests),
                                        return_exceptions=True)
        finally:
            await batcher.stop()

    return asyncio.run(main())


def test_requests_waiting_together_are_one_call_and_each_gets_its_slice():
    model = Model()
    requests = [("b5", ["a", "b"]), ("b5", ["c"]), ("b5", ["d", "e", "f"])]
    answers = serve(model, requests, wait_ms=50)
    assert model.calls == [("b5", ["a", "b", "c", "d", "e", "f"])]
    assert answers == [["b5:A", "b5:B"], ["b5:C"], ["b5:D", "b5:E", "b5:F"]]


def test_only_requests_with_the_same_settings_share_a_call_oldest_first():
    model = Model()
    requests = [("b5", ["a"]), ("b1", ["b"]), ("b5", ["c"]), ("b1", ["d"])]
    answers = serve(model, requests, wait_ms=50)
    assert model.calls == [("b5", ["a", "c"]), ("b1", ["b", "d"])]
    assert answers == [["b5:A"], ["b1:B"], ["b5:C"], ["b1:D"]]


def test_a_call_holds_at_most_max_batch_sentences_and_keeps_the_order():
    model = Model()
    requests = [("k", ["a", "b"]), ("k", ["c", "d"]), ("k", ["e"]), ("k", ["f", "g", "h", "i"])]
    answers = serve(model, requests, wait_ms=50, max_batch=3)
    # "e" would fit beside "a", "b", but it waits its turn behind "c", "d", which do not; a
    # request over the cap is decoded in parts, and answered whole
    assert [texts for _, texts in model.calls] == [["a", "b"], ["c", "d", "e"],
                                                  ["f", "g", "h"], ["i"]]
    assert answers[3] == ["k:F", "k:G", "k:H", "k:I"]


def test_batching_off_is_one_call_a_request():
    model = Model()
    serve(model, [("k", ["a"]), ("k", ["b"]), ("k", ["c"])], wait_ms=0, max_batch=1)
    assert [texts for _, texts in model.calls] == [["a"], ["b"], ["c"]]


def test_a_failing_request_fails_alone_and_the_batcher_goes_on():
    model = Model(fail_on="bad")
    answers = serve(model, [("k", ["a"]), ("k", ["bad"]), ("k", ["c"])], wait_ms=50)
    assert answers[0] == ["k:A"] and answers[2] == ["k:C"]
    assert isinstance(answers[1], RuntimeError) and "cannot decode bad" in str(answers[1])
    # the group's call, then each request alone
    assert [texts for _, texts in model.calls] == [["a", "bad", "c"], ["a"], ["bad"], ["c"]]


def test_a_full_queue_refuses_at_once_and_the_waiting_requests_are_answered():
    gate = threading.Event()
    model = Model(gate=gate)

    async def main():
        batcher = Batcher(model, wait_ms=0, max_batch=8, max_queue=3)
        batcher.start()
        first = await in_the_model(batcher, "k", ["a"])  # behind the gate
        waiting = asyncio.ensure_future(batcher.submit("k", ["b", "c", "d"]))
        await asyncio.sleep(0.01)
        assert batcher.queued == 3
        with pytest.raises(QueueFull, match="the queue is full"):
            await batcher.submit("k", ["e"])
        gate.set()
        answers = [await first, await waiting, await batcher.submit("k", ["f"])]
        await batcher.stop()
        return answers

    try:
        assert asyncio.run(main()) == [["k:A"], ["k:B", "k:C", "k:D"], ["k:F"]]
    finally:
        gate.set()


def test_calls_hold_at_most_max_call_work_and_a_big_sentence_runs_alone():
    model = Model()
    requests = [("k", ["a", "b"]), ("k", ["c"]), ("k", ["huge"]), ("k", ["d"])]
    works = [[3, 3], [3], [50], [1]]

    async def main():
        batcher = Batcher(model, wait_ms=50, max_call_work=8)
        batcher.start()
        try:
            return await asyncio.gather(*(batcher.submit(k, t, w)
                                          for (k, t), w in zip(requests, works)))
        finally:
            await batcher.stop()

    answers = asyncio.run(main())
    assert [texts for _, texts in model.calls] == [["a", "b"], ["c"], ["huge"], ["d"]]
    assert answers == [["k:A", "k:B"], ["k:C"], ["k:HUGE"], ["k:D"]]


def test_a_small_request_waits_for_one_part_of_a_big_one_not_for_all():
    """Round robin between parts: the big request's remaining sentences go behind the small
    request that arrived while its first part was decoded."""
    gate = threading.Event()
    model = Model(gate=gate)

    async def main():
        batcher = Batcher(model, wait_ms=0, max_batch=2)
        batcher.start()
        big = await in_the_model(batcher, "b16", list("abcdef"))  # its first part
        small = asyncio.ensure_future(batcher.submit("b1", ["x"]))
        await asyncio.sleep(0.01)
        gate.set()
        answers = await asyncio.gather(big, small)
        await batcher.stop()
        return answers

    try:
        big, small = asyncio.run(main())
    finally:
        gate.set()
    assert [texts for _, texts in model.calls] == [["a", "b"], ["x"], ["c", "d"], ["e", "f"]]
    assert big == [f"b16:{c.upper()}" for c in "abcdef"] and small == ["b1:X"]


def test_a_request_past_its_deadline_fails_before_its_next_part():
    gate = threading.Event()
    model = Model(gate=gate)

    async def main():
        batcher = Batcher(model, wait_ms=0, max_batch=1, deadline_s=0.05)
        batcher.start()
        slow = asyncio.ensure_future(batcher.submit("k", ["a", "b", "c"]))
        await asyncio.sleep(0.1)  # the first part is held past the deadline
        gate.set()
        try:
            await slow
        finally:
            await batcher.stop()

    try:
        with pytest.raises(DeadlineExceeded, match=r"within 0.05 s \(1 of 3 sentences were\)"):
            asyncio.run(main())
    finally:
        gate.set()
    assert [texts for _, texts in model.calls] == [["a"]]


def test_closing_fails_the_running_and_the_waiting_requests_at_once():
    gate = threading.Event()
    model = Model(gate=gate)

    async def main():
        batcher = Batcher(model, wait_ms=0, max_batch=1)
        batcher.start()
        running = await in_the_model(batcher, "k", ["a"])
        waiting = asyncio.ensure_future(batcher.submit("k", ["b"]))
        await asyncio.sleep(0.01)
        batcher.close()  # the model is still busy with "a": nobody waits for it
        answers = await asyncio.gather(running, waiting, return_exceptions=True)
        gate.set()  # (a wait `stop` cannot end: its test is below)
        await batcher.stop()
        return answers

    try:
        answers = asyncio.run(main())
    finally:
        gate.set()
    assert all(isinstance(a, ShuttingDown) for a in answers), answers


def ended_by(ends: list[str], hold: threading.Event | None = None):
    """A model whose call decodes for ever, in steps of Python (after waiting for `hold`, if
    given: one operation its thread cannot leave); how the call ended goes to `ends`."""

    def model(key, texts):
        try:
            if hold is not None:
                hold.wait(10)
            while True:
                time.sleep(0.001)
        except BaseException as e:
            ends.append(type(e).__name__)
            raise

    return model


def test_stopping_ends_the_running_call_at_its_next_step():
    ends: list[str] = []

    async def main():
        batcher = Batcher(ended_by(ends), wait_ms=0)
        batcher.start()
        answer = await in_the_model(batcher, "k", ["a"])
        start = time.monotonic()
        await batcher.stop()
        took = time.monotonic() - start
        return await asyncio.gather(answer, return_exceptions=True), took, batcher.model_alive

    (answer,), took, alive = asyncio.run(main())
    assert isinstance(answer, ShuttingDown)
    assert ends == ["Stopped"] and not alive and took < 1.0


def test_a_call_held_past_the_grace_is_left_running_then_stopped():
    """A call inside one long operation outlives `stop`'s grace (`model_alive` says so, for the
    server to exit without waiting) and ends with Stopped as the operation returns."""
    ends: list[str] = []
    hold = threading.Event()

    async def main():
        batcher = Batcher(ended_by(ends, hold), wait_ms=0)
        batcher.start()
        await in_the_model(batcher, "k", ["a"])
        start = time.monotonic()
        await batcher.stop(grace_s=0.2)
        took, alive = time.monotonic() - start, batcher.model_alive
        hold.set()
        while batcher.model_alive and time.monotonic() - start < 10:
            await asyncio.sleep(0.01)
        return took, alive, batcher.model_alive

    try:
        took, alive, alive_after = asyncio.run(main())
    finally:
        hold.set()
    assert 0.2 <= took < 1.0 and alive
    assert ends == ["Stopped"] and not alive_after
