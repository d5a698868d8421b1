"""Runs in: pytest, against a real Tansu broker (``tansu`` fixture). Record codec cross-checked with librdkafka.

- confluent-kafka (librdkafka) produces with each codec; the raw record set from a Fetch v4 decodes with
  kqactors.records to exactly what was sent.
- kqactors.records builds batches with each codec, sends them in a raw Produce v3, and confluent-kafka's
  consumer reads them back intact.
"""

from __future__ import annotations

import pytest

from kqactors.records import build_batch, codec_id, decode_record_set, scan_record_set

pytestmark = [pytest.mark.interop, pytest.mark.integration]

confluent_kafka = pytest.importorskip("confluent_kafka")

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
TS = 1_700_000_000_000
PRODUCE_V3 = 3
FETCH_V4 = 4


def sample_messages(count: int = 60) -> list[tuple]:
    """(timestamp, key, value, headers): null keys/values, headers with null values, large values."""
    out = []
    for i in range(count):
        key = None if i % 7 == 0 else b"key-%d" % i
        value = None if i % 11 == 5 else (b"value %d " % i) * (1 + i * 5)
        headers = [("i", str(i).encode()), ("none", None)] if i % 3 == 0 else []
        out.append((TS + i, key, value, headers))
    return out


def _connect(tansu):
    from kqactors.protocol.blocking import BlockingConnection

    return BlockingConnection.from_bootstrap(tansu.bootstrap)


def raw_fetch(tansu, topic: str, partition: int = 0, offset: int = 0) -> bytes:
    from kqactors.protocol.generated.fetch import FetchPartition, FetchRequest, FetchTopic

    request = FetchRequest(
        replica_id=-1, max_wait_ms=500, min_bytes=1, max_bytes=16 << 20, isolation_level=0,
        topics=[FetchTopic(topic=topic, partitions=[
            FetchPartition(partition=partition, fetch_offset=offset, partition_max_bytes=16 << 20)])],
    )  # fmt: skip
    with _connect(tansu) as conn:
        response = conn.request_at(1, FETCH_V4, request)
    [topic_response] = response.responses
    [partition_response] = topic_response.partitions
    assert partition_response.error_code == 0
    return bytes(partition_response.records or b"")


def raw_produce(tansu, topic: str, record_set: bytes, partition: int = 0) -> int:
    from kqactors.protocol.generated.produce import PartitionProduceData, ProduceRequest, TopicProduceData

    request = ProduceRequest(
        acks=-1,
        timeout_ms=10_000,
        topic_data=[
            TopicProduceData(
                name=topic, partition_data=[PartitionProduceData(index=partition, records=record_set)]
            )
        ],
    )
    with _connect(tansu) as conn:
        response = conn.request_at(0, PRODUCE_V3, request)
    [partition_response] = response.responses[0].partition_responses
    assert partition_response.error_code == 0, partition_response.error_code
    return partition_response.base_offset


def create_topic(tansu, topic: str) -> None:
    """Create a 1-partition topic (Tansu does not auto-create topics on a raw Produce)."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": tansu.bootstrap})
    for future in admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)]).values():
        future.result(timeout=15)


def _headers_tuple(headers) -> tuple:
    return tuple((k, v) for k, v in (headers or []))


@pytest.mark.parametrize("codec", CODECS)
def test_librdkafka_batches_decode_exactly(tansu, unique_topic: str, codec: str) -> None:
    messages = sample_messages()
    producer = confluent_kafka.Producer({
        "bootstrap.servers": tansu.bootstrap, "compression.codec": codec, "linger.ms": 100,
        "enable.idempotence": True,
    })  # fmt: skip
    for ts, key, value, headers in messages:
        producer.produce(
            unique_topic, value=value, key=key, headers=headers or None, partition=0, timestamp=ts
        )
    assert producer.flush(30) == 0

    data = b""
    decoded: list[tuple] = []
    while len(decoded) < len(messages):
        data = raw_fetch(tansu, unique_topic, offset=len(decoded))
        scan = scan_record_set(data)
        assert scan.batches, "fetch returned no complete batch"
        batches = decode_record_set(data)
        decoded += [r for b in batches for r in b.records]
        assert {b.codec for b in batches} == {codec_id(codec)}
        assert batches and all(b.producer_id >= 0 and b.base_sequence >= 0 for b in batches)  # idempotent
        assert scan.next_offset(0) == len(decoded)
    expected = [
        (i, ts, key, value, _headers_tuple(headers)) for i, (ts, key, value, headers) in enumerate(messages)
    ]
    assert decoded == expected


@pytest.mark.parametrize("codec", CODECS)
def test_kqactors_batches_read_by_librdkafka(tansu, unique_topic: str, codec: str) -> None:
    messages = sample_messages()
    first = bytes(build_batch(messages[:25], codec=codec_id(codec)))
    second = bytes(build_batch(messages[25:], codec=codec_id(codec)))
    create_topic(tansu, unique_topic)
    assert raw_produce(tansu, unique_topic, first) == 0
    assert raw_produce(tansu, unique_topic, second) == 25

    consumer = confluent_kafka.Consumer({
        "bootstrap.servers": tansu.bootstrap, "group.id": unique_topic, "enable.auto.commit": False,
        "check.crcs": True,
    })  # fmt: skip
    try:
        consumer.assign([confluent_kafka.TopicPartition(unique_topic, 0, 0)])
        got = []
        for _ in range(100):
            msg = consumer.poll(0.5)
            if msg is None:
                if len(got) >= len(messages):
                    break
                continue
            assert msg.error() is None, msg.error()
            got.append(
                (msg.offset(), msg.timestamp()[1], msg.key(), msg.value(), _headers_tuple(msg.headers()))
            )
            if len(got) == len(messages):
                break
    finally:
        consumer.close()
    expected = [
        (i, ts, key, value, _headers_tuple(headers)) for i, (ts, key, value, headers) in enumerate(messages)
    ]
    assert got == expected
