"""SerializingProducer / DeserializingConsumer: a produce/consume round trip on the librdkafka mock cluster,
serde errors raised as confluent-kafka raises them."""

from __future__ import annotations

import pytest

from kqactors import DeserializingConsumer, SerializingProducer
from kqactors.error import KeySerializationError, ValueDeserializationError, ValueSerializationError
from kqactors.serialization import (
    IntegerDeserializer,
    IntegerSerializer,
    StringDeserializer,
    StringSerializer,
)


def test_round_trip_and_errors(mock_cluster, unique_topic):
    mock_cluster.create_topic(unique_topic, 1)
    reports = []
    producer = SerializingProducer({"bootstrap.servers": mock_cluster.bootstrap, "kqactors.hosts": 0,
                                    "key.serializer": IntegerSerializer(), "value.serializer": StringSerializer()})
    try:
        producer.produce(unique_topic, key=7, value="héllo", on_delivery=lambda err, msg: reports.append(err))
        with pytest.raises(KeySerializationError):
            producer.produce(unique_topic, key="not an int", value="x")
        with pytest.raises(ValueSerializationError):
            producer.produce(unique_topic, key=1, value=5)
        assert producer.flush(30) == 0
    finally:
        producer.flush(5)
    assert reports == [None]
    consumer = DeserializingConsumer({"bootstrap.servers": mock_cluster.bootstrap, "group.id": "g-serde",
                                      "auto.offset.reset": "earliest", "kqactors.hosts": 0,
                                      "key.deserializer": IntegerDeserializer(),
                                      "value.deserializer": StringDeserializer()})
    try:
        consumer.subscribe([unique_topic])
        msg = None
        for _ in range(60):
            msg = consumer.poll(0.5)
            if msg is not None:
                break
        assert msg is not None and (msg.key(), msg.value()) == (7, "héllo")
        with pytest.raises(NotImplementedError):
            consumer.consume()
    finally:
        consumer.close()


def test_deserialization_error_carries_the_raw_message(mock_cluster, unique_topic):
    mock_cluster.create_topic(unique_topic, 1)
    producer = SerializingProducer({"bootstrap.servers": mock_cluster.bootstrap, "kqactors.hosts": 0})
    producer.produce(unique_topic, key=b"k", value=b"\xff\xfe")
    assert producer.flush(30) == 0
    consumer = DeserializingConsumer({"bootstrap.servers": mock_cluster.bootstrap, "group.id": "g-serde-err",
                                      "auto.offset.reset": "earliest", "kqactors.hosts": 0,
                                      "value.deserializer": StringDeserializer("utf_8")})
    try:
        consumer.subscribe([unique_topic])
        with pytest.raises(ValueDeserializationError) as info:
            for _ in range(60):
                consumer.poll(0.5)
        assert info.value.kafka_message.value() == b"\xff\xfe"
    finally:
        consumer.close()
