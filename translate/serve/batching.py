"""Dynamic batching: requests from many clients decoded together by one model in one thread,
in calls of bounded work, so that no request holds the model for long.

A request waits in a queue until the oldest waiting request has waited `wait_ms` or `max_batch`
sentences with its settings wait; then a call is made of the oldest request's sentences and, in
order, those of the requests with the same settings (its `key`), up to `max_batch` sentences and
`max_call_work` units of work (source pieces x beam; a single sentence over it runs alone). Each
request gets its own slice of the answers. A request that does not fit one call is decoded in
parts, and between its parts it goes to the back of the queue: a one-sentence request that
arrives while a big one is decoded waits for one part, not for the whole. A request still
unanswered `deadline_s` after it arrived is failed (`DeadlineExceeded`) before its next part.

The model runs in a single worker thread, so calls never overlap (attention recording hooks the
model's modules) and the event loop keeps answering while it works. A server that stops does not
finish a call nobody will read: `stop` ends it at its next Python line (between two of torch's
operations) and waits for the thread, as a thread still inside torch when the interpreter exits
aborts the process (C++'s `terminate`). `wait_ms` of 0 and `max_batch` of 1 give one call a
sentence.

Tests: tests/serve/test_serve_batching.py.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import ctypes
import logging
import math
import queue
import threading
from dataclasses import dataclass, field
from typing import Callable, Hashable, Optional, Sequence

log = logging.getLogger(__name__)

# run(key, texts) -> one result per text, called in the worker thread
Run = Callable[[Hashable, list[str]], Sequence]


class QueueFull(Exception):
    """More sentences would wait than the queue holds."""


class DeadlineExceeded(Exception):
    """A request was not answered within the server's deadline."""


class ShuttingDown(Exception):
    """The server stopped before the request was answered."""


@dataclass
class _Job:
    key: Hashable
    texts: list[str]
    work: list[int]  # each text's units of work
    future: asyncio.Future
    arrived: float  # the event loop's clock
    deadline: float
    taken: int = 0  # texts given to calls so far
    results: list = field(default_factory=list)

    @property
    def left(self) -> int:
        return len(self.texts) - self.taken


@dataclass
class _Part:
    job: _Job
    start: int
    end: int


class Stopped(BaseException):
    """Raised in the model's thread by `ModelThread.stop` to end its call; a BaseException, as
    KeyboardInterrupt is, so that no `except Exception` in the call holds it."""


class ModelThread(concurrent.futures.Executor):
    """One daemon thread that runs the submitted calls in order, until `stop`."""

    def __init__(self, name: str = "translate-model"):
        self._calls: queue.SimpleQueue = queue.SimpleQueue()
        self._lock = threading.Lock()  # `stop` sees whether a call runs, and the call sees `stop`
        self._in_call = self._stopping = False
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def submit(self, fn, /, *args, **kwargs) -> concurrent.futures.Future:
        future: concurrent.futures.Future = concurrent.futures.Future()
        self._calls.put((future, fn, args, kwargs))
        return future

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        self._calls.put(None)

    def stop(self) -> None:
        """Run no more calls, and end the one running with `Stopped` at its next Python line
        (an operation inside torch runs to its end); the thread ends soon after (`alive`)."""
        self._calls.put(None)
        with self._lock:
            self._stopping = True
            if self._in_call:  # CPython's way to raise in another thread, at its next line
                ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(self._thread.ident),
                                                           ctypes.py_object(Stopped))

    def _loop(self) -> None:
        while (call := self._calls.get()) is not None:
            try:
                self._run(*call)
            except Stopped:  # it came as the call was ending
                pass

    def _run(self, future: concurrent.futures.Future, fn, args, kwargs) -> None:
        if not future.set_running_or_notify_cancel():
            return
        with self._lock:
            if self._stopping:
                future.set_exception(Stopped())
                return
            self._in_call = True
        try:
            result, error = fn(*args, **kwargs), None
        except BaseException as e:  # handed to the caller
            result, error = None, e
        with self._lock:
            self._in_call = False
        if error is None:
            future.set_result(result)
        else:
            future.set_exception(error)


class Batcher:
    """Collects requests for a few milliseconds and runs each group with one setting as calls of
    bounded work.

    Args:
        run: decodes a list of texts with the settings `key`, in the worker thread.
        wait_ms: how long the oldest waiting request waits for others to join it.
        max_batch: sentences in one call at most.
        max_queue: sentences waiting at most; `submit` raises QueueFull past it.
        max_call_work: units of work (as `submit` counts them) in one call at most.
        deadline_s: seconds a request may take from its arrival; 0: no deadline.
    """

    def __init__(self, run: Run, wait_ms: float = 5.0, max_batch: int = 64,
                 max_queue: int = 256, max_call_work: float = math.inf,
                 deadline_s: float = 0.0):
        self.run = run
        self.wait = wait_ms / 1000
        self.max_batch, self.max_queue = max_batch, max_queue
        self.max_call_work, self.deadline_s = max_call_work, deadline_s
        self.waiting: list[_Job] = []
        self.running: list[_Part] = []  # the parts in the call running now
        self.cut: list[_Job] = []  # requests in that call with sentences left: queued after it
        self.decoding = 0  # sentences in the call running now
        self.calls = 0  # calls made to `run`
        self._wake = asyncio.Event()
        self._worker = ModelThread()
        self._task: asyncio.Task | None = None

    @property
    def queued(self) -> int:
        """Sentences waiting for the model (not those it is decoding)."""
        return sum(job.left for job in self.waiting + self.cut)

    def start(self) -> None:
        """Start taking requests (call from the event loop)."""
        self._task = asyncio.get_running_loop().create_task(self._serve())

    def close(self) -> None:
        """Fail every request not yet answered, those in the running call too, with
        ShuttingDown; take no more."""
        jobs = [part.job for part in self.running] + self.waiting + self.cut
        for job in jobs:
            if not job.future.done():
                job.future.set_exception(ShuttingDown("the server is shutting down"))
        self.waiting.clear()
        self.cut.clear()

    async def stop(self, grace_s: float = 2.0) -> None:
        """`close`, and stop: a call already running is ended at its next step
        (`ModelThread.stop`), and the model's thread waited for up to `grace_s` seconds
        (`model_alive` says whether it ended)."""
        self.close()
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        self._worker.stop()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + grace_s
        while self._worker.alive and loop.time() < deadline:
            await asyncio.sleep(0.01)

    @property
    def model_alive(self) -> bool:
        """Whether the model's thread runs (after `stop`: in a call that did not end)."""
        return self._worker.alive

    async def submit(self, key: Hashable, texts: list[str],
                     work: Optional[Sequence[int]] = None) -> list:
        """The results for `texts` decoded with the settings `key`, in their order; `work`: each
        text's units of work (default 1 each)."""
        if self.queued + len(texts) > self.max_queue:
            raise QueueFull(f"the queue is full ({self.queued} sentences wait, at most "
                            f"{self.max_queue}): try again shortly")
        loop = asyncio.get_running_loop()
        now = loop.time()
        job = _Job(key, list(texts), list(work) if work is not None else [1] * len(texts),
                   loop.create_future(), now,
                   now + self.deadline_s if self.deadline_s else math.inf)
        self.waiting.append(job)
        self._wake.set()
        return await job.future

    async def _serve(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self.waiting:
                await self._gather()
                parts = self._take()
                if parts:
                    await self._run(parts)
                # the rest of a cut request queues behind those that came during its part
                self.waiting += [job for job in self.cut if not job.future.done()]
                self.cut = []

    async def _gather(self) -> None:
        """Wait until the oldest request has waited `wait` or a full call's worth waits."""
        loop = asyncio.get_running_loop()
        oldest = self.waiting[0]
        deadline = oldest.arrived + self.wait
        while (sum(j.left for j in self.waiting if j.key == oldest.key) < self.max_batch
               and (left := deadline - loop.time()) > 0):
            self._wake.clear()
            try:
                await asyncio.wait_for(self._wake.wait(), left)
            except asyncio.TimeoutError:
                break

    def _take(self) -> list[_Part]:
        """The next call's parts: the oldest request's next sentences and, in order, the
        requests with its settings that fit the call whole (the first that does not ends it:
        later ones keep their turn). A request over a call is cut, and what is left of it goes
        to the back of the queue; requests whose clients left, or whose deadline passed, are
        dropped."""
        now = asyncio.get_running_loop().time()
        live = []
        for job in self.waiting:
            if job.future.done():
                continue
            if now > job.deadline:
                job.future.set_exception(DeadlineExceeded(
                    f"the request was not answered within {self.deadline_s:g} s "
                    f"({len(job.results)} of {len(job.texts)} sentences were)"))
                continue
            live.append(job)
        self.waiting = live
        if not live:
            return []
        key, parts, size, work = live[0].key, [], 0, 0
        for job in live:
            if job.key != key:
                continue
            start = end = job.taken
            rest = job.work[start:]
            if size and (size + len(rest) > self.max_batch
                         or work + sum(rest) > self.max_call_work):
                break  # it does not fit whole beside the others: it waits for the next call
            while end < len(job.texts):  # alone in the call, a request over it is cut
                if size and (size + 1 > self.max_batch
                             or work + job.work[end] > self.max_call_work):
                    break
                size, work, end = size + 1, work + job.work[end], end + 1
            if end > start:
                parts.append(_Part(job, start, end))
                job.taken = end
            if job.left:  # the call is full
                break
        taken = {id(part.job) for part in parts}
        self.cut = [part.job for part in parts if part.job.left]
        self.waiting = [job for job in live if id(job) not in taken]
        return parts

    async def _run(self, parts: list[_Part]) -> None:
        """One call for the parts; each request gets its slice, and is answered once it has
        all of them. When the call fails, each part runs alone, so only the request whose part
        fails gets the error."""
        texts = [text for p in parts for text in p.job.texts[p.start:p.end]]
        loop = asyncio.get_running_loop()
        self.running, self.decoding, self.calls = parts, len(texts), self.calls + 1
        try:
            results = await loop.run_in_executor(self._worker, self.run, parts[0].job.key,
                                                 texts)
        except Exception as error:
            self.running, self.decoding = [], 0
            if len(parts) > 1:
                for part in parts:
                    await self._run([part])
            elif not parts[0].job.future.done():
                parts[0].job.future.set_exception(error)
            return
        self.running, self.decoding = [], 0
        first = 0
        for part in parts:
            job, size = part.job, part.end - part.start
            job.results.extend(results[first:first + size])
            first += size
            if len(job.results) == len(job.texts) and not job.future.done():
                job.future.set_result(job.results)
