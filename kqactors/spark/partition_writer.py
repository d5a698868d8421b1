"""A Spark task's write: rows (as Arrow record batches or Rows) produced to Kafka.

Runs in: a Spark executor's Python worker (``DataSourceWriter.write`` / ``DataSourceStreamWriter.write``).
Owns the task's kqactors Producer (``kqactors.hosts=0`` unless the query sets ``kafka.kqactors.hosts``;
``partitioner=murmur2_random``, Kafka's default partitioner, so a keyed row lands where a JVM producer would
put it), the per-row produce loop, and the task's outcome: the task returns only when every record is
acknowledged, and fails on the first delivery error (Spark then retries the task: at-least-once).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["producer_config", "write_batches", "write_rows", "WriteFailed"]

_FLUSH_TIMEOUT_S = 300.0


class WriteFailed(RuntimeError):
    """A record could not be delivered; the task fails so that Spark retries it."""


def producer_config(client: Mapping[str, str]) -> dict[str, Any]:
    conf: dict[str, Any] = dict(client)
    conf.setdefault("kqactors.hosts", 0)
    conf.setdefault("partitioner", "murmur2_random")
    return conf


class _Errors:
    """Delivery failures, collected by the producer's delivery callback (only errors are reported)."""

    def __init__(self) -> None:
        self.first: str | None = None
        self.count = 0
        self._lock = threading.Lock()

    def __call__(self, err: Any, msg: Any) -> None:
        if err is None:
            return
        with self._lock:
            self.count += 1
            if self.first is None:
                self.first = (f"{err.str()} ({err.name()}) producing to {msg.topic()}"
                              f"{'' if msg.partition() is None else '-' + str(msg.partition())}")

    def reset(self) -> None:
        with self._lock:
            self.first = None
            self.count = 0

    def check(self) -> None:
        if self.first is not None:
            raise WriteFailed(f"{self.count} record(s) could not be written to Kafka; the first: {self.first}")


def _open(client: Mapping[str, str]) -> tuple[Any, _Errors, Any]:
    """A producer from the worker's pool (kqactors.spark.pool) or a new one, with its error collector."""
    from kqactors import Producer
    from kqactors.spark.pool import PRODUCERS, config_key

    conf = producer_config(client)
    key = config_key("producer", conf)
    entry = PRODUCERS.take(key)
    if entry is not None:
        producer, errors = entry
        errors.reset()
        return producer, errors, key
    errors = _Errors()
    return Producer({**conf, "on_delivery": errors, "delivery.report.only.error": True}), errors, key


def _produce_all(producer: Any, errors: _Errors, topics: list, values: list, keys: list | None,
                 partitions: list | None, headers: list | None) -> int:
    """One batch's rows; returns how many. The common shape (one topic, no partition or headers column) takes
    a loop of bare produce() calls: it is the task's per-row cost."""
    produce = producer.produce
    n = len(values)
    if None in topics:
        raise WriteFailed(f"Row {topics.index(None)} of a batch has a null topic and the 'topic' option is not set")
    if keys is None:
        keys = [None] * n
    if partitions is None and headers is None and topics.count(topics[0]) == n:
        topic = topics[0]
        for value, key in zip(values, keys, strict=True):
            try:
                produce(topic, value, key)
            except BufferError:
                _produce_when_room(producer, topic, value, key, -1, None)
    else:
        for i in range(n):
            part = partitions[i] if partitions is not None else None
            head = headers[i] if headers is not None else None
            if head is not None:
                head = [(h["key"], h["value"]) for h in head]
            try:
                produce(topics[i], values[i], keys[i], -1 if part is None else part, headers=head)
            except BufferError:
                _produce_when_room(producer, topics[i], values[i], keys[i], -1 if part is None else part, head)
    producer.poll(0)
    errors.check()
    return n


def _produce_when_room(producer: Any, topic: str, value: Any, key: Any, partition: int, headers: Any) -> None:
    """The producer's queue is full (queue.buffering.max.*): serve delivery reports until it takes the row."""
    while True:
        producer.poll(0.05)
        try:
            producer.produce(topic, value, key, partition, headers=headers)
            return
        except BufferError:
            continue


def _finish(producer: Any, errors: _Errors) -> None:
    deadline = time.monotonic() + _FLUSH_TIMEOUT_S
    left = producer.flush(_FLUSH_TIMEOUT_S)
    while left and time.monotonic() < deadline:
        left = producer.flush(1.0)
    errors.check()
    if left:
        raise WriteFailed(f"{left} record(s) were not acknowledged within {_FLUSH_TIMEOUT_S:g} s")


def write_batches(client: Mapping[str, str], topic: str | None, batches: Iterable[Any]) -> int:
    """Produce every row of ``batches`` (pyarrow RecordBatches with a ``value`` column and optional
    ``key``, ``topic``, ``partition``, ``headers``); ``topic`` (the option) wins over the column. Returns the
    number of records written, after all were acknowledged."""
    producer, errors, key = _open(client)
    written = 0
    clean = False
    try:
        for batch in batches:
            names = set(batch.schema.names)
            n = batch.num_rows
            if n == 0:
                continue
            values = batch.column("value").to_pylist()
            topics = [topic] * n if topic is not None else batch.column("topic").to_pylist()
            keys = batch.column("key").to_pylist() if "key" in names else None
            partitions = batch.column("partition").to_pylist() if "partition" in names else None
            headers = batch.column("headers").to_pylist() if "headers" in names else None
            written += _produce_all(producer, errors, topics, values, keys, partitions, headers)
        _finish(producer, errors)
        clean = True
    finally:
        if clean:
            from kqactors.spark.pool import PRODUCERS

            PRODUCERS.give(key, (producer, errors))
        else:
            producer.close(0)
    return written


def write_rows(client: Mapping[str, str], topic: str | None, rows: Iterable[Any], chunk: int = 10_000) -> int:
    """The same for an iterator of pyspark Rows (Spark versions without the Arrow writer classes)."""

    def batches() -> Iterable[Any]:
        buffered: list[Any] = []
        for row in rows:
            buffered.append(row.asDict())
            if len(buffered) >= chunk:
                yield _RowBatch(buffered)
                buffered = []
        if buffered:
            yield _RowBatch(buffered)

    return write_batches(client, topic, batches())


class _RowBatch:
    """Rows shaped like the part of a pyarrow RecordBatch write_batches uses."""

    class _Schema:
        def __init__(self, names: list[str]) -> None:
            self.names = names

    class _Column:
        def __init__(self, values: list) -> None:
            self._values = values

        def to_pylist(self) -> list:
            return self._values

    def __init__(self, rows: list[dict]) -> None:
        self.schema = self._Schema(list(rows[0]))
        self.num_rows = len(rows)
        self._rows = rows

    def column(self, name: str) -> _RowBatch._Column:
        return self._Column([row[name] for row in self._rows])
