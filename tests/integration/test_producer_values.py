"""Producer.produce_values (many values in one call) and delivery counters, against real brokers.

Runs in: the pytest process, against the librdkafka mock cluster and Tansu. With the extension,
``produce_values`` is the C twin (ProducerCore.produce_values) and ``_produce_values_py`` the Python reference;
both are driven with the same inputs and must queue the same messages: what a consumer reads back (keys,
values, headers, partitions as the partitioner chooses them) and what the delivery counters count. The
contract for what a call does not take (queue full, a value produce() would refuse) is checked too: it stops
there, and produce() of that value gives the outcome.
"""

from __future__ import annotations

import pytest
from integration_helpers import make_topic
from support.kafka_io import read_back

from kqactors import Producer
from kqactors.errors import KafkaError, KafkaException
from kqactors.native import NATIVE
from kqactors.partitioner import Partitioner

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

PARTITIONS = 3
FAST = {"kqactors.hosts": 1, "linger.ms": 2}
HEADERS = [("source", b"file-a"), ("empty", None)]



def _read_back(bootstrap: str, topic: str, count: int, timeout: float = 30.0) -> list:
    return read_back(bootstrap, topic, PARTITIONS, count, timeout)


@pytest.mark.parametrize("which", ["c", "py"])
def test_produce_values_queues_what_produce_would(cluster, unique_topic, which):
    """Keyed and null-key values with headers, in several calls from given starts; every message arrives with
    its key, value and headers, keyed ones in murmur2's partition, each partition in produce order; the counter
    counts every delivery and no error."""
    topic = f"{unique_topic}-{which}"
    make_topic(cluster, topic, PARTITIONS)
    values = [b"value-%d" % i for i in range(600)] + [None]
    keys = [None if i % 3 == 0 else b"key-%d" % (i % 7) for i in range(len(values))]
    ok: list[int] = []
    errors: list = []
    with Producer({"bootstrap.servers": cluster.bootstrap, "partitioner": "murmur2_random", **FAST}) as producer:
        producer.list_topics(topic, timeout=10)
        produce_values = producer.produce_values if which == "c" else producer._produce_values_py
        if which == "c" and NATIVE is not None:
            assert type(producer).produce_values is NATIVE.ProducerCore.produce_values
        counter = producer.delivery_counter(ok.append, lambda err, msg: errors.append(err))
        assert produce_values(topic, values, 0, keys, HEADERS, counter) == len(values)
        assert produce_values(topic, values, len(values), keys, HEADERS, counter) == len(values)  # nothing left
        assert producer.flush(30) == 0
    assert errors == [] and sum(ok) == len(values)
    assert len(ok) < len(values) / 10  # runs of deliveries: far fewer calls than messages

    read = _read_back(cluster.bootstrap, topic, len(values))
    assert sorted((m.value() or b"") for m in read) == sorted((v or b"") for v in values)
    partitioner = Partitioner("murmur2_random")
    index = {v: i for i, v in enumerate(values)}
    last_offset_index: dict[int, int] = {}
    for m in sorted(read, key=lambda m: (m.partition(), m.offset())):
        i = index[m.value()]
        assert m.key() == keys[i]
        assert m.headers() == HEADERS
        if keys[i] is not None:
            assert m.partition() == partitioner(topic, keys[i], PARTITIONS)
        assert last_offset_index.get(m.partition(), -1) < i  # produce order within a partition
        last_offset_index[m.partition()] = i


@pytest.mark.parametrize("which", ["c", "py"])
def test_produce_values_stops_where_produce_would_raise(tansu, unique_topic, which):
    """A value too large stops the call before it; produce() of it raises MSG_SIZE_TOO_LARGE; a full queue
    stops it too, and produce() then raises BufferError. Nothing after the stop is queued."""
    make_topic(tansu, unique_topic, PARTITIONS)
    with Producer({"bootstrap.servers": tansu.bootstrap, "message.max.bytes": 10_000,
                   "queue.buffering.max.messages": 50, **FAST}) as producer:
        producer.list_topics(unique_topic, timeout=10)
        produce_values = producer.produce_values if which == "c" else producer._produce_values_py
        values = [b"a", b"b", b"x" * 20_000, b"c"]
        assert produce_values(unique_topic, values) == 2
        with pytest.raises(KafkaException) as raised:
            producer.produce(unique_topic, values[2])
        assert raised.value.args[0].code() == KafkaError.MSG_SIZE_TOO_LARGE
        assert produce_values(unique_topic, values, 3) == 4
        assert len(producer) == 3
        many = [b"m%d" % i for i in range(100)]
        stopped = produce_values(unique_topic, many)
        assert stopped == 47 and len(producer) == 50  # the queue bound, as produce() one by one
        with pytest.raises(BufferError):
            producer.produce(unique_topic, many[stopped])
        assert producer.flush(30) == 0
        with pytest.raises(TypeError):
            produce_values(unique_topic, (b"a tuple",))
        with pytest.raises(ValueError):
            produce_values(unique_topic, [b"a"], 2)
        # a value produce() takes only through its reference (str) and a topic without a known partition
        # count: the C twin stops before them, the Python one queues them; produce() queues what is left
        mixed = [b"x", "a str value"]
        done = produce_values(unique_topic, mixed)
        assert done in ((1, 2) if which == "c" else (2,))
        for value in mixed[done:]:
            producer.produce(unique_topic, value)
        assert producer.flush(30) == 0
    read = _read_back(tansu.bootstrap, unique_topic, 3 + 47 + 2)
    assert sorted(m.value() for m in read) == sorted([b"a", b"b", b"c", *many[:47], b"x", b"a str value"])


def test_a_transactional_producer_refuses_produce_values_outside_a_transaction(mock_cluster, unique_topic):
    """The transactional gate covers produce_values() as it covers produce(): _STATE before begin_transaction()."""
    make_topic(mock_cluster, unique_topic, PARTITIONS)
    with Producer({"bootstrap.servers": mock_cluster.bootstrap, "transactional.id": f"tx-{unique_topic}",
                   **FAST}) as producer:
        for call in (lambda: producer.produce(unique_topic, b"v"),
                     lambda: producer.produce_values(unique_topic, [b"v"])):
            with pytest.raises(KafkaException) as raised:
                call()
            assert raised.value.args[0].code() == KafkaError._STATE
        assert len(producer) == 0
