"""Fetch sessions (KIP-227) and fetching from the closest replica (KIP-392) on real brokers.

Sessions: Tansu and the librdkafka mock cluster keep none (both answer session id 0, so every request stays
full), so the session tests put tests/support/fetch_session_proxy.py in front of Tansu: it keeps sessions as a
Kafka broker does, serves each session partition from the offset the client last sent, and answers an
incremental request only for partitions with news. A client that left a moved position out of an incremental
request would get old data again (dropped as not contiguous: the read would stall), one that dropped a session
partition would miss its new records. On the mock cluster: session errors injected at the top level of Fetch
responses must not reach the application. KIP-392 on the mock cluster: with client.rack set, a partition with a
follower (rd_kafka_mock_partition_set_follower) is fetched from that broker; a follower lagging behind the
position sends it back to the leader. (The mock names the follower whatever rack a request carries, so that the
rack is sent is a unit test's business: tests/unit/core/consumer/test_fetch_sessions.py.)
"""

from __future__ import annotations

import pytest
from support.fetch_session_proxy import FetchSessionProxy
from support.kafka_io import drain, produce_numbered
from support.waiting import wait_until

from kqactors import Consumer, KafkaError, TopicPartition
from kqactors.message import OFFSET_BEGINNING

FETCH = 1
METADATA = 3
PARTITIONS = 8


def _values(messages: list) -> dict[int, list[int]]:
    """partition → the numbers of its messages (b"v<i>"), in delivery order."""
    out: dict[int, list[int]] = {}
    for m in messages:
        out.setdefault(m.partition(), []).append(int(m.value()[1:]))
    return out


def _expected(count: int, partitions: int, start: int = 0) -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for i in range(start, start + count):
        out.setdefault(i % partitions, []).append(i)
    return out


def _consumer(bootstrap: str, **conf) -> Consumer:
    return Consumer({"bootstrap.servers": bootstrap, "group.id": "fetch-sessions", "enable.auto.commit": False,
                     "fetch.wait.max.ms": 100, **conf})


def test_incremental_fetches_deliver_everything_once_and_list_only_moving_partitions(tansu, unique_topic):
    from integration_helpers import make_topic

    make_topic(tansu, unique_topic, PARTITIONS)
    produce_numbered(tansu.bootstrap, unique_topic, 800, PARTITIONS)
    with FetchSessionProxy(tansu.bootstrap) as proxy:
        consumer = _consumer(proxy.bootstrap, **{"kqactors.hosts": 1})
        try:
            consumer.assign([TopicPartition(unique_topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
            got = drain(consumer, 800)
            assert _values(got) == _expected(800, PARTITIONS)
            # idle now: the session's requests list nothing, yet new records on one partition arrive
            wait_until(lambda: proxy.incremental_requests >= 5, 30, "incremental fetches while idle",
                       sleep=lambda _s: consumer.poll(0.1))
            listed_before, requests_before = proxy.listed_partitions, proxy.incremental_requests
            produce_numbered(tansu.bootstrap, unique_topic, 10, 1, start=2000, partitioner="murmur2_random")
            later = drain(consumer, 10)
            assert sorted(int(m.value()[1:]) for m in later) == list(range(2000, 2010))
            assert proxy.full_requests == 1, "the session was opened once and kept"
            idle_requests = proxy.incremental_requests - requests_before
            # only the partition that moved is listed again (once per answer with its data), never all of them
            assert proxy.listed_partitions - listed_before <= idle_requests + 2
            assert proxy.session_errors == 0
        finally:
            consumer.close()


@pytest.mark.parametrize("fault", ["drop_sessions", "skew_epochs"])
def test_session_errors_start_over_without_losing_or_repeating_messages(tansu, unique_topic, fault):
    from integration_helpers import make_topic

    make_topic(tansu, unique_topic, PARTITIONS)
    produce_numbered(tansu.bootstrap, unique_topic, 400, PARTITIONS)
    with FetchSessionProxy(tansu.bootstrap) as proxy:
        consumer = _consumer(proxy.bootstrap, **{"kqactors.hosts": 1})
        errors: list = []
        try:
            consumer.assign([TopicPartition(unique_topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
            first = drain(consumer, 400, errors=errors)
            wait_until(lambda: proxy.incremental_requests >= 2, 30, "an established session",
                       sleep=lambda _s: consumer.poll(0.1))
            setattr(proxy, fault, True)
            wait_until(lambda: proxy.session_errors >= 3, 30, "session errors", sleep=lambda _s: consumer.poll(0.1))
            setattr(proxy, fault, False)
            produce_numbered(tansu.bootstrap, unique_topic, 400, PARTITIONS, start=400)
            second = drain(consumer, 400, errors=errors)
            assert _values(first + second) == _expected(800, PARTITIONS)
            assert errors == []  # a session error is the client's business, not the application's
            assert proxy.full_requests >= 2 and proxy.incremental_requests > 2
        finally:
            consumer.close()


def test_session_errors_from_the_mock_cluster_are_not_application_errors(fresh_cluster, unique_topic):
    fresh_cluster.create_topic(unique_topic, 3)
    produce_numbered(fresh_cluster.bootstrap, unique_topic, 300, 3)
    fresh_cluster.push_request_errors(FETCH, [KafkaError.FETCH_SESSION_ID_NOT_FOUND,
                                              KafkaError.INVALID_FETCH_SESSION_EPOCH] * 3)
    consumer = _consumer(fresh_cluster.bootstrap)
    errors: list = []
    try:
        consumer.assign([TopicPartition(unique_topic, p, OFFSET_BEGINNING) for p in range(3)])
        got = drain(consumer, 300, errors=errors)
        assert _values(got) == _expected(300, 3)
        assert errors == []
    finally:
        consumer.close()


def _fetch_brokers(cluster, action) -> set[int]:
    cluster.start_request_tracking()
    cluster.clear_requests()
    action()
    brokers = {r.broker_id for r in cluster.get_requests() if r.api_key == FETCH}
    cluster.stop_request_tracking()
    return brokers


def test_client_rack_fetches_from_the_preferred_replica_and_back_from_a_lagging_one(fresh_cluster, unique_topic):
    fresh_cluster.create_topic(unique_topic, 1)
    fresh_cluster.partition_set_leader(unique_topic, 0, 1)
    fresh_cluster.partition_set_follower(unique_topic, 0, 2)
    produce_numbered(fresh_cluster.bootstrap, unique_topic, 100, 1)
    consumer = _consumer(fresh_cluster.bootstrap, **{"client.rack": "rack-2", "fetch.error.backoff.ms": 100})
    try:
        consumer.assign([TopicPartition(unique_topic, 0, OFFSET_BEGINNING)])
        got = drain(consumer, 100)
        assert _values(got) == _expected(100, 1)
        brokers = _fetch_brokers(fresh_cluster, lambda: drain(consumer, 1, timeout=1.5))
        assert brokers == {2}, f"idle fetches went to {brokers}, not only to the preferred replica"
        # the follower falls behind the position: OFFSET_OUT_OF_RANGE there is no reset but a move back to the
        # leader (the mock's leader names the follower again at once, so the partition goes back and forth,
        # slowed down by fetch.error.backoff.ms, until the follower catches up)
        fresh_cluster.partition_set_follower_wmarks(unique_topic, 0, 0, 50)
        produce_numbered(fresh_cluster.bootstrap, unique_topic, 50, 1, start=100)
        errors: list = []
        brokers = _fetch_brokers(fresh_cluster, lambda: got.extend(drain(consumer, 50, timeout=2.0, errors=errors)))
        assert 1 in brokers, "the leader never fetched after the follower lagged"
        assert len(got) == 100 and errors == []  # no offset reset, no error event
        fresh_cluster.partition_set_follower_wmarks(unique_topic, 0, -1, -1)  # caught up
        got.extend(drain(consumer, 50, errors=errors))
        assert _values(got) == _expected(150, 1) and errors == []
    finally:
        consumer.close()



def test_a_preferred_replica_no_metadata_names_is_not_followed(fresh_cluster, unique_topic):
    """KIP-392 with a replica the client has no broker for (not in its metadata): as librdkafka, the client
    refreshes its metadata and asks the leader again after fetch.error.backoff.ms, never leaving the partition
    waiting for that broker. (The mock's leader serves no records while it names a follower, so nothing arrives
    until the follower is withdrawn; then the leader's records do.)"""
    fresh_cluster.create_topic(unique_topic, 1)
    fresh_cluster.partition_set_leader(unique_topic, 0, 1)
    fresh_cluster.partition_set_follower(unique_topic, 0, 99)  # no such broker
    produce_numbered(fresh_cluster.bootstrap, unique_topic, 100, 1)
    consumer = _consumer(fresh_cluster.bootstrap, **{"client.rack": "rack-2", "fetch.error.backoff.ms": 100})
    errors: list = []
    try:
        consumer.assign([TopicPartition(unique_topic, 0, OFFSET_BEGINNING)])
        fresh_cluster.start_request_tracking()
        fresh_cluster.clear_requests()
        got = drain(consumer, 1, timeout=2.0, errors=errors)
        requests = fresh_cluster.get_requests()
        fresh_cluster.stop_request_tracking()
        assert got == [] and errors == []
        fetches = {r.broker_id for r in requests if r.api_key == FETCH}
        assert fetches == {1}, f"fetches went to {fetches}"
        assert sum(r.api_key == FETCH for r in requests) >= 3, "the leader was not asked again"
        assert any(r.api_key == METADATA for r in requests), "no metadata refresh for the unknown replica"
        fresh_cluster.partition_set_follower(unique_topic, 0, -1)
        got = drain(consumer, 100, errors=errors)
        assert _values(got) == _expected(100, 1) and errors == []
    finally:
        consumer.close()

def test_partition_eof_after_a_seek_to_the_end_under_a_session(tansu, unique_topic):
    """The broker leaves a seeked-to-the-end partition out of its incremental answer (nothing new there); the
    EOF a sessionless empty answer would bring still comes."""
    from integration_helpers import make_topic

    make_topic(tansu, unique_topic, 2)
    produce_numbered(tansu.bootstrap, unique_topic, 20, 2)
    with FetchSessionProxy(tansu.bootstrap) as proxy:
        consumer = _consumer(proxy.bootstrap, **{"enable.partition.eof": True, "kqactors.hosts": 1})
        events: list = []
        try:
            consumer.assign([TopicPartition(unique_topic, p, OFFSET_BEGINNING) for p in range(2)])
            drain(consumer, 20, errors=events)
            wait_until(lambda: proxy.incremental_requests >= 3 and len(events) >= 2, 30, "both EOFs and a session",
                       sleep=lambda _s: events.extend(m.error() for m in consumer.consume(100, 0.1) if m.error()))
            assert sorted((e.code(), ) for e in events) == [(KafkaError._PARTITION_EOF,)] * 2
            events.clear()
            consumer.seek(TopicPartition(unique_topic, 0, 10))  # its end: the broker has nothing new to say
            wait_until(lambda: events, 30, "the EOF after the seek",
                       sleep=lambda _s: events.extend(m.error() for m in consumer.consume(100, 0.1) if m.error()))
            assert [e.code() for e in events] == [KafkaError._PARTITION_EOF]
            assert proxy.full_requests == 1
        finally:
            consumer.close()
