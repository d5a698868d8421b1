"""Test doubles for the ingestion daemon's unit tests: a Producer with confluent-kafka's shape whose queue bound,
broker availability and delivery order the test controls, a settable clock, and a FileTail pump."""

from __future__ import annotations

from typing import Any

from kqactors.errors import KafkaError
from kqactors.ingest.config import SourceSpec
from kqactors.ingest.emit import Emitter, SourceRuntime


class FakeMessage:
    def __init__(self, topic: str, value: bytes | None, key: bytes | None, headers: Any) -> None:
        self._topic, self._value, self._key, self._headers = topic, value, key, headers

    def topic(self) -> str:
        return self._topic

    def value(self) -> bytes | None:
        return self._value

    def key(self) -> bytes | None:
        return self._key

    def headers(self) -> Any:
        return self._headers


class FakeProducer:
    """``produce`` raises BufferError at ``limit`` queued messages; ``poll`` delivers everything queued while
    ``up`` (in ``order``: "fifo" or "reverse"), or fails it with ``fail_with`` once."""

    def __init__(self, limit: int = 1_000_000) -> None:
        self.limit = limit
        self.queue: list[tuple[str, bytes | None, bytes | None, Any, Any]] = []
        self.delivered: list[tuple[str, bytes | None, bytes | None, Any]] = []
        self.up = True
        self.order = "fifo"
        self.fail_with: int | None = None
        self.purged = 0
        self.raise_for: Any = None   # value → an exception to raise from produce(), or None

    def produce(self, topic: str, value: bytes | None = None, key: bytes | None = None, partition: int = -1,
                on_delivery: Any = None, *, timestamp: int = 0, headers: Any = None) -> None:
        # keyword-only after on_delivery: confluent-kafka and kqactors differ in what comes next positionally
        if self.raise_for is not None and self.raise_for(value):
            raise self.raise_for(value)
        if len(self.queue) >= self.limit:
            raise BufferError("Local: Queue full")
        self.queue.append((topic, value, key, headers, on_delivery))

    def poll(self, timeout: float | None = 0) -> int:
        if not self.up or not self.queue:
            return 0
        queue, self.queue = self.queue, []
        if self.order == "reverse":
            queue.reverse()
        fail, self.fail_with = self.fail_with, None
        for topic, value, key, headers, cb in queue:
            msg = FakeMessage(topic, value, key, headers)
            if fail is not None:
                cb(KafkaError(fail), msg)
            else:
                self.delivered.append((topic, value, key, headers))
                cb(None, msg)
        return len(queue)

    def __len__(self) -> int:
        return len(self.queue)

    def flush(self, timeout: float | None = None) -> int:
        self.poll()
        return len(self.queue)

    def purge(self, *args: Any) -> None:
        self.purged += len(self.queue)
        self.queue = []

    def close(self, timeout: float | None = None) -> None:
        pass

    def values(self) -> list[bytes | None]:
        return [d[1] for d in self.delivered]


class Clock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def file_runtime(producer: FakeProducer, clock: Clock, **spec: Any) -> SourceRuntime:
    values = {"name": "src", "type": "file", "topic": "t", "paths": ("x",), **spec}
    return SourceRuntime(SourceSpec(**values), Emitter(producer, 0.0, clock), clock)


SETTINGS = {"read_bytes": 4096, "chunk_lines": 4, "rotate_wait_s": 2.0, "once": False}


def pump(tail: Any, deliver: bool = True) -> int:
    """Read, check and emit until the tail has nothing more; deliver what was produced; lines emitted."""
    emitter = tail.source.emitter
    emitted = 0
    while True:
        batches = tail.read() or tail.check() or tail.read()
        if not batches:
            break
        for batch in batches:
            assert emitter.emit(batch)
            emitted += len(batch.values)
    if deliver:
        emitter.service()
    return emitted
