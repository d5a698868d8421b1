"""KIP-848 consumer groups (group.protocol=consumer) end to end on the librdkafka mock cluster: membership and
assignment over ConsumerGroupHeartbeat (no JoinGroup/SyncGroup), partitions split between members and handed
over on leave with committed offsets, a mixed group with a confluent-kafka consumer, recovery from fencing, a
restarted static member taking its partitions back, and a clear fatal error when the broker lacks the API."""

from __future__ import annotations

import time

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")

from integration_helpers import assigned_keys, poll, poll_until, produce_round_robin  # noqa: E402

from kqactors import Consumer  # noqa: E402
from kqactors.errors import KafkaError, KafkaException  # noqa: E402
from kqactors.message import TopicPartition  # noqa: E402

CONSUMER_GROUP_HEARTBEAT_KEY = 68
CLASSIC_GROUP_KEYS = {11, 12, 13, 14}  # JoinGroup, Heartbeat, LeaveGroup, SyncGroup
HEARTBEAT_INTERVAL_MS = 200
pytestmark = [pytest.mark.timeout(90), pytest.mark.fresh_cluster(
    num_brokers=1, group_consumer_heartbeat_interval_ms=HEARTBEAT_INTERVAL_MS, group_consumer_session_timeout_ms=6000)]


def _consumer(bootstrap: str, group: str, **extra) -> Consumer:
    conf = {"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": "consumer",
            "auto.offset.reset": "earliest", "kqactors.hosts": 1}
    conf.update(extra)
    return Consumer(conf)


def _commit(consumer: Consumer, timeout: float = 10) -> list[TopicPartition]:
    """Synchronous commit, retried on STALE_MEMBER_EPOCH: right after a rebalance the coordinator may already
    have bumped our epoch while the heartbeat reply telling us is still on its way (librdkafka fails such a
    manual commit too)."""
    end = time.monotonic() + timeout
    while True:
        try:
            return consumer.commit(asynchronous=False)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.STALE_MEMBER_EPOCH or time.monotonic() > end:
                raise
        poll(consumer, 0.2)


def test_one_member_gets_every_partition_through_consumer_group_heartbeat(fresh_cluster, unique_topic):
    fresh_cluster.create_topic(unique_topic, 4)
    produce_round_robin(fresh_cluster.bootstrap, unique_topic, 4, 10)
    assigned: list = []
    consumer = _consumer(fresh_cluster.bootstrap, "g-848-one")
    seen: list = []
    fresh_cluster.start_request_tracking()
    try:
        consumer.subscribe([unique_topic], on_assign=lambda c, ps: assigned.append(sorted(tp.partition for tp in ps)))
        poll_until([consumer], lambda: len(seen) >= 40, 20, [seen])
        assert assigned == [[0, 1, 2, 3]]
        assert sorted(seen) == sorted((unique_topic, i % 4, i // 4) for i in range(40))
        member = consumer.memberid()
        assert member and len(member) == 22  # client-generated (ConsumerGroupHeartbeat v1)
        assert consumer.consumer_group_metadata().generation_id >= 1  # the member epoch
        consumer.close()
        keys = [r.api_key for r in fresh_cluster.get_requests()]
        assert keys.count(CONSUMER_GROUP_HEARTBEAT_KEY) >= 3  # join, ack, ..., leave
        assert not CLASSIC_GROUP_KEYS & set(keys)
    finally:
        consumer.close()


def test_two_members_split_the_partitions_and_the_survivor_takes_over_from_the_commits(fresh_cluster, unique_topic):
    fresh_cluster.create_topic(unique_topic, 4)
    produce_round_robin(fresh_cluster.bootstrap, unique_topic, 4, 25)
    first = _consumer(fresh_cluster.bootstrap, "g-848-split", **{"enable.auto.commit": False})
    second = _consumer(fresh_cluster.bootstrap, "g-848-split", **{"enable.auto.commit": False})
    revoked: list = []
    seen: list[list] = [[], []]
    try:
        first.subscribe([unique_topic], on_revoke=lambda c, ps: revoked.extend(ps))
        poll_until([first], lambda: len(seen[0]) >= 100, 20, [seen[0]])
        second.subscribe([unique_topic])
        poll_until([first, second], lambda: len(assigned_keys(first)) == 2 and len(assigned_keys(second)) == 2, 20, seen)
        assert assigned_keys(first) | assigned_keys(second) == {(unique_topic, p) for p in range(4)}
        assert {(tp.topic, tp.partition) for tp in revoked} == assigned_keys(second)  # incremental: only those moved
        kept = sorted(assigned_keys(first))
        committed = _commit(first)
        assert {(tp.topic, tp.partition, tp.offset) for tp in committed} == {(t, p, 25) for t, p in kept}
        # the other member sees the commit
        visible = second.committed([TopicPartition(t, p) for t, p in kept], timeout=10)
        assert [tp.offset for tp in visible] == [25, 25]
        before = len(seen[1])
        first.close()  # leaves the group (epoch -1): the survivor gets everything
        poll_until([second], lambda: len(assigned_keys(second)) == 4, 20, [seen[1]])
        poll(second, 1.0, seen[1])
        assert not [m for m in seen[1][before:] if (m[0], m[1]) in kept]  # resumed at the commit: nothing re-read
        tps = [TopicPartition(unique_topic, p) for p in range(4)]
        others = [tp.offset for tp in second.position(tps) if (tp.topic, tp.partition) not in kept]
        assert others == [25] * (4 - len(kept))
    finally:
        first.close()
        second.close()


def test_partitions_moved_to_a_new_member_are_committed_first_so_nothing_is_read_twice(fresh_cluster, unique_topic):
    fresh_cluster.create_topic(unique_topic, 4)
    produce_round_robin(fresh_cluster.bootstrap, unique_topic, 4, 25)
    first = _consumer(fresh_cluster.bootstrap, "g-848-handover")  # enable.auto.commit: the revoke commits
    second = _consumer(fresh_cluster.bootstrap, "g-848-handover")
    seen: list[list] = [[], []]
    try:
        first.subscribe([unique_topic])
        poll_until([first], lambda: len(seen[0]) >= 100, 20, [seen[0]])
        second.subscribe([unique_topic])
        poll_until([first, second], lambda: len(assigned_keys(second)) == 2, 20, seen)
        moved = [TopicPartition(t, p) for t, p in sorted(assigned_keys(second))]
        poll_until([first, second], lambda: [tp.offset for tp in second.committed(moved, timeout=5)] == [25, 25],
                   20, seen)
        poll(second, 1.0, seen[1])
        assert seen[1] == []  # the new owner started at the offsets committed on revoke ...
        produce_round_robin(fresh_cluster.bootstrap, unique_topic, 4, 1)  # offset 25 of every partition
        poll_until([first, second], lambda: len(seen[1]) >= 2, 20, seen)
        assert sorted(seen[1]) == [(tp.topic, tp.partition, 25) for tp in moved]  # ... and reads on from there
    finally:
        first.close()
        second.close()


def test_mixed_group_with_a_confluent_kafka_consumer(fresh_cluster, unique_topic):
    fresh_cluster.create_topic(unique_topic, 4)
    produce_round_robin(fresh_cluster.bootstrap, unique_topic, 4, 5)
    ours = _consumer(fresh_cluster.bootstrap, "g-848-mixed")
    theirs = confluent_kafka.Consumer({"bootstrap.servers": fresh_cluster.bootstrap, "group.id": "g-848-mixed",
                                       "group.protocol": "consumer", "auto.offset.reset": "earliest"})
    seen: list[list] = [[], []]
    try:
        ours.subscribe([unique_topic])
        poll_until([ours], lambda: len(assigned_keys(ours)) == 4, 20, [seen[0]])
        theirs.subscribe([unique_topic])
        poll_until([ours, theirs], lambda: len(assigned_keys(ours)) == 2 and len(assigned_keys(theirs)) == 2, 30, seen)
        assert assigned_keys(ours).isdisjoint(assigned_keys(theirs))
        assert assigned_keys(ours) | assigned_keys(theirs) == {(unique_topic, p) for p in range(4)}
        theirs.close()
        poll_until([ours], lambda: len(assigned_keys(ours)) == 4, 20, [seen[0]])
    finally:
        ours.close()
        theirs.close()


def test_a_fenced_member_loses_its_partitions_and_rejoins(fresh_cluster, unique_topic):
    fresh_cluster.create_topic(unique_topic, 2)
    produce_round_robin(fresh_cluster.bootstrap, unique_topic, 2, 5)
    lost: list = []
    assigned: list = []
    consumer = _consumer(fresh_cluster.bootstrap, "g-848-fenced")
    seen: list = []
    try:
        consumer.subscribe([unique_topic], on_assign=lambda c, ps: assigned.append(len(ps)),
                           on_lost=lambda c, ps: lost.append(len(ps)))
        poll_until([consumer], lambda: len(assigned_keys(consumer)) == 2 and len(seen) >= 10, 20, [seen])
        epoch = consumer.consumer_group_metadata().generation_id
        fresh_cluster.push_request_errors(CONSUMER_GROUP_HEARTBEAT_KEY, ["FENCED_MEMBER_EPOCH"])
        poll_until([consumer], lambda: lost == [2] and len(assigned) == 2 and len(assigned_keys(consumer)) == 2, 20)
        assert consumer.consumer_group_metadata().generation_id > epoch
        produce_round_robin(fresh_cluster.bootstrap, unique_topic, 2, 1)
        poll_until([consumer], lambda: len(seen) >= 12, 10, [seen])
    finally:
        consumer.close()


def test_a_restarted_static_member_gets_its_partitions_back_and_the_other_member_is_untouched(fresh_cluster,
                                                                                              unique_topic):
    """KIP-345 on a KIP-848 group (the mock implements it there, unlike for classic groups): a closing static
    member leaves with epoch -2, so the coordinator keeps its partitions for its instance id until the session
    times out; the restarted instance takes them back with no reassignment, the other member is never revoked,
    and with a commit before closing every message produced meanwhile is read exactly once."""
    fresh_cluster.create_topic(unique_topic, 4)
    produce_round_robin(fresh_cluster.bootstrap, unique_topic, 4, 10)
    static = _consumer(fresh_cluster.bootstrap, "g-848-static", **{"group.instance.id": "instance-1",
                                                               "enable.auto.commit": False})
    dynamic = _consumer(fresh_cluster.bootstrap, "g-848-static", **{"enable.auto.commit": False})
    restarted = None
    events: list = []

    def caught_up(consumer: Consumer) -> bool:
        held = [TopicPartition(t, p) for t, p in sorted(assigned_keys(consumer))]
        return len(held) == 2 and all(tp.offset == 10 for tp in consumer.position(held))

    try:
        dynamic.subscribe([unique_topic], on_assign=lambda c, ps: events.append(("assign", sorted(ps))),
                          on_revoke=lambda c, ps: events.append(("revoke", sorted(ps))),
                          on_lost=lambda c, ps: events.append(("lost", sorted(ps))))
        static.subscribe([unique_topic])
        poll_until([static, dynamic], lambda: caught_up(static) and caught_up(dynamic), 30)
        held, settled = assigned_keys(static), len(events)
        _commit(static)
        static.close()
        produce_round_robin(fresh_cluster.bootstrap, unique_topic, 4, 10)  # offsets 10..19, while it is away
        restarted = _consumer(fresh_cluster.bootstrap, "g-848-static", **{"group.instance.id": "instance-1",
                                                                      "enable.auto.commit": False})
        restarted.subscribe([unique_topic])
        seen: list[list] = [[], []]  # restarted static, dynamic
        meanwhile = {(unique_topic, p, o) for p in range(4) for o in range(10, 20)}
        poll_until([restarted, dynamic], lambda: assigned_keys(restarted) == held
                   and set(seen[0] + seen[1]) >= meanwhile, 20, seen)
        poll(dynamic, 0.5, seen[1])
        assert assigned_keys(dynamic) == {(unique_topic, p) for p in range(4)} - held
        assert events[settled:] == []
        assert sorted(seen[0] + seen[1]) == sorted(meanwhile)
        assert {(t, p) for t, p, _ in seen[0]} == held
    finally:
        static.close()
        dynamic.close()
        if restarted is not None:
            restarted.close()


def test_a_broker_without_consumer_group_heartbeat_is_a_fatal_error_not_a_hang(fresh_cluster, unique_topic):
    fresh_cluster.create_topic(unique_topic, 1)
    fresh_cluster.set_apiversion(CONSUMER_GROUP_HEARTBEAT_KEY, -1, -1)
    errors: list = []
    consumer = _consumer(fresh_cluster.bootstrap, "g-848-unsupported", error_cb=errors.append)
    try:
        consumer.subscribe([unique_topic])
        poll_until([consumer], lambda: bool(errors), 15)
        error = errors[0]
        assert error.code() == KafkaError._UNSUPPORTED_FEATURE and error.fatal()
        assert "ConsumerGroupHeartbeat" in error.str()
        assert consumer.assignment() == []
    finally:
        consumer.close()
