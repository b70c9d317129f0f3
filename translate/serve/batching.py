"""Dynamic batching: requests from many clients decoded together by one model in one thread.

A request waits in a queue until the oldest waiting request has waited `wait_ms` or
`max_batch` sentences with its settings wait; then every waiting request with the oldest one's
settings (its `key`), up to `max_batch` sentences, is decoded in one call, and each request gets
its own slice of the answers. Requests are taken oldest first. The model runs in a single worker
thread, so calls never overlap (attention recording hooks the model's modules) and the event loop
keeps answering while it works: a `wait_ms` of 0 and a `max_batch` of 1 give one call a request.
"""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable, Hashable, Sequence

log = logging.getLogger(__name__)

# run(key, texts) -> one result per text, called in the worker thread
Run = Callable[[Hashable, list[str]], Sequence]


class QueueFull(Exception):
    """More sentences would wait than the queue holds."""


@dataclass
class _Job:
    key: Hashable
    texts: list[str]
    future: asyncio.Future
    arrived: float  # the event loop's clock
    size: int = field(init=False)

    def __post_init__(self):
        self.size = len(self.texts)


class Batcher:
    """Collects requests for a few milliseconds and runs each group with one setting as one call.

    Args:
        run: decodes a list of texts with the settings `key`, in the worker thread.
        wait_ms: how long the oldest waiting request waits for others to join it.
        max_batch: sentences in one call at most (a larger request runs alone, whole).
        max_queue: sentences waiting at most; `submit` raises QueueFull past it.
    """

    def __init__(self, run: Run, wait_ms: float = 5.0, max_batch: int = 64,
                 max_queue: int = 256):
        self.run = run
        self.wait = wait_ms / 1000
        self.max_batch, self.max_queue = max_batch, max_queue
        self.waiting: list[_Job] = []
        self.decoding = 0  # sentences in the call running now
        self.calls = 0  # calls made to `run`
        self._wake = asyncio.Event()
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="translate-model")
        self._task: asyncio.Task | None = None

    @property
    def queued(self) -> int:
        """Sentences waiting for the model (not those it is decoding)."""
        return sum(job.size for job in self.waiting)

    def start(self) -> None:
        """Start taking requests (call from the event loop)."""
        self._task = asyncio.get_running_loop().create_task(self._serve())

    async def stop(self) -> None:
        """Fail the waiting requests and stop; a call already running is left to finish."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        for job in self.waiting:
            if not job.future.done():
                job.future.set_exception(RuntimeError("the server is shutting down"))
        self.waiting.clear()
        self._worker.shutdown(wait=False, cancel_futures=True)

    async def submit(self, key: Hashable, texts: list[str]) -> list:
        """The results for `texts` decoded with the settings `key`, in their order."""
        if self.queued + len(texts) > self.max_queue:
            raise QueueFull(f"the queue is full ({self.queued} sentences wait, at most "
                            f"{self.max_queue}): try again shortly")
        loop = asyncio.get_running_loop()
        job = _Job(key, list(texts), loop.create_future(), loop.time())
        self.waiting.append(job)
        self._wake.set()
        return await job.future

    async def _serve(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self.waiting:
                await self._gather()
                group = self._take()
                if group:
                    await self._run(group)

    async def _gather(self) -> None:
        """Wait until the oldest request has waited `wait` or a full call's worth waits."""
        loop = asyncio.get_running_loop()
        oldest = self.waiting[0]
        deadline = oldest.arrived + self.wait
        while (sum(j.size for j in self.waiting if j.key == oldest.key) < self.max_batch
               and (left := deadline - loop.time()) > 0):
            self._wake.clear()
            try:
                await asyncio.wait_for(self._wake.wait(), left)
            except asyncio.TimeoutError:
                break

    def _take(self) -> list[_Job]:
        """Remove and return the oldest request and, in order, those with its settings that fit
        the call; requests whose clients left are dropped."""
        self.waiting = [job for job in self.waiting if not job.future.done()]
        if not self.waiting:
            return []
        key = self.waiting[0].key
        cap = max(self.max_batch, self.waiting[0].size)  # a large request runs alone, whole
        group, rest, size, full = [], [], 0, False
        for job in self.waiting:
            if job.key == key and not full and size + job.size <= cap:
                group.append(job)
                size += job.size
            else:
                full = full or job.key == key  # later ones with this key keep their turn
                rest.append(job)
        self.waiting = rest
        return group

    async def _run(self, group: list[_Job]) -> None:
        """One call for the group; each request gets its slice. When the call fails, each
        request of a group runs alone, so only the one that fails gets the error."""
        texts = [text for job in group for text in job.texts]
        loop = asyncio.get_running_loop()
        self.decoding, self.calls = len(texts), self.calls + 1
        try:
            results = await loop.run_in_executor(self._worker, self.run, group[0].key, texts)
        except Exception as error:
            self.decoding = 0
            if len(group) > 1:
                for job in group:
                    await self._run([job])
            elif not group[0].future.done():
                group[0].future.set_exception(error)
            return
        self.decoding = 0
        first = 0
        for job in group:
            if not job.future.done():
                job.future.set_result(list(results[first:first + job.size]))
            first += job.size
