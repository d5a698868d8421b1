"""What kqactors produces (to Tansu; the mock cluster's ApiVersions reply defeats kafka-python) is read back identically by confluent-kafka, kafka-python and aiokafka:
every codec, keys, null keys/values, headers and explicit timestamps."""

from __future__ import annotations

import asyncio

import pytest

from kqactors import Producer

pytestmark = [pytest.mark.interop, pytest.mark.integration]

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


def _expected(codec: str) -> list[tuple]:
    rows = []
    for i in range(12):
        key = None if i % 4 == 0 else f"key-{i}".encode()
        value = None if i % 5 == 3 else (f"{codec}-value-{i}-".encode() * 20)
        headers = [("idx", str(i).encode()), ("null", None)] if i % 3 == 0 else None
        rows.append((key, value, headers, 1_700_000_000_000 + i))
    return rows


def _produce(bootstrap: str, topic: str, codec: str) -> list[tuple]:
    rows = _expected(codec)
    errors = []
    with Producer({"bootstrap.servers": bootstrap, "compression.type": codec, "kqactors.hosts": 1,
                   "linger.ms": 20}) as producer:
        for key, value, headers, ts in rows:
            producer.produce(topic, value=value, key=key, headers=headers, timestamp=ts, partition=0,
                             on_delivery=lambda err, msg: errors.append(err) if err else None)
        assert producer.flush(30) == 0
    assert errors == []
    return rows


def _norm_headers(headers) -> list | None:
    if not headers:
        return None
    return [(k, v) for k, v in headers]


def _read_confluent(bootstrap: str, topics: list[str], count: int) -> dict[str, list[tuple]]:
    confluent_kafka = pytest.importorskip("confluent_kafka")
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": "kq-interop",
                                         "enable.auto.commit": False})
    consumer.assign([confluent_kafka.TopicPartition(t, 0, confluent_kafka.OFFSET_BEGINNING) for t in topics])
    out: dict[str, list[tuple]] = {t: [] for t in topics}
    try:
        for _ in range(300):
            msg = consumer.poll(0.2)
            if msg is None or msg.error():
                continue
            out[msg.topic()].append((msg.key(), msg.value(), _norm_headers(msg.headers()), msg.timestamp()[1]))
            if sum(map(len, out.values())) == count * len(topics):
                break
    finally:
        consumer.close()
    return out


def _read_kafka_python(bootstrap: str, topics: list[str], count: int) -> dict[str, list[tuple]]:
    kafka = pytest.importorskip("kafka")
    consumer = kafka.KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                                   consumer_timeout_ms=10000, group_id=None)
    partitions = [kafka.TopicPartition(t, 0) for t in topics]
    consumer.assign(partitions)
    consumer.seek_to_beginning(*partitions)
    out: dict[str, list[tuple]] = {t: [] for t in topics}
    try:
        for msg in consumer:
            out[msg.topic].append((msg.key, msg.value, _norm_headers(msg.headers), msg.timestamp))
            if sum(map(len, out.values())) == count * len(topics):
                break
    finally:
        consumer.close()
    return out


def _read_aiokafka(bootstrap: str, topics: list[str], count: int) -> dict[str, list[tuple]]:
    aiokafka = pytest.importorskip("aiokafka")

    async def run():
        consumer = aiokafka.AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
        await consumer.start()
        partitions = [aiokafka.TopicPartition(t, 0) for t in topics]
        consumer.assign(partitions)
        await consumer.seek_to_beginning(*partitions)
        out: dict[str, list[tuple]] = {t: [] for t in topics}
        try:
            for _ in range(60):
                batch = await asyncio.wait_for(consumer.getmany(timeout_ms=500), 15)
                for records in batch.values():
                    for msg in records:
                        out[msg.topic].append((msg.key, msg.value, _norm_headers(msg.headers), msg.timestamp))
                if sum(map(len, out.values())) >= count * len(topics):
                    break
        finally:
            await consumer.stop()
        return out

    return asyncio.run(run())


READERS = {"confluent": _read_confluent, "kafka-python": _read_kafka_python, "aiokafka": _read_aiokafka}


def test_peers_read_what_kqactors_wrote_with_every_codec(tansu, unique_topic):
    topics = {codec: f"{unique_topic}-{codec}" for codec in CODECS}
    expected = {}
    for codec, topic in topics.items():
        rows = _produce(tansu.bootstrap, topic, codec)
        expected[topic] = [(k, v, _norm_headers(h), ts) for k, v, h, ts in rows]
    count = len(next(iter(expected.values())))
    for name, reader in READERS.items():
        got = reader(tansu.bootstrap, list(topics.values()), count)
        for codec, topic in topics.items():
            assert got[topic] == expected[topic], f"{name} read back something different with codec {codec}"
