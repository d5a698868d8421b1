"""Producer.produce in C (kqactors.native._native.ProducerCore) against its reference, Producer._produce_py.

Runs in: the pytest process, against real brokers (the librdkafka mock cluster and Tansu). With the
extension, ``producer.produce`` is the C twin and ``producer._produce_py`` the Python body it hands every
unusual call to; these tests drive both with the same inputs and compare what they do: what a consumer
reads back, the delivery reports, and the exceptions for bad input. With ``KQACTORS_NATIVE=0`` both names
are the Python body, so the same tests check the reference on its own (and the C-only checks skip); in
the default run the parity test is also what keeps the reference itself exercised.
"""

from __future__ import annotations

import gc
import struct
import sys
import threading
import time
import tracemalloc
import weakref
from typing import Any

import pytest
from integration_helpers import confluent_kafka as ck
from integration_helpers import make_topic
from support.kafka_io import read_back

from kqactors import Producer
from kqactors.errors import KafkaError, KafkaException
from kqactors.native import NATIVE

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

PARTITIONS = 3
FAST = {"kqactors.hosts": 1, "linger.ms": 2}
TS = 1_600_000_000_123  # an explicit CreateTime


def _ack(err, msg):  # a module-level callback: the same object for many calls (the _checked_cb shortcut)
    pass


def _cases(reports: dict[str, list], tag: str) -> list[tuple[tuple, dict]]:
    """(args, kwargs) of produce() calls covering the C path and every way out of it; values are unique
    so the messages can be told apart. ``reports[tag]`` collects the delivery reports of each."""
    on_delivery = _recorder(reports, tag)
    other = _recorder(reports, f"{tag}-never")  # given with on_delivery, which wins: never called
    return [
        (("v-plain",), {}),                                               # str value: the reference
        ((b"v-bytes",), {}),                                              # null key, sticky partition
        ((b"v-keyed", b"k1"), {}),                                        # keyed: the partitioner
        ((b"v-empty-key", b""), {}),
        ((b"",), {"key": b"k-empty-value"}),
        ((None,), {"key": b"k-null-value"}),
        ((), {"value": b"v-kw", "key": b"k2", "partition": 1}),
        ((b"v-p0",), {"partition": 0, "on_delivery": on_delivery}),
        ((b"v-p2", None, 2), {"callback": on_delivery}),
        ((b"v-minus1",), {"partition": -1, "on_delivery": on_delivery, "callback": other}),  # on_delivery wins
        ((b"v-ts", b"k3"), {"timestamp": TS, "on_delivery": on_delivery}),
        ((b"v-ts0",), {"timestamp": 0, "partition": 1}),
        ((b"v-positional", b"k4", 2, on_delivery, None, TS, None), {}),
        ((b"v-headers",), {"headers": [("h", b"x"), ("n", None)], "on_delivery": on_delivery}),  # reference
        ((b"v-dict-headers", b"k5"), {"headers": {"h": b"y"}}),                                  # reference
        ((bytearray(b"v-bytearray"),), {"key": "k-str"}),                                        # reference
        ((b"v-cb-default",), {"callback": None}),
    ]


def _count_calls(obj: Any, name: str) -> list[int]:
    """Wrap obj.name (as an instance attribute) to append 1 to the returned list on every call."""
    calls: list[int] = []
    method = getattr(obj, name)

    def counting(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return method(*args, **kwargs)

    setattr(obj, name, counting)
    return calls


def _recorder(reports: dict[str, list], tag: str):
    lock = threading.Lock()

    def on_delivery(err, msg):
        with lock:
            reports.setdefault(tag, []).append((err, msg))

    return on_delivery


def _normalise(record: dict, nulls_random: bool, since_ms: int, until_ms: int) -> dict:
    """Make a message comparable across the two topics: timestamps taken from the clock become "now"
    (after checking they are; the broker's LogAppendTime becomes "log-append"), and a null key's random partition becomes "any" (after checking it is
    one)."""
    out = dict(record)
    ts_type, ts = out.pop("timestamp")
    if ts_type == ck.TIMESTAMP_LOG_APPEND_TIME:  # the mock cluster's topics: the broker's clock, not ours
        out["timestamp"] = "log-append"
    elif ts == TS:
        out["timestamp"] = TS
    else:
        assert ts_type == ck.TIMESTAMP_CREATE_TIME and since_ms <= ts <= until_ms, (ts_type, ts, since_ms, until_ms)
        out["timestamp"] = "now"
    if nulls_random and not out["key"] and out.pop("explicit") is False:  # null and empty keys: random
        assert 0 <= out["partition"] < PARTITIONS
        out["partition"] = "any"
    out.pop("explicit", None)
    return out


def _as_bytes(obj: Any) -> bytes | None:
    return obj.encode() if isinstance(obj, str) else None if obj is None else bytes(obj)


def _identity(value: bytes | None, key: bytes | None) -> bytes | None:
    """What tells the cases apart: the key when it has one, else the value."""
    return key or value


def _explicit_partitions(cases: list[tuple[tuple, dict]]) -> dict[bytes | None, bool]:
    """Case identity -> whether it names its partition."""
    out = {}
    for args, kwargs in cases:
        value = _as_bytes(kwargs.get("value", args[0] if args else None))
        key = _as_bytes(kwargs.get("key", args[1] if len(args) > 1 else None))
        out[_identity(value, key)] = kwargs.get("partition", args[2] if len(args) > 2 else -1) >= 0
    assert len(out) == len(cases)
    return out



def _read_back(bootstrap: str, topic: str, count: int, timeout: float = 30.0) -> list:
    return read_back(bootstrap, topic, PARTITIONS, count, timeout)


@pytest.mark.parametrize("partitioner", ["consistent_random", "murmur2"])
def test_c_produce_and_the_python_reference_deliver_the_same(cluster, unique_topic, partitioner):
    """The same varied calls through produce() and _produce_py() (a topic each) give the same messages
    on the broker and the same delivery reports. consistent_random takes the C sticky cache for null
    keys; murmur2 hashes them, so every null-key message goes through _partition_for."""
    topics = {"c": f"{unique_topic}-c", "py": f"{unique_topic}-py"}
    for topic in topics.values():
        make_topic(cluster, topic, PARTITIONS)
    reports: dict[str, list] = {}
    read: dict[str, list] = {}
    inputs: dict[str, list] = {}
    for tag, topic in topics.items():
        with Producer({"bootstrap.servers": cluster.bootstrap, "partitioner": partitioner,
                       "on_delivery": _recorder(reports, f"{tag}-default"), **FAST}) as producer:
            producer.list_topics(topic, timeout=10)  # the partition count is known: the C path applies
            produce = producer.produce if tag == "c" else producer._produce_py
            if tag == "c":
                if NATIVE is not None:
                    assert type(producer).produce is NATIVE.ProducerCore.produce
                passed_on = _count_calls(producer, "_produce_py")
            since_ms = time.time_ns() // 1_000_000
            cases = _cases(reports, tag)
            for args, kwargs in cases:
                produce(topic, *args, **kwargs)
            until_ms = time.time_ns() // 1_000_000
            if tag == "c":  # the C path took all but the four unusual calls (str, headers, bytearray)
                assert passed_on == ([] if NATIVE is None else [1] * 4)
            assert producer.flush(30) == 0
        read[tag] = _read_back(cluster.bootstrap, topic, len(cases))
        assert len(read[tag]) == len(cases)
        inputs[tag] = (cases, since_ms, until_ms)

    nulls_random = partitioner == "consistent_random"

    def by_identity(records):
        return sorted(records, key=lambda r: _identity(r["value"], r["key"]) or b"")

    consumed = {}
    delivered = {}
    for tag in topics:
        cases, since_ms, until_ms = inputs[tag]
        explicit = _explicit_partitions(cases)
        consumed[tag] = by_identity(_normalise({
            "partition": m.partition(), "key": m.key(), "value": m.value(), "headers": m.headers(),
            "timestamp": m.timestamp(), "explicit": explicit[_identity(m.value(), m.key())]},
            nulls_random, since_ms, until_ms) for m in read[tag])
        rows = []
        for which in (tag, f"{tag}-default"):
            for err, msg in reports.get(which, []):
                assert err is None
                assert msg.topic() == topics[tag] and msg.offset() >= 0
                rows.append(_normalise({
                    "callback": "per-message" if which == tag else "default", "partition": msg.partition(),
                    "key": msg.key(), "value": msg.value(), "headers": msg.headers(), "timestamp": msg.timestamp(),
                    "explicit": explicit[_identity(msg.value(), msg.key())]}, nulls_random, since_ms, until_ms))
        delivered[tag] = by_identity(rows)
        assert f"{tag}-never" not in reports
        # One report per message, each through the callback it was given (or the configured one).
        assert len(rows) == len(cases)
        assert sum(r["callback"] == "per-message" for r in rows) == 6
    assert consumed["c"] == consumed["py"]
    assert delivered["c"] == delivered["py"]
    if not hasattr(cluster, "create_topic"):  # Tansu keeps CreateTime: the timestamps were compared too
        assert {r["timestamp"] for r in consumed["c"]} == {TS, "now"}


def _outcome(fn, *args: Any, **kwargs: Any) -> tuple:
    """What fn(*args, **kwargs) did: ("ok",) or the exception's type, text and (KafkaException) code."""
    try:
        fn(*args, **kwargs)
    except KafkaException as exc:
        return type(exc), str(exc), exc.args[0].code()
    except (TypeError, ValueError, RuntimeError, BufferError, struct.error) as exc:
        return type(exc), str(exc)
    return ("ok",)


BAD_INPUTS = [
    pytest.param((123, b"x"), {}, TypeError, id="int-topic"),
    pytest.param(("",), {}, TypeError, id="empty-topic"),
    pytest.param((None,), {}, TypeError, id="none-topic"),
    pytest.param(("T", 123), {}, TypeError, id="int-value"),
    pytest.param(("T", b"x", 1.5), {}, TypeError, id="float-key"),
    pytest.param(("T", b"x"), {"partition": "0"}, TypeError, id="str-partition"),
    pytest.param(("T", b"x"), {"partition": True}, TypeError, id="bool-partition"),
    pytest.param(("T", b"x"), {"partition": 99}, KafkaException, id="unknown-partition"),
    pytest.param(("T", b"x"), {"partition": 2**70}, KafkaException, id="huge-partition"),
    pytest.param(("T", b"x"), {"timestamp": "now"}, TypeError, id="str-timestamp"),
    pytest.param(("T", b"x"), {"timestamp": 2**70}, struct.error, id="huge-timestamp"),
    pytest.param(("T", b"x"), {"on_delivery": 42}, TypeError, id="int-on-delivery"),
    pytest.param(("T", b"x"), {"callback": "no"}, TypeError, id="str-callback"),
    pytest.param(("T", b"x"), {"headers": 42}, TypeError, id="int-headers"),
    pytest.param(("T", b"x"), {"headers": [("k", 5)]}, TypeError, id="int-header-value"),
    pytest.param(("T", b"x" * 2000), {}, KafkaException, id="too-large"),
    pytest.param(("T", b"x" * 800), {"key": b"k" * 800, "partition": 1}, KafkaException, id="too-large-with-key"),
    pytest.param(("T", b"x"), {"nope": 1}, TypeError, id="unknown-keyword"),
    pytest.param(("T", b"x", None, -1, None, None, 0, None, 5.0), {}, TypeError, id="nine-positional"),
    pytest.param(("T", b"x"), {"topic": "T"}, TypeError, id="topic-twice"),
    pytest.param((), {"value": b"x"}, TypeError, id="no-topic"),
]


@pytest.mark.parametrize("args, kwargs, expected", BAD_INPUTS)
def test_bad_input_raises_what_the_reference_raises(mock_cluster, unique_topic, args, kwargs, expected):
    make_topic(mock_cluster, unique_topic, PARTITIONS)
    args = tuple(unique_topic if a == "T" else a for a in args)
    with Producer({"bootstrap.servers": mock_cluster.bootstrap, "message.max.bytes": 1500, **FAST}) as producer:
        producer.list_topics(unique_topic, timeout=10)
        ours = _outcome(producer.produce, *args, **kwargs)
        reference = _outcome(producer._produce_py, *args, **kwargs)
        assert ours == reference
        assert ours[0] is expected
        assert len(producer) == 0 and producer._buffers.unsent == 0  # nothing was queued by either
    if expected is KafkaException:
        assert ours[2] in (KafkaError.MSG_SIZE_TOO_LARGE, KafkaError._UNKNOWN_PARTITION)
    if "nope" in kwargs:  # the message names produce(), as it did before the C twin
        assert "Producer.produce() got an unexpected keyword argument 'nope'" in ours[1]


def test_closed_and_fatal_producers_raise_what_the_reference_raises(mock_cluster, unique_topic):
    make_topic(mock_cluster, unique_topic, PARTITIONS)
    producer = Producer({"bootstrap.servers": mock_cluster.bootstrap, **FAST})
    try:
        producer.list_topics(unique_topic, timeout=10)
        producer._fatal = KafkaError(KafkaError._FENCED, "fenced for the test", fatal=True)
        ours = _outcome(producer.produce, unique_topic, b"x")
        assert ours == _outcome(producer._produce_py, unique_topic, b"x")
        assert ours[0] is KafkaException and ours[2] == KafkaError._FATAL
        producer._fatal = None
    finally:
        producer.close()
    ours = _outcome(producer.produce, unique_topic, b"x")
    assert ours == _outcome(producer._produce_py, unique_topic, b"x")
    assert ours == (RuntimeError, "Producer has been closed")


@pytest.mark.parametrize("partition", [-1, 1], ids=["partitioner", "explicit"])
def test_full_queue_raises_buffer_error_and_block_timeout_waits_like_the_reference(mock_cluster, unique_topic,
                                                                                    partition):
    make_topic(mock_cluster, unique_topic, PARTITIONS)
    reports: dict[str, list] = {}
    with Producer({"bootstrap.servers": mock_cluster.bootstrap, "queue.buffering.max.messages": 4,
                   "on_delivery": _recorder(reports, "all"), **FAST}) as producer:
        producer.list_topics(unique_topic, timeout=10)
        with producer._handover_lock:  # nothing is handed over, so nothing frees room meanwhile
            for i in range(4):
                producer.produce(unique_topic, b"%d" % i, key=b"k", partition=partition)
            for produce in (producer.produce, producer._produce_py):
                started = time.monotonic()
                assert _outcome(produce, unique_topic, b"full", b"k", partition) == \
                    (BufferError, "Local: Queue full")
                assert _outcome(produce, unique_topic, b"full", b"k", partition, block_timeout=0.3) == \
                    (BufferError, "Local: Queue full")
                assert time.monotonic() - started >= 0.3
            assert len(producer) == 4 and producer._buffers.unsent == 4
        # With room freed by deliveries while it waits, the blocking form succeeds.
        producer.produce(unique_topic, b"waited", key=b"k", partition=partition, block_timeout=30)
        producer._produce_py(unique_topic, b"waited-py", key=b"k", partition=partition, block_timeout=30)
        assert producer.flush(30) == 0
    values = sorted(msg.value() for err, msg in reports["all"] if err is None)
    assert values == [b"0", b"1", b"2", b"3", b"waited", b"waited-py"]


@pytest.mark.skipif(NATIVE is None, reason="the C produce() is switched off or not built")
def test_c_produce_leaves_no_reference_behind(mock_cluster, unique_topic):
    """Every object passed in is released once its message is reported, on the fast path, on the way to
    the reference and on errors; and the C path's own temporaries do not pile up."""
    make_topic(mock_cluster, unique_topic, PARTITIONS)
    with Producer({"bootstrap.servers": mock_cluster.bootstrap, **FAST}) as producer:
        producer.list_topics(unique_topic, timeout=10)
        topic = (unique_topic + "!")[:-1]  # objects of our own, so their reference counts are ours to read
        key, value = b"key-%d" % id(producer), b"value-%d" % id(producer)
        timestamp = int(str(TS))
        partition = 2

        def callback(err, msg):
            pass

        def rounds():
            with producer._handover_lock:
                for _ in range(200):
                    producer.produce(topic, value, key, on_delivery=callback)
                    producer.produce(topic, value, key, partition, callback, None, timestamp)
                    producer.produce(topic, value, None, -1, callback)                         # sticky
                    producer.produce(topic, value, key, callback=callback, headers=[("h", value)])  # reference
                    for bad in ({"partition": 99}, {"timestamp": "x"}, {"nope": 1}):
                        with pytest.raises((KafkaException, TypeError)):
                            producer.produce(topic, value, key, **bad)
                producer.purge(in_flight=False)
            producer.poll(0.5)

        rounds()  # the sticky entry exists from here on ...
        for p in range(PARTITIONS):  # ... and every partition's buffer (each holds the topic)
            producer.produce(topic, value, partition=p)
        assert producer.flush(30) == 0
        objects = [topic, key, value, timestamp, callback]
        gc.collect()
        before = [sys.getrefcount(o) for o in objects]
        rounds()
        assert len(producer) == 0
        gc.collect()
        assert [sys.getrefcount(o) for o in objects] == before
        # The C path's own temporaries (timestamps, sizes, partitions it makes) are allocated while a line
        # of this file runs: traced with one frame, they are counted against it, and must not pile up. (A
        # few blocks come and go: the pending dicts and packer buffers keep their size between rounds.)
        here = [tracemalloc.Filter(True, __file__)]
        tracemalloc.start(1)
        try:
            rounds()
            gc.collect()
            first = tracemalloc.take_snapshot().filter_traces(here)
            for _ in range(5):
                rounds()
            gc.collect()
            last = tracemalloc.take_snapshot().filter_traces(here)
        finally:
            tracemalloc.stop()
        blocks = sum(stat.count_diff for stat in last.compare_to(first, "filename"))
        assert blocks < 20, f"{blocks} more memory blocks after 5 x 1400 calls"
        assert [sys.getrefcount(o) for o in objects] == before


@pytest.mark.skipif(NATIVE is None, reason="the C produce() is switched off or not built")
def test_producer_state_lives_in_the_c_base_and_is_collected(mock_cluster):
    """The hot state is in C members the cycle collector sees (a Producer sits in cycles: its flusher
    thread's target, bound methods given to the runtime): a closed and dropped producer is freed."""
    producer = Producer({"bootstrap.servers": mock_cluster.bootstrap, **FAST})
    try:
        assert "_buffers" not in producer.__dict__ and "_closed" not in producer.__dict__
        assert producer._buffers in gc.get_referents(producer)
        assert producer._wake in gc.get_referents(producer)
        with pytest.raises(TypeError):
            producer._closed = 1  # flags are real bools
    finally:
        producer.close()
    ref = weakref.ref(producer)
    del producer
    for _ in range(20):
        gc.collect()
        if ref() is None:
            break
        time.sleep(0.1)
    assert ref() is None


@pytest.mark.skipif(NATIVE is None, reason="the C produce() is switched off or not built")
def test_uninitialised_producer_goes_to_the_reference():
    """A Producer whose __init__ never ran has NULL members: produce() must not touch them but raise
    what the reference raises."""
    bare = Producer.__new__(Producer)
    with pytest.raises(AttributeError):
        bare.produce("t", b"x")
    assert not hasattr(bare, "_buffers")
    assert bare._closed is False
