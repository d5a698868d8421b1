"""Consumer groups end to end on the librdkafka mock cluster: partition split between members, rebalance
callbacks, commits and committed offsets, store_offsets, regex subscriptions, cooperative-sticky,
max.poll.interval.ms, static membership, bad input."""

from __future__ import annotations

import time

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")

from integration_helpers import assigned_keys, poll, poll_until, produce_round_robin  # noqa: E402

from kqactors import Consumer  # noqa: E402
from kqactors.errors import KafkaError, KafkaException  # noqa: E402
from kqactors.message import OFFSET_INVALID, TopicPartition  # noqa: E402

pytestmark = pytest.mark.timeout(90)

LEAVE_GROUP_KEY = 13


def _consumer(bootstrap: str, group: str, **extra) -> Consumer:
    conf = {"bootstrap.servers": bootstrap, "group.id": group, "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 300, "auto.offset.reset": "earliest", "kqactors.hosts": 1}
    conf.update(extra)
    return Consumer(conf)


def _caught_up(consumer: Consumer, tps: list[TopicPartition], end: int) -> bool:
    """Every partition consumed up to ``end``, or restarted at a committed ``end`` with nothing to consume (no
    position until a message arrives: OFFSET_INVALID, as librdkafka)."""
    positions = [tp.offset for tp in consumer.position(tps)]
    if all(offset == end for offset in positions):
        return True
    committed = [tp.offset for tp in consumer.committed(tps, timeout=5)]
    return all(offset == end or (offset == OFFSET_INVALID and done == end) for offset, done in zip(positions, committed, strict=True))


def _commit_when_stable(consumer: Consumer, timeout: float = 15) -> None:
    """Synchronous commit of the consumed positions, retried while the group is rebalancing."""
    end = time.monotonic() + timeout
    while True:
        try:
            consumer.commit(asynchronous=False)
            return
        except KafkaException as exc:
            code = exc.args[0].code()
            if code == KafkaError._NO_OFFSET:
                return  # everything consumed is already committed
            if code != KafkaError.REBALANCE_IN_PROGRESS or time.monotonic() > end:
                raise
        poll(consumer, 0.2)


def test_members_split_partitions_and_hand_over_committed_offsets(mock_cluster_factory, unique_topic):
    cluster = mock_cluster_factory(3)
    cluster.group_initial_rebalance_delay_ms(0)
    cluster.create_topic(unique_topic, 4)
    produce_round_robin(cluster.bootstrap, unique_topic, 4, 25)
    first = _consumer(cluster.bootstrap, "g-split")
    second = _consumer(cluster.bootstrap, "g-split")
    seen: list[list] = [[], []]
    try:
        first.subscribe([unique_topic])
        poll_until([first], lambda: len(seen[0]) >= 100, 20, [seen[0]])
        assert first.memberid()
        metadata = first.consumer_group_metadata()
        assert metadata.group_id == "g-split" and metadata.generation_id >= 1
        second.subscribe([unique_topic])
        poll_until([first, second], lambda: len(assigned_keys(first)) == 2 and len(assigned_keys(second)) == 2, 30, seen)
        assert assigned_keys(first) | assigned_keys(second) == {(unique_topic, p) for p in range(4)}
        moved = assigned_keys(second)
        kept = [TopicPartition(t, p) for t, p in sorted(assigned_keys(first))]
        # eager rebalances may have restarted the first member's partitions: let it catch up, then commit. A
        # partition restarted at its committed end has no position until a message arrives (OFFSET_INVALID, as
        # librdkafka): caught up means consumed to 25, or nothing to consume past a committed 25.
        poll_until([first, second], lambda: _caught_up(first, kept, 25), 20, seen)
        _commit_when_stable(first)  # the mock rejects commits while the group rebalances
        before_close = len(seen[1])
        first.close()  # revokes and leaves the group
        poll_until([second], lambda: len(assigned_keys(second)) == 4, 30, [seen[1]])
        tps = [TopicPartition(unique_topic, p) for p in range(4)]
        poll_until([second], lambda: _caught_up(second, tps, 25), 20, [seen[1]])
        everything = {(unique_topic, i % 4, i // 4) for i in range(100)}
        assert set(seen[0]) == everything
        # at least once: the mock cluster rejects eager revoke commits while the group rebalances
        # (REBALANCE_IN_PROGRESS), so the second member may re-read what it held before (at each of its
        # rebalances) — but nothing of what the first member kept and committed before leaving.
        assert set(seen[1]) >= {m for m in everything if (m[0], m[1]) in moved}
        assert {(t, p) for t, p, _ in seen[1][before_close:]} <= moved
        _commit_when_stable(second)
        committed = second.committed(tps, timeout=10)
        assert [tp.offset for tp in committed] == [25, 25, 25, 25]
    finally:
        first.close()
        second.close()


def test_rebalance_callbacks_store_offsets_and_sync_commit(mock_cluster_factory, unique_topic):
    cluster = mock_cluster_factory(1)
    cluster.group_initial_rebalance_delay_ms(0)
    cluster.create_topic(unique_topic, 2)
    produce_round_robin(cluster.bootstrap, unique_topic, 2, 10)
    commits: list = []
    consumer = _consumer(cluster.bootstrap, "g-store", **{"enable.auto.offset.store": False,
                                                          "enable.auto.commit": False,
                                                          "on_commit": lambda err, parts: commits.append(err)})
    events: list = []

    def on_assign(c, partitions):
        events.append(("assign", sorted(tp.partition for tp in partitions)))
        c.assign(partitions)

    def on_revoke(c, partitions):
        events.append(("revoke", sorted(tp.partition for tp in partitions)))
        c.unassign()

    seen: list = []
    try:
        consumer.subscribe([unique_topic], on_assign=on_assign, on_revoke=on_revoke)
        poll_until([consumer], lambda: len(seen) >= 20, 20, [seen])
        assert events == [("assign", [0, 1])]
        with pytest.raises(KafkaException) as info:
            consumer.commit(asynchronous=False)  # nothing stored yet
        assert info.value.args[0].code() == KafkaError._NO_OFFSET
        consumer.store_offsets(offsets=[TopicPartition(unique_topic, 0, 7)])
        with pytest.raises(KafkaException) as info:
            consumer.store_offsets(offsets=[TopicPartition(unique_topic, 9, 1)])
        assert info.value.args[0].code() == KafkaError._STATE
        result = consumer.commit(asynchronous=False)
        assert [(tp.partition, tp.offset, tp.error) for tp in result] == [(0, 7, None)]
        consumer.commit(offsets=[TopicPartition(unique_topic, 1, 3)], asynchronous=True)
        poll_until([consumer], lambda: len(commits) >= 2, 10)
        assert commits[-1] is None
        committed = consumer.committed([TopicPartition(unique_topic, 0), TopicPartition(unique_topic, 1)])
        assert [tp.offset for tp in committed] == [7, 3]
        consumer.unsubscribe()
        poll_until([consumer], lambda: len(events) == 2, 10)
        assert events[1] == ("revoke", [0, 1])
        assert consumer.assignment() == []
    finally:
        consumer.close()


def test_regex_subscription_and_cooperative_sticky_incremental_rebalance(mock_cluster_factory, unique_topic):
    cluster = mock_cluster_factory(1)
    cluster.group_initial_rebalance_delay_ms(0)
    topics = [f"{unique_topic}-a", f"{unique_topic}-b"]
    for topic in topics:
        cluster.create_topic(topic, 2)
    strategy = {"partition.assignment.strategy": "cooperative-sticky"}
    first = _consumer(cluster.bootstrap, "g-coop", **strategy)
    second = _consumer(cluster.bootstrap, "g-coop", **strategy)
    revoked: list = []
    try:
        first.subscribe([f"^{unique_topic}-.*"], on_revoke=lambda c, parts: revoked.append(sorted(parts)))
        poll_until([first], lambda: len(assigned_keys(first)) == 4, 20)
        second.subscribe([f"^{unique_topic}-.*"])
        poll_until([first, second], lambda: len(assigned_keys(first)) == 2 and len(assigned_keys(second)) == 2, 30)
        # incremental: the first member gave up exactly the two partitions that moved, nothing else
        assert len(revoked) == 1 and len(revoked[0]) == 2
        assert {(tp.topic, tp.partition) for tp in revoked[0]} == assigned_keys(second)
    finally:
        first.close()
        second.close()


def test_max_poll_interval_exceeded_is_surfaced_and_rejoins(mock_cluster_factory, unique_topic):
    cluster = mock_cluster_factory(1)
    cluster.group_initial_rebalance_delay_ms(0)
    cluster.create_topic(unique_topic, 1)
    errors: list = []
    lost: list = []
    consumer = _consumer(cluster.bootstrap, "g-maxpoll", **{"max.poll.interval.ms": 1500, "session.timeout.ms": 1500,
                                                            "error_cb": errors.append})
    try:
        consumer.subscribe([unique_topic], on_lost=lambda c, parts: lost.append(parts))
        poll_until([consumer], lambda: len(assigned_keys(consumer)) == 1, 20)
        time.sleep(2.5)  # the app does not poll
        poll_until([consumer], lambda: bool(lost) and len(assigned_keys(consumer)) == 1, 20)
        assert any(e.code() == KafkaError._MAX_POLL_EXCEEDED for e in errors + consumer._group.errors)
    finally:
        consumer.close()


def test_static_member_does_not_leave_group_on_close(mock_cluster_factory, unique_topic):
    cluster = mock_cluster_factory(1)
    cluster.group_initial_rebalance_delay_ms(0)
    cluster.create_topic(unique_topic, 2)
    static = _consumer(cluster.bootstrap, "g-static", **{"group.instance.id": "instance-1"})
    dynamic = _consumer(cluster.bootstrap, "g-dynamic")
    try:
        static.subscribe([unique_topic])
        dynamic.subscribe([unique_topic])
        poll_until([static, dynamic], lambda: len(assigned_keys(static)) == 2 and len(assigned_keys(dynamic)) == 2, 20)
        cluster.start_request_tracking()
        static.close()
        leaves_after_static = [r for r in cluster.get_requests() if r.api_key == LEAVE_GROUP_KEY]
        dynamic.close()
        leaves_after_dynamic = [r for r in cluster.get_requests() if r.api_key == LEAVE_GROUP_KEY]
        assert leaves_after_static == []
        assert len(leaves_after_dynamic) == 1
    finally:
        static.close()
        dynamic.close()


def test_bad_input_gives_clear_errors(mock_cluster_factory):
    cluster = mock_cluster_factory(1)
    consumer = _consumer(cluster.bootstrap, "g-bad")
    try:
        with pytest.raises(TypeError):
            consumer.subscribe([])
        with pytest.raises(TypeError):
            consumer.subscribe("not-a-list")
        with pytest.raises(TypeError):
            consumer.subscribe(["t"], on_assign=42)
        with pytest.raises(KafkaException) as info:
            consumer.subscribe(["^(unclosed"])
        assert info.value.args[0].code() == KafkaError._INVALID_ARG
        with pytest.raises(KafkaException) as info:
            consumer.store_offsets(offsets=[TopicPartition("t", 0, 1)])  # enable.auto.offset.store=true
        assert info.value.args[0].code() == KafkaError._INVALID_ARG
        with pytest.raises(KafkaException):
            consumer.commit(message=object(), offsets=[])
        with pytest.raises(TypeError):
            consumer.committed(["t"])
    finally:
        consumer.close()
    with pytest.raises(RuntimeError):
        consumer.subscribe(["t"])
    with pytest.raises(KafkaException) as info:
        _consumer(cluster.bootstrap, "g-bad", **{"partition.assignment.strategy": "range,cooperative-sticky"})
    assert info.value.args[0].code() == KafkaError._INVALID_ARG


def test_group_requests_do_not_wait_behind_the_fetch_long_poll(mock_cluster_factory, unique_topic):
    """The coordinator also leads the partition, whose empty Fetch the broker holds for fetch.wait.max.ms.
    A broker answers one connection's requests in order, so group requests have their own connection (as in
    librdkafka); on the fetch connection each synchronous commit here would wait ~1.5 s on average."""
    cluster = mock_cluster_factory(1)
    cluster.group_initial_rebalance_delay_ms(0)
    cluster.create_topic(unique_topic, 1)
    produce_round_robin(cluster.bootstrap, unique_topic, 1, 3)
    consumer = _consumer(cluster.bootstrap, "g-own-connection", **{"fetch.wait.max.ms": 3000,
                                                                   "enable.auto.commit": False})
    try:
        consumer.subscribe([unique_topic])
        seen: list = []
        poll_until([consumer], lambda: len(seen) == 3, 30, [seen])
        poll(consumer, 0.5)  # the partition is drained: its Fetch is now held by the broker
        started = time.monotonic()
        for offset in (1, 2, 3, 2, 3):
            consumer.commit(offsets=[TopicPartition(unique_topic, 0, offset)], asynchronous=False)
        five_commits = time.monotonic() - started
        committed = consumer.committed([TopicPartition(unique_topic, 0)], timeout=10)
    finally:
        consumer.close()
    assert committed[0].offset == 3
    assert five_commits < 2.0, f"five synchronous commits took {five_commits:.2f} s"


def test_regex_subscription_picks_up_a_topic_created_later(mock_cluster_factory, unique_topic):
    """A '^…' subscription is re-matched on every metadata refresh: a matching topic created after subscribe()
    joins the assignment and is consumed; a topic that does not match stays out."""
    cluster = mock_cluster_factory(1)
    cluster.group_initial_rebalance_delay_ms(0)
    first, later, other = f"{unique_topic}-a", f"{unique_topic}-b", f"x{unique_topic}-c"
    cluster.create_topic(first, 1)
    consumer = _consumer(cluster.bootstrap, "g-regex-late", **{"topic.metadata.refresh.interval.ms": 500})
    seen: list = []
    try:
        consumer.subscribe([f"^{unique_topic}-.*"])
        poll_until([consumer], lambda: assigned_keys(consumer) == {(first, 0)}, 20)
        cluster.create_topic(later, 2)
        cluster.create_topic(other, 1)
        produce_round_robin(cluster.bootstrap, later, 2, 5)
        produce_round_robin(cluster.bootstrap, other, 1, 5)
        poll_until([consumer], lambda: len([s for s in seen if s[0] == later]) == 10, 30, [seen])
        assert assigned_keys(consumer) == {(first, 0), (later, 0), (later, 1)}
        assert not [s for s in seen if s[0] == other]
    finally:
        consumer.close()
