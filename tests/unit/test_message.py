"""Unit tests for kqactors.message: Message accessors/mutators, TopicPartition semantics, constants."""

from __future__ import annotations

import pickle

import msgpack
import pytest

from kqactors import message as m
from kqactors.errors import KafkaError
from kqactors.message import Message, TopicPartition


def test_constants_match_confluent_kafka():
    ck = pytest.importorskip("confluent_kafka")
    for name in ("TIMESTAMP_NOT_AVAILABLE", "TIMESTAMP_CREATE_TIME", "TIMESTAMP_LOG_APPEND_TIME",
                 "OFFSET_BEGINNING", "OFFSET_END", "OFFSET_STORED", "OFFSET_INVALID"):
        assert getattr(m, name) == getattr(ck, name), name


def test_message_accessors():
    err = KafkaError(KafkaError._MSG_TIMED_OUT)
    msg = Message("t", 3, 42, b"k", b"value", [("h", b"1")], err, (m.TIMESTAMP_CREATE_TIME, 1700000000000), 0.25, 7)
    assert (msg.topic(), msg.partition(), msg.offset()) == ("t", 3, 42)
    assert (msg.key(), msg.value(), msg.headers()) == (b"k", b"value", [("h", b"1")])
    assert msg.error() is err
    assert msg.timestamp() == (1, 1700000000000)
    assert msg.latency() == 0.25 and msg.leader_epoch() == 7
    assert len(msg) == 5 == msg.len()


def test_message_defaults_like_confluent_kafka():
    msg = Message()
    assert msg.topic() is None and msg.partition() is None and msg.offset() is None
    assert msg.key() is None and msg.value() is None and msg.headers() is None and msg.error() is None
    assert msg.timestamp() == (m.TIMESTAMP_NOT_AVAILABLE, 0)
    assert len(msg) == 0
    ck = pytest.importorskip("confluent_kafka")
    theirs = ck.Message()
    assert theirs.timestamp() == msg.timestamp() and len(theirs) == len(msg)


def test_message_keyword_construction_matches_confluent():
    ck = pytest.importorskip("confluent_kafka")
    kwargs = dict(topic="t", partition=1, offset=5, key=b"k", value=b"vv", headers=[("a", b"1")],
                  timestamp=(1, 123), latency=0.5, leader_epoch=3)
    ours, theirs = Message(**kwargs), ck.Message(**kwargs)
    for accessor in ("topic", "partition", "offset", "key", "value", "headers", "timestamp", "latency",
                     "leader_epoch"):
        assert getattr(ours, accessor)() == getattr(theirs, accessor)(), accessor
    assert len(ours) == len(theirs)


def test_message_setters():
    msg = Message("t", 0, 1, b"k", b"v")
    msg.set_key({"user": 1})
    msg.set_value("text")
    msg.set_headers({"a": b"1", "b": "two", "c": None})
    msg.set_topic("other")
    msg.set_error(KafkaError(3))
    assert msg.key() == {"user": 1} and msg.value() == "text" and msg.topic() == "other"
    assert msg.headers() == {"a": b"1", "b": "two", "c": None}  # stored as given, like confluent-kafka
    assert msg.error() == 3
    assert len(msg) == 4
    msg.set_headers(None)
    assert msg.headers() is None


def test_message_has_slots_and_repr():
    msg = Message("t", 0, 1, b"k", b"abc")
    with pytest.raises(AttributeError):
        msg.extra = 1
    assert "topic=t" in repr(msg) and "len=3" in repr(msg)
    assert "error=" in repr(Message("t", error=KafkaError(3)))


def test_topic_partition_defaults_and_repr_match_confluent():
    ck = pytest.importorskip("confluent_kafka")
    cases = [(("t",), {}), (("t", 1, 5), {}), (("t", 2, 3, "md"), {"leader_epoch": 7}),
             (("t", 0, 0), {"leader_epoch": -1})]
    for args, kwargs in cases:
        ours, theirs = TopicPartition(*args, **kwargs), ck.TopicPartition(*args, **kwargs)
        assert repr(ours) == repr(theirs)
        assert (ours.topic, ours.partition, ours.offset, ours.metadata, ours.leader_epoch) == \
               (theirs.topic, theirs.partition, theirs.offset, theirs.metadata, theirs.leader_epoch)


def test_topic_partition_equality_hash_and_ordering():
    a = TopicPartition("t", 1, 5)
    assert a == TopicPartition("t", 1, 99) and hash(a) == hash(TopicPartition("t", 1, 99))
    assert a != TopicPartition("t", 2, 5) and a != TopicPartition("u", 1, 5)
    assert a != ("t", 1)
    items = [TopicPartition("b", 0), TopicPartition("a", 3), TopicPartition("a", 1)]
    assert [(tp.topic, tp.partition) for tp in sorted(items)] == [("a", 1), ("a", 3), ("b", 0)]
    with pytest.raises(TypeError):
        _ = a < 5


@pytest.mark.parametrize("args", [(5,), ("t", "x"), ("t", 0, "y"), ("t", 0, 0, 5), ("t", 0, 0, None, "e"),
                                  ("t", True)])
def test_topic_partition_type_errors(args):
    with pytest.raises(TypeError):
        TopicPartition(*args)


def test_topic_partition_error_and_serialisation():
    tp = TopicPartition("t", 1, 10, "meta", 4)
    tp.error = KafkaError(KafkaError.OFFSET_OUT_OF_RANGE, "gone")
    assert "error=KafkaError{code=OFFSET_OUT_OF_RANGE" in repr(tp)
    for again in (pickle.loads(pickle.dumps(tp)),
                  TopicPartition.from_tuple(msgpack.unpackb(msgpack.packb(tp.to_tuple())))):
        assert again == tp
        assert (again.offset, again.metadata, again.leader_epoch) == (10, "meta", 4)
        assert again.error == KafkaError.OFFSET_OUT_OF_RANGE and again.error.str() == "gone"
