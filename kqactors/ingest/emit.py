"""Lines → ``Producer.produce``: batches, backpressure, delivery errors, rate limits and per-source counters.

Runs in: the worker processes, on their one asyncio thread (the producer's delivery reports are served by
``Emitter.service`` → ``Producer.poll(0)`` on that same thread, so chunk bookkeeping needs no locks). Owns:

- ``SourceRuntime``: a source's compiled transforms, topic, headers, counters and token bucket, and
  ``make_batch`` (lines → a ``Batch`` of values/keys under one ``Chunk``).
- ``Emitter.emit``: produce a batch from where it stopped; on BufferError (the producer's queue is full: the
  daemon's memory bound) it returns False with the rest kept in the batch, and ``wait_room`` waits until a
  poll() served delivery reports. A source therefore stops reading while the producer is full.
- delivery errors: a retriable one re-produces the line (from its delivery report) after ``retry_backoff_ms``,
  and the chunk stays open until it is delivered; a permanent one (message too large, invalid record), or any
  one with ``on_delivery_error = "drop"``, settles the line as failed and counts it.

The public Producer API is used (produce, poll, len, flush), so any confluent-kafka-compatible producer works; when
the producer has kqactors' bulk extensions, a chunk's lines go through ``produce_values`` (one call, no Python call
per line) and its delivered lines are counted by a ``delivery_counter`` (one call per run of delivery reports, no
Message per line). The checkpoint semantics are the same either way: a chunk is done once every line's report came.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from kqactors.errors import KafkaError, KafkaException
from kqactors.ingest.checkpoint import Chunk, StreamTracker
from kqactors.ingest.config import SourceSpec
from kqactors.ingest.metrics import SourceStats
from kqactors.ingest.transform import compile_transforms

__all__ = ["Batch", "Emitter", "SourceRuntime", "TokenBucket", "PERMANENT_ERRORS", "DROP_AT_PRODUCE"]

_log = logging.getLogger("kqactors.ingest.emit")

#: Delivery errors that another try cannot fix: the line is counted as dropped.
PERMANENT_ERRORS = frozenset({
    KafkaError.MSG_SIZE_TOO_LARGE, KafkaError.INVALID_MSG, KafkaError.RECORD_LIST_TOO_LARGE,
    KafkaError.INVALID_RECORD, KafkaError.UNSUPPORTED_FOR_MESSAGE_FORMAT, KafkaError._INVALID_ARG,
})
#: What produce() may raise for one line that is dropped (counted); any other KafkaException (a fatal producer)
#: ends the worker, which restarts from its checkpoints.
DROP_AT_PRODUCE = frozenset({KafkaError.MSG_SIZE_TOO_LARGE, KafkaError._UNKNOWN_PARTITION, KafkaError._INVALID_ARG})
#: Reports of lines purged at close: not delivered, not retried (a restart re-reads them).
_PURGED = frozenset({KafkaError._PURGE_QUEUE, KafkaError._PURGE_INFLIGHT})


class TokenBucket:
    """Lines per second with a burst; ``rate`` 0 means unlimited."""

    __slots__ = ("rate", "burst", "tokens", "stamp", "clock")

    def __init__(self, rate: float, burst: int = 0, clock: Callable[[], float] = time.monotonic) -> None:
        self.rate = rate
        self.burst = float(burst or max(1.0, rate))
        self.tokens = self.burst
        self.clock = clock
        self.stamp = clock()

    def _refill(self) -> None:
        now = self.clock()
        self.tokens = min(self.burst, self.tokens + (now - self.stamp) * self.rate)
        self.stamp = now

    def delay(self, count: int) -> float:
        """Take ``count`` tokens (going into debt if need be); the seconds to wait before using them."""
        if not self.rate:
            return 0.0
        self._refill()
        self.tokens -= count
        return 0.0 if self.tokens >= 0 else -self.tokens / self.rate

    def try_take(self, count: int) -> bool:
        """Take ``count`` tokens only if all are there (for sources that drop rather than wait)."""
        if not self.rate:
            return True
        self._refill()
        if self.tokens >= count:
            self.tokens -= count
            return True
        return False


class Batch:
    """A chunk's values (and keys) being produced; ``next`` is the first not yet queued; ``ack`` the delivery
    callback its lines are produced with (the chunk's, or a producer's counting callback bound to it)."""

    __slots__ = ("chunk", "values", "keys", "next", "source", "ack")

    def __init__(self, source: SourceRuntime, chunk: Chunk, values: list[bytes], keys: list[bytes | None] | None):
        self.source = source
        self.chunk = chunk
        self.values = values
        self.keys = keys
        self.next = 0
        self.ack = source.emitter.ack_for(chunk)

    @property
    def finished(self) -> bool:
        return self.next >= len(self.values)


class SourceRuntime:
    """A source's per-worker state shared by every kind of source."""

    def __init__(self, spec: SourceSpec, emitter: Emitter, clock: Callable[[], float] = time.monotonic) -> None:
        self.spec = spec
        self.name = spec.name
        self.topic = spec.topic
        self.emitter = emitter
        self.pipeline = compile_transforms(spec.transforms, spec.key_field)
        self.headers = [(k, v.encode()) for k, v in spec.headers] or None
        self.stats = SourceStats()
        self.bucket = TokenBucket(spec.rate_limit, spec.rate_burst, clock)
        self.clock = clock
        self.finished = False          # stdin at EOF, a --once file at its end

    def make_batch(self, lines: list[bytes], nbytes: int, end: int = 0, tracker: StreamTracker | None = None,
                   on_done: Callable[[Chunk], Any] | None = None) -> Batch:
        """Count ``lines`` in, run the transforms and open their chunk (registered with ``tracker`` first)."""
        stats = self.stats
        stats.lines_in += len(lines)
        stats.bytes_in += nbytes
        pipeline = self.pipeline
        if pipeline.raw:
            values = lines
        else:
            values = pipeline.run(lines)
            stats.filtered += len(lines) - len(values)
        keys = None
        if pipeline.key_path:
            keys, missing = pipeline.keys(values)
            stats.no_key += missing
        stats.in_flight += len(values)
        out_bytes = nbytes if values is lines else sum(map(len, values))
        chunk = Chunk(self.emitter, self, len(values), out_bytes, end, None, on_done, self.clock())
        if tracker is not None:
            tracker.add(chunk)
        if not values:
            self.emitter.chunk_done(chunk)
        return Batch(self, chunk, values, keys)


class Emitter:
    """Produces batches and serves the producer's delivery reports (see the module docstring)."""

    def __init__(self, producer: Any, retry_backoff_s: float = 1.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.producer = producer
        self._produce = producer.produce
        # kqactors' bulk extensions when the producer has them (a confluent-kafka-shaped one works without):
        # produce_values() queues a chunk's lines in one call, and a delivery counter reports a run of the
        # chunk's delivered lines as one call instead of one callback (and one Message) per line.
        self._produce_values: Callable[..., int] | None = getattr(producer, "produce_values", None)
        self._counter: Callable[..., Any] | None = getattr(producer, "delivery_counter", None)
        self.retry_backoff_s = retry_backoff_s
        self.clock = clock
        self.full = False
        self._room: asyncio.Event | None = None
        self._retries: deque[tuple[float, Chunk, str, bytes | None, bytes | None, Any]] = deque()
        self._logged: dict[str, float] = {}

    # ---- producing -----------------------------------------------------------------------------------
    def ack_for(self, chunk: Chunk) -> Callable[..., Any]:
        """The delivery callback of a chunk's lines: with a counting producer, ``left`` drops by a run of
        delivered lines at once (Chunk.acked); a failed line still goes through Chunk.ack with its Message."""
        if self._counter is None:
            return chunk.ack

        def acked(count: int) -> None:
            chunk.left -= count
            if not chunk.left:
                self.chunk_done(chunk)

        return self._counter(acked, chunk.ack)

    def emit(self, batch: Batch) -> bool:
        """Queue the batch's lines from ``batch.next``; False (rest kept) when the producer's queue is full."""
        produce = self._produce
        values, keys = batch.values, batch.keys
        source = batch.source
        topic, headers, ack = source.topic, source.headers, batch.ack
        n = len(values)
        i = batch.next
        produce_values = self._produce_values
        while i < n:
            try:
                if produce_values is not None:
                    # one call for the lines it takes; the one it stops at goes through produce() below,
                    # which raises what stopped it (BufferError, a line too large, ...) or queues it
                    i = produce_values(topic, values, i, keys, headers, ack)
                    if i < n:
                        produce(topic, values[i], None if keys is None else keys[i], -1, ack, headers=headers)
                        i += 1
                    continue
                elif keys is None and headers is None:
                    for i in range(i, n):  # noqa: B020 - i is where a raising produce() stopped
                        produce(topic, values[i], None, -1, ack)
                else:
                    for i in range(i, n):  # noqa: B020
                        produce(topic, values[i], None if keys is None else keys[i], -1, ack, headers=headers)
                i = n
            except BufferError:
                batch.next = i
                self.full = True
                if self._room is not None:
                    self._room.clear()
                return False
            except KafkaException as exc:  # this line cannot be produced (too large, ...): drop it
                err = exc.args[0] if exc.args else None
                if not hasattr(err, "code") or err.code() not in DROP_AT_PRODUCE:
                    raise
                self._note("produce", err)
                source.stats.drop(_reason(err))
                batch.chunk.settle(1)
                i += 1
        batch.next = n
        return True

    @property
    def room(self) -> asyncio.Event:
        if self._room is None:
            self._room = asyncio.Event()
            self._room.set()
        return self._room

    async def wait_room(self, timeout: float | None = None) -> bool:
        """Wait until delivery reports made room after a BufferError (or ``timeout``); True if room was seen."""
        room = self.room
        if not self.full:
            return True
        try:
            await asyncio.wait_for(room.wait(), timeout)
        except asyncio.TimeoutError:
            return False
        return True

    def service(self) -> int:
        """Serve delivery reports (poll(0)), re-produce due retries; the number of reports served."""
        served = self.producer.poll(0)
        if served and self.full:
            self.full = False
            if self._room is not None:
                self._room.set()
        if self._retries:
            self._retry_due()
        return served

    def _retry_due(self) -> None:
        now = self.clock()
        retries = self._retries
        while retries and retries[0][0] <= now:
            _, chunk, topic, value, key, headers = retries[0]
            try:
                self._produce(topic, value, key, -1, chunk.ack, headers=headers)
            except BufferError:
                return
            except KafkaException as exc:
                err = exc.args[0] if exc.args else None
                if not hasattr(err, "code") or err.code() not in DROP_AT_PRODUCE:
                    raise
                self._note("produce", err)
                chunk.source.stats.drop(_reason(err))
                chunk.settle(1)
            retries.popleft()

    @property
    def retrying(self) -> int:
        return len(self._retries)

    # ---- delivery reports (called from poll(), via Chunk.ack) ------------------------------------------
    def chunk_done(self, chunk: Chunk) -> None:
        source = chunk.source
        stats = source.stats
        delivered = chunk.lines - chunk.failed
        stats.lines_out += delivered
        stats.in_flight -= chunk.lines
        stats.bytes_out += chunk.nbytes if not chunk.failed else chunk.nbytes * delivered // chunk.lines
        if chunk.lines:
            stats.latency.observe(self.clock() - chunk.started)
        if chunk.tracker is not None:
            chunk.tracker.done(chunk)
        if chunk.on_done is not None:
            chunk.on_done(chunk)

    def delivery_failed(self, chunk: Chunk, err: Any, msg: Any) -> None:
        code = err.code() if hasattr(err, "code") else None
        source = chunk.source
        if code in _PURGED:
            return  # closing: the chunk stays open, its lines are re-read after the restart
        if code in PERMANENT_ERRORS or source.spec.on_delivery_error == "drop":
            self._note("delivery", err)
            source.stats.drop(_reason(err))
            chunk.settle(1)
            return
        source.stats.error("delivery")
        self._note("delivery", err, retry=True)
        self._retries.append((self.clock() + self.retry_backoff_s, chunk, msg.topic(), msg.value(), msg.key(),
                              msg.headers()))

    def _note(self, what: str, err: Any, retry: bool = False) -> None:
        """Log an error at most once per 10 s per kind and name."""
        name = err.name() if hasattr(err, "name") else str(err)
        key = f"{what}:{name}"
        now = self.clock()
        if now - self._logged.get(key, -1e9) < 10.0:
            return
        self._logged[key] = now
        _log.warning("%s error %s: %s", what, name, err.str() if hasattr(err, "str") else err,
                     extra={"event": f"{what}_error", "error": name, "retry": retry})


def _reason(err: Any) -> str:
    return ("error:" + err.name()) if hasattr(err, "name") else "error"
