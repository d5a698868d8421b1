"""kqactors.spark.partition_reader: a task's read loop against a fake consumer, and the Arrow conversion."""

from __future__ import annotations

import pytest

pa = pytest.importorskip("pyarrow")

from kqactors import KafkaError, KafkaException, Message, TopicPartition  # noqa: E402
from kqactors.spark.partition_reader import (  # noqa: E402
    ARROW_SCHEMA,
    ARROW_SCHEMA_WITH_HEADERS,
    ReadTimeout,
    consumer_config,
    messages_to_batch,
    read_range,
)
from kqactors.spark.ranges import DataLossError, OffsetRange  # noqa: E402


def message(offset: int, topic: str = "t", partition: int = 0, kind: int = 1, headers=None) -> Message:
    return Message(topic, partition, offset, b"k%d" % offset if offset % 2 else None, b"v%d" % offset, headers,
                   None, (kind, 1_700_000_000_000 + offset))


class FakeConsumer:
    """One partition's log: ``offsets`` present (gaps are control records / compacted away), ``low`` the
    earliest available offset; ``consume`` hands out up to ``chunk`` records per call."""

    def __init__(self, offsets, low: int = 0, chunk: int = 7, high: int | None = None,
                 stuck_at: int | None = None) -> None:
        self.stuck_at = stuck_at
        self.log = {o: message(o) for o in offsets}
        self.low = low
        self.high = (max(offsets) + 1) if high is None else high
        self.chunk = chunk
        self.position_ = None
        self.seeks: list[int] = []
        self.stopped = False

    def assign(self, parts) -> None:
        (tp,) = parts
        self.position_ = tp.offset

    def seek(self, tp) -> None:
        self.seeks.append(tp.offset)
        self.position_ = tp.offset
        self.stopped = False

    def consume(self, n, timeout):
        if self.stopped:
            return []
        if self.position_ < self.low:
            self.stopped = True
            return [Message("t", 0, self.position_, None, b"", None,
                            KafkaError(KafkaError._AUTO_OFFSET_RESET, "offset out of range"))]
        out = []
        pos = self.position_
        while len(out) < min(n, self.chunk) and pos < self.high and pos != self.stuck_at:
            if pos in self.log:
                out.append(self.log[pos])
            pos += 1
        self.position_ = pos
        return out

    def position(self, tps):
        return [TopicPartition("t", 0, self.position_)]

    def get_watermark_offsets(self, tp, timeout=None, cached=False):
        return self.low, self.high


def read(consumer, start, end, **kw):
    kw.setdefault("include_headers", False)
    kw.setdefault("fail_on_data_loss", True)
    kw.setdefault("poll_timeout_s", 5.0)
    batches = list(read_range(consumer, OffsetRange("t", 0, start, end), **kw))
    return [o for b in batches for o in b.column("offset").to_pylist()], batches


def test_reads_exactly_the_range_in_batches() -> None:
    offsets, batches = read(FakeConsumer(range(100)), 10, 55, batch_rows=20)
    assert offsets == list(range(10, 55))
    assert [b.num_rows for b in batches] == [20, 20, 5]
    assert all(b.schema.equals(ARROW_SCHEMA) for b in batches)


def test_gaps_are_stepped_over_by_the_position() -> None:
    present = [o for o in range(50) if o % 5 != 4]  # 4, 9, ... are markers the consumer never hands out
    offsets, _ = read(FakeConsumer(present, high=50), 0, 50)
    assert offsets == [o for o in range(50) if o % 5 != 4]
    offsets, _ = read(FakeConsumer(present, chunk=100, high=50), 0, 50)
    assert offsets[-1] == 48


def test_empty_range_assigns_nothing() -> None:
    consumer = FakeConsumer(range(5))
    assert read(consumer, 3, 3)[0] == [] and consumer.position_ is None


def test_deleted_offsets_fail_with_partition_and_offsets() -> None:
    with pytest.raises(DataLossError, match=r"offset 3 of t-0: its earliest available offset is now 20.*failOnDataLoss"):
        read(FakeConsumer(range(100), low=20), 3, 50)


def test_deleted_offsets_are_skipped_without_fail_on_data_loss() -> None:
    warnings: list[str] = []
    consumer = FakeConsumer(range(100), low=20)
    offsets, _ = read(consumer, 3, 50, fail_on_data_loss=False, warn=warnings.append)
    assert offsets == list(range(20, 50)) and consumer.seeks == [20]
    assert "offset 3 of t-0" in warnings[0]
    assert read(FakeConsumer(range(100), low=80), 3, 50, fail_on_data_loss=False, warn=warnings.append)[0] == []


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        self.now += 0.5
        return self.now


def test_an_end_beyond_the_log_is_data_loss_once_caught_up() -> None:
    with pytest.raises(DataLossError, match=r"offsets \[30, 40\) of t-0: the partition now ends at 30"):
        read(FakeConsumer(range(30)), 0, 40, clock=Clock())
    warnings: list[str] = []
    offsets, _ = read(FakeConsumer(range(30)), 0, 40, fail_on_data_loss=False, warn=warnings.append, clock=Clock())
    assert offsets == list(range(30)) and warnings


def test_a_deleted_partition_is_data_loss_once_the_read_stalls() -> None:
    class Deleted(FakeConsumer):
        def get_watermark_offsets(self, tp, timeout=None, cached=False):
            if cached:
                return -1001, -1001
            raise KafkaException(KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART))

    with pytest.raises(DataLossError, match=r"t-0 no longer exists; offsets \[30, 40\)"):
        read(Deleted(range(40), stuck_at=30), 0, 40, clock=Clock())
    offsets, _ = read(Deleted(range(40), stuck_at=30), 0, 40, clock=Clock(), fail_on_data_loss=False,
                      warn=lambda m: None)
    assert offsets == list(range(30))


def test_no_progress_times_out() -> None:
    consumer = FakeConsumer(range(40), stuck_at=30)  # the log holds 40 records, the fetch stops at 30
    with pytest.raises(ReadTimeout, match=r"t-0 \[0, 40\).*offset 30"):
        read(consumer, 0, 40, clock=Clock(), poll_timeout_s=3.0)


def test_arrow_columns() -> None:
    msgs = [message(0, kind=1), message(1, kind=1, headers=[("h", b"x"), ("n", None)])]
    batch = messages_to_batch(msgs, "t", 3, include_headers=True)
    assert batch.schema.equals(ARROW_SCHEMA_WITH_HEADERS)
    rows = batch.to_pylist()
    assert rows[0]["key"] is None and rows[1]["key"] == b"k1" and rows[1]["value"] == b"v1"
    assert rows[0]["topic"] == "t" and rows[0]["partition"] == 3 and rows[1]["offset"] == 1
    assert rows[0]["timestamp"].timestamp() == 1_700_000_000.0 and rows[0]["timestampType"] == 0
    assert rows[0]["headers"] is None
    assert rows[1]["headers"] == [{"key": "h", "value": b"x"}, {"key": "n", "value": None}]
    mixed = messages_to_batch([message(0, kind=2), message(1, kind=0)], "t", 0, include_headers=False)
    assert mixed.column("timestampType").to_pylist() == [1, -1]
    assert messages_to_batch([], "t", 0, False).num_rows == 0


def test_arrow_schema_is_what_pyspark_expects() -> None:
    pytest.importorskip("pyspark")
    import inspect

    from pyspark.sql.pandas.types import to_arrow_schema

    from kqactors.spark.source import SCHEMA, SCHEMA_WITH_HEADERS

    utc = {"timezone": "UTC"} if "timezone" in inspect.signature(to_arrow_schema).parameters else {}  # 4.1+
    assert to_arrow_schema(SCHEMA, **utc).equals(ARROW_SCHEMA)
    assert to_arrow_schema(SCHEMA_WITH_HEADERS, **utc).equals(ARROW_SCHEMA_WITH_HEADERS)


def test_consumer_config_keeps_user_settings_and_forces_what_the_read_needs() -> None:
    conf = consumer_config({"bootstrap.servers": "h:1", "kqactors.hosts": "2", "fetch.max.bytes": "5"}, "g")
    assert conf["kqactors.hosts"] == "2" and conf["fetch.max.bytes"] == "5" and conf["group.id"] == "g"
    assert conf["auto.offset.reset"] == "error" and conf["enable.auto.commit"] is False
    assert consumer_config({"bootstrap.servers": "h:1"}, "g")["kqactors.hosts"] == 0
