"""kqactors.spark.pool (idle clients kept between tasks) and kqactors.spark.partition_writer (a write task)
against a fake Producer."""

from __future__ import annotations

import pytest

pa = pytest.importorskip("pyarrow")

import kqactors  # noqa: E402
from kqactors import KafkaError  # noqa: E402
from kqactors.spark import partition_writer  # noqa: E402
from kqactors.spark.pool import PRODUCERS, ClientPool, config_key  # noqa: E402


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_pool_hands_back_clients_by_key_and_closes_idle_ones() -> None:
    closed: list[str] = []
    clock = Clock()
    pool = ClientPool(closed.append, idle_timeout_s=10, clock=clock, reap=False)
    a, b = config_key("consumer", {"x": 1}), config_key("consumer", {"x": "1", "y": 2})
    assert a == config_key("consumer", {"x": "1"}) and a != b
    pool.give(a, "c1")
    assert pool.take(b) is None and pool.take(a) == "c1" and pool.take(a) is None
    pool.give(a, "c2")
    clock.now = 11
    assert pool.take(a) is None and closed == ["c2"]
    pool.give(a, "c3")
    pool.give(b, "c4")
    pool.close_all()
    assert sorted(closed) == ["c2", "c3", "c4"] and len(pool) == 0


def test_the_reaper_closes_idle_clients_of_a_quiet_worker() -> None:
    import time

    closed: list[str] = []
    pool = ClientPool(closed.append, idle_timeout_s=0.2)
    pool.give(config_key("consumer", {}), "c1")
    deadline = time.monotonic() + 5
    while not closed and time.monotonic() < deadline:
        time.sleep(0.02)
    assert closed == ["c1"] and len(pool) == 0


class FakeProducer:
    made: list[FakeProducer] = []
    fail_topic_of_new: str | None = None

    def __init__(self, conf) -> None:
        self.conf = conf
        self.on_delivery = conf["on_delivery"]
        self.sent: list[tuple] = []
        self.full_once = True
        self.fail_topic = FakeProducer.fail_topic_of_new
        self.closed = False
        FakeProducer.made.append(self)

    def produce(self, topic, value=None, key=None, partition=-1, headers=None):
        if self.full_once:
            self.full_once = False
            raise BufferError("queue full")
        self.sent.append((topic, value, key, partition, headers))
        if topic == self.fail_topic:
            self.on_delivery(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED), kqactors.Message(topic, partition))

    def poll(self, timeout=0):
        return 0

    def flush(self, timeout=None):
        return 0

    def close(self, timeout=None):
        self.closed = True


@pytest.fixture
def fake_producer(monkeypatch):
    FakeProducer.made = []
    FakeProducer.fail_topic_of_new = None
    monkeypatch.setattr(kqactors, "Producer", FakeProducer)
    PRODUCERS.close_all()
    yield FakeProducer
    PRODUCERS.close_all()


def batch(**columns) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict(columns)


def test_write_batches_produces_every_row_with_its_columns(fake_producer) -> None:
    headers = pa.array([[{"key": "h", "value": b"1"}], None], pa.list_(pa.struct([("key", pa.string()),
                                                                                ("value", pa.binary())])))
    rows = pa.RecordBatch.from_arrays(
        [pa.array([b"a", b"b"]), pa.array(["k", None]), pa.array([2, None], pa.int32()), headers,
         pa.array(["x", "y"])], names=["value", "key", "partition", "headers", "topic"])
    assert partition_writer.write_batches({"bootstrap.servers": "h:1"}, None, [rows]) == 2
    (producer,) = fake_producer.made
    assert producer.sent == [("x", b"a", "k", 2, [("h", b"1")]), ("y", b"b", None, -1, None)]
    assert producer.conf["partitioner"] == "murmur2_random" and producer.conf["kqactors.hosts"] == 0
    assert producer.conf["delivery.report.only.error"] is True
    # the topic option wins over the column; the idle producer serves the next task
    assert partition_writer.write_batches({"bootstrap.servers": "h:1"}, "forced", [rows]) == 2
    assert len(fake_producer.made) == 1 and producer.sent[-1][0] == "forced"


def test_a_delivery_error_fails_the_task_and_the_producer_is_not_kept(fake_producer) -> None:
    fake_producer.fail_topic_of_new = "denied"
    with pytest.raises(partition_writer.WriteFailed, match=r"TOPIC_AUTHORIZATION_FAILED.*denied"):
        partition_writer.write_batches({"bootstrap.servers": "h:1"}, None,
                                       [batch(value=[b"a", b"b"], topic=["ok", "denied"])])
    assert fake_producer.made[0].closed and len(PRODUCERS) == 0


def test_rows_from_older_pyspark_are_written_too(fake_producer) -> None:
    class Row(dict):
        def asDict(self):
            return dict(self)

    rows = [Row(value=f"v{i}", key=None, topic="t") for i in range(5)]
    assert partition_writer.write_rows({"bootstrap.servers": "h:1"}, None, rows, chunk=2) == 5
    assert [s[1] for s in fake_producer.made[0].sent] == ["v0", "v1", "v2", "v3", "v4"]
