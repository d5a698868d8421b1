"""throttle_cb on a real broker: the librdkafka mock cluster behind a proxy that sets throttle_time_ms in its
Produce / Fetch responses (tests/support/throttle_proxy.py; neither the mock cluster nor Tansu can throttle).
The ThrottleEvent reaches throttle_cb from poll(), with the broker's "host:port", its node id and the time in
seconds, and one more event with 0 when the broker stops throttling — as confluent-kafka reports it."""

from __future__ import annotations

import confluent_kafka
import pytest
from support.kafka_io import produce_numbered
from support.throttle_proxy import FETCH, PRODUCE, ThrottlingProxy
from support.waiting import wait_until

from kqactors import Consumer, Producer, ThrottleEvent, TopicPartition


def _events(events: list, throttle_time: float) -> list:
    return [e for e in events if e.throttle_time == throttle_time]


@pytest.mark.parametrize("client", ["kqactors", "confluent-kafka"])
def test_producer_throttle_cb_is_called_from_poll(mock_cluster_factory, unique_topic, client):
    cluster = mock_cluster_factory(num_brokers=1)
    cluster.create_topic(unique_topic, 1)
    cluster.set_apiversion(3, 0, 12)  # Metadata v13 (librdkafka's newest) is beyond the proxy's codec
    events: list = []
    make = Producer if client == "kqactors" else confluent_kafka.Producer
    with ThrottlingProxy(cluster.bootstrap, apis=[PRODUCE], throttle_ms=1500) as proxy:
        producer = make({"bootstrap.servers": proxy.bootstrap, "throttle_cb": events.append, "linger.ms": 0,
                         **({"kqactors.hosts": 0} if client == "kqactors" else {})})
        try:
            producer.produce(unique_topic, b"throttled")
            assert producer.flush(15) == 0
            wait_until(lambda: _events(events, 1.5), 10, "a throttle event", sleep=producer.poll)
            event = _events(events, 1.5)[0]
            assert type(event).__name__ == "ThrottleEvent"
            assert (event.broker_name, event.broker_id) == (proxy.bootstrap, 1)
            assert str(event) == f"{proxy.bootstrap}/1 throttled for 1500 ms"
            proxy.throttle_ms = 0
            producer.produce(unique_topic, b"free again")
            assert producer.flush(15) == 0
            wait_until(lambda: [e for e in _events(events, 0.0) if e.broker_id == 1], 10,
                       "the event saying the throttling ended", sleep=producer.poll)
        finally:
            if hasattr(producer, "close"):
                producer.close()
    assert proxy.throttled >= 1
    if client == "kqactors":
        assert all(isinstance(e, ThrottleEvent) for e in events)


def test_consumer_throttle_cb_is_called_from_poll_for_fetch_throttling(mock_cluster_factory, unique_topic):
    cluster = mock_cluster_factory(num_brokers=1)
    cluster.create_topic(unique_topic, 1)
    produce_numbered(cluster.bootstrap, unique_topic, 3, 1)
    events: list = []
    with ThrottlingProxy(cluster.bootstrap, apis=[FETCH], throttle_ms=250) as proxy:
        consumer = Consumer({"bootstrap.servers": proxy.bootstrap, "group.id": "g-throttle", "kqactors.hosts": 0,
                             "throttle_cb": events.append, "fetch.wait.max.ms": 100})
        try:
            consumer.assign([TopicPartition(unique_topic, 0, 0)])
            got = []
            wait_until(lambda: len(got) >= 3 and events, 20, "messages and a throttle event",
                       sleep=lambda s: got.extend(m for m in consumer.consume(10, s) if m.error() is None))
            assert (events[0].broker_name, events[0].broker_id, events[0].throttle_time) == (proxy.bootstrap, 1,
                                                                                              0.25)
        finally:
            consumer.close()
