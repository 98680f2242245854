"""Request batching for a served reward: one worker thread scores what is queued, up to the batch size.

Requests arrive concurrently (several score shards, several runs); the reward is called from one
thread only (a model on one device is not shared between threads), with the requests queued while
it was busy joined into one call of at most ``batch_size`` images. A request larger than the batch
size is split into batches. Nothing waits for more requests to arrive: an idle server scores a
lone request at once.
"""

from __future__ import annotations

import queue
import threading
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Callable, Sequence

ScoreFn = Callable[[list, list], tuple[Sequence[float], Sequence[dict]]]


@dataclass
class _Job:
    images: list
    prompts: list
    future: Future = field(default_factory=Future)


class MicroBatcher:
    """``submit(images, prompts)`` returns a Future of ``(scores, details)``; scoring runs in one thread."""

    def __init__(self, score: ScoreFn, batch_size: int):
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self._score, self.batch_size = score, batch_size
        self._queue: queue.Queue[_Job] = queue.Queue()
        self._carry: _Job | None = None  # taken from the queue but did not fit the last batch
        self.batches = 0  # reward calls so far (the health endpoint reports it)
        self.images = 0
        threading.Thread(target=self._work, name="reward-batcher", daemon=True).start()

    def submit(self, images: list, prompts: list) -> Future:
        """One future for the whole request, however many batches it takes."""
        jobs = [_Job(images[k:k + self.batch_size], prompts[k:k + self.batch_size])
                for k in range(0, len(images), self.batch_size)]
        for job in jobs:
            self._queue.put(job)
        return _joined([job.future for job in jobs])

    def _next_batch(self) -> list[_Job]:
        batch = [self._carry if self._carry is not None else self._queue.get()]
        self._carry = None
        size = len(batch[0].images)
        while size < self.batch_size:
            try:
                job = self._queue.get_nowait()
            except queue.Empty:
                break
            if size + len(job.images) > self.batch_size:
                self._carry = job
                break
            batch.append(job)
            size += len(job.images)
        return batch

    def _work(self) -> None:
        while True:
            batch = self._next_batch()
            images = [image for job in batch for image in job.images]
            prompts = [prompt for job in batch for prompt in job.prompts]
            try:
                scores, details = self._score(images, prompts)
                scores, details = list(scores), list(details)
                if len(scores) != len(images) or len(details) != len(images):
                    raise RuntimeError(f"the reward returned {len(scores)} scores and {len(details)} details "
                                       f"for a batch of {len(images)} images")
            except BaseException as exc:  # every request of the batch gets the failure
                for job in batch:
                    job.future.set_exception(exc)
                continue
            self.batches += 1
            self.images += len(images)
            start = 0
            for job in batch:
                stop = start + len(job.images)
                job.future.set_result((scores[start:stop], details[start:stop]))
                start = stop


def _joined(futures: list[Future]) -> Future:
    """A future of the concatenated results of ``futures``, or the first failure among them."""
    if len(futures) == 1:
        return futures[0]
    joined: Future = Future()
    lock = threading.Lock()

    def done(_):
        with lock:
            if joined.done():
                return
            failure = _failed(futures)
            if failure is not None:
                joined.set_exception(failure)
                return
            if not all(f.done() for f in futures):
                return
            scores, details = [], []
            for future in futures:
                part_scores, part_details = future.result()
                scores += part_scores
                details += part_details
            joined.set_result((scores, details))

    for future in futures:
        future.add_done_callback(done)
    return joined


def _failed(futures: list[Future]) -> BaseException | None:
    return next((f.exception() for f in futures if f.done() and f.exception() is not None), None)
