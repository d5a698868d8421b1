"""A Spark task's read: one offset range of one Kafka partition, as Arrow record batches.

Runs in: a Spark executor's Python worker (``DataSourceReader.read`` / ``DataSourceStreamReader.read``).
Owns the task's kqactors Consumer (assign, no group, ``kqactors.hosts=0`` unless the query sets
``kafka.kqactors.hosts``: the worker plus one host process), the read loop that stops exactly at the range's
end, the data-loss handling inside a range (offsets deleted before the task got to them: an error, or skipped
when ``failOnDataLoss`` is false) and the conversion of Messages to Arrow columns in the source's schema.

Exactly-once rests on this module reading [start, end) and nothing else: Spark's checkpoint holds the ends,
and a restarted micro-batch asks for the same ranges again.
"""

from __future__ import annotations

import bisect
import logging
import operator
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from kqactors.errors import KafkaError, KafkaException
from kqactors.spark.ranges import DataLossError, OffsetRange, data_loss_hint

__all__ = ["ARROW_SCHEMA", "ARROW_SCHEMA_WITH_HEADERS", "consumer_config", "read_range", "messages_to_batch",
           "ReadTimeout"]

_log = logging.getLogger("kqactors.spark")

HEADERS_TYPE = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
ARROW_SCHEMA = pa.schema([
    ("key", pa.binary()), ("value", pa.binary()), ("topic", pa.string()), ("partition", pa.int32()),
    ("offset", pa.int64()), ("timestamp", pa.timestamp("us", tz="UTC")), ("timestampType", pa.int32()),
])
ARROW_SCHEMA_WITH_HEADERS = ARROW_SCHEMA.append(pa.field("headers", HEADERS_TYPE))

# Per-message field access is the read's hot loop: the Message slots are read with C-level getters (a
# method call per field costs about three times as much). They are kqactors.message.Message's own slots.
_KEY = operator.attrgetter("_key")
_VALUE = operator.attrgetter("_value")
_OFFSET = operator.attrgetter("_offset")
_TIMESTAMP = operator.attrgetter("_timestamp")
_HEADERS = operator.attrgetter("_headers")
_ERROR = operator.attrgetter("_error")

_BATCH_ROWS = 10_000         # rows per Arrow batch handed to Spark (its own default maxRecordsPerBatch)
_WAIT_S = 0.2                # one consume() wait; also how often a stalled read checks where it stands
_STALL_CHECK_S = 2.0         # no progress this long: ask the broker for the partition's watermarks
_ERR_AUTO_OFFSET_RESET = KafkaError._AUTO_OFFSET_RESET
_ERR_OFFSET_OUT_OF_RANGE = KafkaError.OFFSET_OUT_OF_RANGE
_ERR_PARTITION_EOF = KafkaError._PARTITION_EOF
# Errors the consumer reports and recovers from by itself (connections, leader moves, metadata catching up); a
# partition that stays unreadable ends in the stall check or in kafkaConsumer.pollTimeoutMs.
_TRANSIENT = {KafkaError._TIMED_OUT, KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN, KafkaError.LEADER_NOT_AVAILABLE,
              KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.REQUEST_TIMED_OUT, KafkaError.REPLICA_NOT_AVAILABLE,
              KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError.KAFKA_STORAGE_ERROR, KafkaError.FENCED_LEADER_EPOCH,
              KafkaError.UNKNOWN_LEADER_EPOCH}


class ReadTimeout(TimeoutError):
    """A task made no progress within ``kafkaConsumer.pollTimeoutMs``."""


def consumer_config(client: Mapping[str, str], group_id: str) -> dict[str, Any]:
    """A task consumer's configuration: the query's ``kafka.*`` options, plus what the source decides."""
    conf: dict[str, Any] = dict(client)
    conf.setdefault("kqactors.hosts", 0)
    # A task stops at its range's end, where the consumer's next Fetch waits at the log end for up to
    # fetch.wait.max.ms; a pooled consumer's next task would wait behind that Fetch (500 ms by default: a
    # re-used consumer read 333k records in 0.6-0.8 s against 0.2 s fresh; 0.2 s with 50 ms).
    conf.setdefault("fetch.wait.max.ms", 50)
    conf.update({"group.id": group_id, "enable.auto.commit": False, "enable.auto.offset.store": False,
                 "auto.offset.reset": "error", "enable.partition.eof": False})
    return conf


class _Constants:
    """A task's constant columns (topic, partition), built once and sliced per batch (slices share memory)."""

    def __init__(self, topic: str, partition: int, size: int = _BATCH_ROWS) -> None:
        self.size = size
        self.topic = pa.array([topic] * size, pa.string())
        self.partition = pa.repeat(pa.scalar(partition, pa.int32()), size)
        self.kinds = {kind: pa.repeat(pa.scalar(kind - 1, pa.int32()), size) for kind in (0, 1, 2)}

    def column(self, name: str, n: int, topic: str, partition: int) -> pa.Array:
        if n > self.size:
            if name == "topic":
                return pa.array([topic] * n, pa.string())
            return pa.repeat(pa.scalar(partition, pa.int32()), n)
        return (self.topic if name == "topic" else self.partition).slice(0, n)


_FIRST = operator.itemgetter(0)
_SECOND = operator.itemgetter(1)
_TS_MS = pa.timestamp("ms", tz="UTC")
_TS_US = pa.timestamp("us", tz="UTC")


def messages_to_batch(messages: list[Any], topic: str, partition: int, include_headers: bool,
                      constants: _Constants | None = None) -> pa.RecordBatch:
    """Arrow columns of consumed messages (all of one partition, none an error event)."""
    n = len(messages)
    constants = constants or _Constants(topic, partition, n)
    stamps = list(map(_TIMESTAMP, messages))
    kinds = list(map(_FIRST, stamps))
    if n and n <= constants.size and kinds.count(kinds[0]) == n:
        kind_column = constants.kinds[kinds[0]].slice(0, n)  # one timestamp type for the batch: the usual case
    else:
        # librdkafka's timestamp types (0 none, 1 create, 2 log append) as Kafka's ids (-1, 0, 1)
        kind_column = pc.subtract(pa.array(kinds, pa.int32()), pa.scalar(1, pa.int32()))
    columns = [
        pa.array(list(map(_KEY, messages)), pa.binary()),
        pa.array(list(map(_VALUE, messages)), pa.binary()),
        constants.column("topic", n, topic, partition),
        constants.column("partition", n, topic, partition),
        pa.array(list(map(_OFFSET, messages)), pa.int64()),
        pa.array(list(map(_SECOND, stamps)), _TS_MS).cast(_TS_US),
        kind_column,
    ]
    if include_headers:
        columns.append(pa.array([h or None for h in map(_HEADERS, messages)], HEADERS_TYPE))
        return pa.RecordBatch.from_arrays(columns, schema=ARROW_SCHEMA_WITH_HEADERS)
    return pa.RecordBatch.from_arrays(columns, schema=ARROW_SCHEMA)


def read_range(consumer: Any, r: OffsetRange, *, include_headers: bool, fail_on_data_loss: bool,
               poll_timeout_s: float, batch_rows: int = _BATCH_ROWS,
               warn: Callable[[str], None] | None = None,
               clock: Callable[[], float] = time.monotonic) -> Iterator[pa.RecordBatch]:
    """Arrow batches of the records of ``r`` (an assigned-from-nowhere ``consumer``: this assigns it).

    Stops when the position reaches ``r.end``: gaps (compaction, transaction markers, aborted data) are
    stepped over by the position, not waited for. Offsets below the partition's earliest (deleted while the
    query ran) are DataLossError, or skipped when ``fail_on_data_loss`` is false; so is an end past the
    partition's high watermark once the read has caught up with it. No progress for ``poll_timeout_s`` is
    ReadTimeout."""
    from kqactors import TopicPartition

    warn = warn or _log.warning
    topic, partition, end = r.topic, r.partition, r.end
    tp = TopicPartition(topic, partition)
    position = r.start
    if position >= end:
        return
    consumer.assign([TopicPartition(topic, partition, position)])
    pending: list[Any] = []
    constants = _Constants(topic, partition, batch_rows)
    last_progress = clock()
    last_check = last_progress
    while position < end:
        room = max(batch_rows - len(pending), 1)
        messages = consumer.consume(room, _WAIT_S)
        now = clock()
        if messages:
            if any(map(_ERROR, messages)):
                good = []
                for msg in messages:
                    err = msg._error
                    if err is None:
                        good.append(msg)
                        continue
                    position = _on_error(consumer, tp, err, position, end, fail_on_data_loss, warn)
                messages = good
            if messages:
                offsets = list(map(_OFFSET, messages))
                if offsets[-1] >= end:
                    cut = bisect.bisect_left(offsets, end)
                    messages = messages[:cut]
                    position = end
                else:
                    position = offsets[-1] + 1
                pending.extend(messages)
                last_progress = now
        if position < end:
            # Skipped records (control markers, aborted data) move the consumer's position, not the messages.
            at = consumer.position([tp])[0].offset
            if at is not None and at > position:
                position = min(at, end)
                last_progress = now
        if pending and (len(pending) >= batch_rows or position >= end or not messages):
            yield messages_to_batch(pending, topic, partition, include_headers, constants)
            pending = []
        if position >= end:
            break
        if now - last_progress >= _STALL_CHECK_S and now - last_check >= _STALL_CHECK_S:
            last_check = now
            position = _check_stalled(consumer, tp, position, end, fail_on_data_loss, warn)
            if position >= end:
                break
        if now - last_progress >= poll_timeout_s:
            raise ReadTimeout(f"Reading {r}: no record at or after offset {position} arrived in {poll_timeout_s:g} "
                              f"s (kafkaConsumer.pollTimeoutMs)")
    if pending:
        yield messages_to_batch(pending, topic, partition, include_headers, constants)


def _on_error(consumer: Any, tp: Any, err: Any, position: int, end: int, fail_on_data_loss: bool,
              warn: Callable[[str], None]) -> int:
    code = err.code()
    if code in (_ERR_AUTO_OFFSET_RESET, _ERR_OFFSET_OUT_OF_RANGE):
        low, high = consumer.get_watermark_offsets(tp, timeout=30)
        if low <= position <= high:
            raise RuntimeError(f"Reading {tp.topic}-{tp.partition} at offset {position}: the broker answered "
                               f"offset out of range while the partition holds [{low}, {high}) ({err.str()})")
        return _lost(consumer, tp, position, end, low, high, fail_on_data_loss, warn)
    if code == _ERR_PARTITION_EOF or code in _TRANSIENT:
        return position
    raise RuntimeError(f"Reading {tp.topic}-{tp.partition} at offset {position}: {err.str()} ({err.name()})")


def _check_stalled(consumer: Any, tp: Any, position: int, end: int, fail_on_data_loss: bool,
                   warn: Callable[[str], None]) -> int:
    """No record for a while: if the partition's log now ends below the range's end, the rest is gone. The
    watermarks come from the last Fetch response when there is one (a ListOffsets answer otherwise)."""
    low, high = consumer.get_watermark_offsets(tp, cached=True)
    if low < 0 or high < 0:
        try:
            low, high = consumer.get_watermark_offsets(tp, timeout=30)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.UNKNOWN_TOPIC_OR_PART:
                raise
            message = f"{tp.topic}-{tp.partition} no longer exists; offsets [{position}, {end}) cannot be read."
            if fail_on_data_loss:
                raise DataLossError(message + data_loss_hint(True)) from None
            warn(message + data_loss_hint(False))
            return end
    if position < low or (position >= high and high < end):
        return _lost(consumer, tp, position, end, low, high, fail_on_data_loss, warn)
    return position


def _lost(consumer: Any, tp: Any, position: int, end: int, low: int, high: int, fail_on_data_loss: bool,
          warn: Callable[[str], None]) -> int:
    from kqactors import TopicPartition

    if position < low:
        message = (f"Cannot fetch offset {position} of {tp.topic}-{tp.partition}: its earliest available offset "
                   f"is now {low} (the task reads up to {end}).")
        resume = min(low, end)
    else:
        message = (f"Cannot fetch offsets [{position}, {end}) of {tp.topic}-{tp.partition}: the partition now "
                   f"ends at {high}.")
        resume = end
    if fail_on_data_loss:
        raise DataLossError(message + data_loss_hint(True))
    warn(message + data_loss_hint(False))
    if resume < end:
        consumer.seek(TopicPartition(tp.topic, tp.partition, resume))
    return resume
