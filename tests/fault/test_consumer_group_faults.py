"""Consumer-group faults on the librdkafka mock cluster: the coordinator moves to another broker, Heartbeat
and OffsetCommit requests fail. The group must recover by itself and errors reach the app clearly."""

from __future__ import annotations

import time

import pytest

pytest.importorskip("confluent_kafka")

from support.waiting import wait_until

from kqactors import Consumer  # noqa: E402
from kqactors.errors import KafkaError, KafkaException  # noqa: E402
from kqactors.message import TopicPartition  # noqa: E402

pytestmark = [pytest.mark.timeout(90), pytest.mark.fresh_cluster(num_brokers=3, group_initial_rebalance_delay_ms=0)]

HEARTBEAT_KEY = 12
OFFSET_COMMIT_KEY = 8
FIND_COORDINATOR_KEY = 10


def _consumer(bootstrap: str, group: str, **extra) -> Consumer:
    conf = {"bootstrap.servers": bootstrap, "group.id": group, "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 200, "auto.offset.reset": "earliest", "enable.auto.commit": False,
            "kqactors.hosts": 1}
    conf.update(extra)
    return Consumer(conf)


def _poll(consumer: Consumer, seconds: float) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        consumer.poll(0.05)


def _poll_until(consumer: Consumer, done, timeout: float, what: str = "the group to settle") -> None:
    wait_until(done, timeout, what, interval=0.05, sleep=lambda seconds: _poll(consumer, seconds))


# The group's coordinator and join state have no public accessor (stats() reports only up/query-coord).


def _joined(consumer: Consumer, count: int):
    return lambda: len(consumer.assignment()) == count and consumer._group._join_state == "STEADY"


def test_coordinator_moves_and_commits_follow_it(fresh_cluster, unique_topic):
    fresh_cluster.create_topic(unique_topic, 2)
    consumer = _consumer(fresh_cluster.bootstrap, "g-move")
    try:
        consumer.subscribe([unique_topic])
        _poll_until(consumer, _joined(consumer, 2), 20)
        first = consumer._group._coordinator
        target = 1 if first != 1 else 2
        fresh_cluster.coordinator_set("group", "g-move", target)
        # the old coordinator answers NOT_COORDINATOR: the group looks it up again and carries on there
        _poll_until(consumer, lambda: consumer._group._coordinator == target, 20,
                    f"the group to move to coordinator {target}")
        result = consumer.commit(offsets=[TopicPartition(unique_topic, 0, 4)], asynchronous=False)
        assert [(tp.offset, tp.error) for tp in result] == [(4, None)]
        assert consumer.committed([TopicPartition(unique_topic, 0)], timeout=10)[0].offset == 4
        assert len(consumer.assignment()) == 2
    finally:
        consumer.close()


def test_heartbeat_errors_make_the_member_rejoin(fresh_cluster, unique_topic):
    fresh_cluster.create_topic(unique_topic, 2)
    assigned: list = []
    consumer = _consumer(fresh_cluster.bootstrap, "g-heartbeat", **{"session.timeout.ms": 2500})
    try:
        consumer.subscribe([unique_topic], on_assign=lambda c, parts: assigned.append(len(parts)))
        _poll_until(consumer, _joined(consumer, 2), 20)
        generation = consumer.consumer_group_metadata().generation_id
        fresh_cluster.push_request_errors(HEARTBEAT_KEY, ["REBALANCE_IN_PROGRESS"])
        _poll_until(consumer, lambda: consumer.consumer_group_metadata().generation_id > generation
                    and _joined(consumer, 2)(), 20)
        assert assigned == [2, 2]  # eager: revoked and assigned again
        generation = consumer.consumer_group_metadata().generation_id
        member = consumer.memberid()
        fresh_cluster.push_request_errors(HEARTBEAT_KEY, ["UNKNOWN_MEMBER_ID"])
        _poll_until(consumer, lambda: consumer.consumer_group_metadata().generation_id > generation
                    and _joined(consumer, 2)(), 20)
        assert consumer.memberid() and consumer.memberid() != member  # a fresh member id after the reset
    finally:
        consumer.close()


def test_offset_commit_errors_reach_the_app_and_later_commits_succeed(fresh_cluster, unique_topic):
    fresh_cluster.create_topic(unique_topic, 1)
    results: list = []
    consumer = _consumer(fresh_cluster.bootstrap, "g-commit", on_commit=lambda err, parts: results.append((err, parts)))
    try:
        consumer.subscribe([unique_topic])
        _poll_until(consumer, _joined(consumer, 1), 20)
        fresh_cluster.push_request_errors(OFFSET_COMMIT_KEY, ["GROUP_AUTHORIZATION_FAILED"])
        with pytest.raises(KafkaException) as info:
            consumer.commit(offsets=[TopicPartition(unique_topic, 0, 3)], asynchronous=False)
        assert info.value.args[0].code() == KafkaError.GROUP_AUTHORIZATION_FAILED
        fresh_cluster.push_request_errors(OFFSET_COMMIT_KEY, ["REQUEST_TIMED_OUT"])
        consumer.commit(offsets=[TopicPartition(unique_topic, 0, 5)], asynchronous=True)
        _poll_until(consumer, lambda: len(results) >= 2, 10)
        assert results[-1][0].code() == KafkaError.REQUEST_TIMED_OUT
        assert results[-1][1][0].error.code() == KafkaError.REQUEST_TIMED_OUT
        result = consumer.commit(offsets=[TopicPartition(unique_topic, 0, 6)], asynchronous=False)
        assert result[0].offset == 6 and result[0].error is None
        assert consumer.committed([TopicPartition(unique_topic, 0)], timeout=10)[0].offset == 6
    finally:
        consumer.close()


def test_kill_of_the_group_host_keeps_the_member_and_its_assignment(fresh_cluster, unique_topic):
    """kill -9 of the host running main, the brokers and cgrp: the restarted cgrp carries on as the same member
    (docs/reliability.md), so no on_lost/on_revoke, the assignment stays past the session timeout (its heartbeats
    are answered) and commits go on under the same generation."""
    fresh_cluster.create_topic(unique_topic, 2)
    callbacks: list = []
    consumer = _consumer(fresh_cluster.bootstrap, "g-kill", **{"session.timeout.ms": 2500})
    try:
        consumer.subscribe([unique_topic], on_lost=lambda c, parts: callbacks.append(("lost", parts)),
                           on_revoke=lambda c, parts: callbacks.append(("revoke", parts)))
        _poll_until(consumer, _joined(consumer, 2), 20)
        member = consumer.consumer_group_metadata()
        host = consumer._rt.host_of("cgrp")
        consumer._rt.kill_host(host)
        _poll_until(consumer, lambda: consumer._rt.host_restarts(host) >= 1, 20, "the group host to restart")
        _poll(consumer, 4.0)  # past session.timeout.ms: only the restarted cgrp's heartbeats keep the member in
        assert _joined(consumer, 2)() and not callbacks, callbacks
        after = consumer.consumer_group_metadata()
        assert (after.member_id, after.generation_id) == (member.member_id, member.generation_id)
        result = consumer.commit(offsets=[TopicPartition(unique_topic, 1, 2)], asynchronous=False)
        assert result[0].error is None
    finally:
        consumer.close()
