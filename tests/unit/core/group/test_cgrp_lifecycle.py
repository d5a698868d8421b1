"""Group state machine failure paths and lifecycle on a fake clock: heartbeat errors, coordinator loss,
session timeout, static membership and fencing, max.poll.interval, offsets (store, auto-commit, commit
errors), unsubscribe and close."""

from __future__ import annotations

import pytest

from kqactors.core.group.actions import (
    Closed,
    CommitResult,
    CoordinatorChanged,
    RebalanceCallback,
    SendRequest,
    StopFetching,
    SurfaceError,
)
from kqactors.core.group.settings import GroupSettings
from kqactors.core.group.states import CoordState, JoinState
from kqactors.errors import KafkaError, KafkaException
from kqactors.message import TopicPartition
from kqactors.ops.group import LOST, REVOKE

from .harness import (
    TRANSPORT_DOWN,
    Harness,
    commit_reply,
    coordinator,
    heartbeat,
    join_error,
    join_ok,
    leave_ok,
    sync_error,
    sync_ok,
)
from .test_cgrp_join import join_to_steady, start


def beat(h, code=0):
    h.advance(h.settings.heartbeat_interval_ms)
    h.respond(h.request("Heartbeat"), heartbeat(code) if isinstance(code, int) else code)


def test_unknown_member_on_heartbeat_loses_the_assignment_and_rejoins_as_new_member():
    h = Harness()
    join_to_steady(h)
    beat(h, KafkaError.UNKNOWN_MEMBER_ID)
    lost = h.one(RebalanceCallback)
    assert lost.kind == LOST and len(lost.partitions) == 2
    assert h.sm.member_id == "" and h.sm.generation_id == -1
    h.none(SendRequest, "JoinGroup")
    h.sm.auto_store("t", 0, 7)  # still assigned until the callback returns, but lost: never committed
    h.call("rebalance_done")
    h.one(StopFetching)
    h.none(SendRequest, "OffsetCommit")  # lost partitions are never committed
    assert h.request("JoinGroup").fields["member_id"] == ""
    assert h.sm.assignment == []


def test_illegal_generation_keeps_the_member_id():
    h = Harness()
    join_to_steady(h)
    beat(h, KafkaError.ILLEGAL_GENERATION)
    assert h.one(RebalanceCallback).kind == LOST
    h.call("rebalance_done")
    assert h.request("JoinGroup").fields["member_id"] == "me"


def test_heartbeat_not_coordinator_rediscovers_and_keeps_the_assignment():
    h = Harness(retry_backoff_ms=100)
    join_to_steady(h)
    beat(h, KafkaError.NOT_COORDINATOR)
    assert h.one(CoordinatorChanged).node_id == -1
    assert h.sm.coord_state is CoordState.WAIT_COORD
    h.advance(100)
    h.respond(h.request("FindCoordinator"), coordinator(node_id=2))
    assert h.one(CoordinatorChanged).node_id == 2
    h.none(RebalanceCallback)
    h.advance(0)
    hb = h.request("Heartbeat")
    assert hb.broker_id == 2 and hb.fields["generation_id"] == 1
    assert len(h.sm.assignment) == 2


def test_join_transport_failure_rediscovers_then_rejoins():
    h = Harness(retry_backoff_ms=50)
    join = start(h)
    h.respond(join, TRANSPORT_DOWN)
    h.one(CoordinatorChanged)
    h.none(SendRequest, "JoinGroup")
    h.advance(50)
    h.respond(h.request("FindCoordinator"), coordinator())
    assert h.request("JoinGroup").broker_id == 1


def test_sync_rebalance_in_progress_rejoins_and_fatal_join_errors_surface():
    h = Harness(retry_backoff_max_ms=500)
    join = start(h)
    h.respond(join, join_ok("me", leader="other"))
    h.respond(h.request("SyncGroup"), sync_error(KafkaError.REBALANCE_IN_PROGRESS))
    join = h.request("JoinGroup")
    h.respond(join, join_error(KafkaError.INVALID_SESSION_TIMEOUT))
    assert h.one(SurfaceError).error == KafkaError.INVALID_SESSION_TIMEOUT
    h.advance(499)
    h.none(SendRequest, "JoinGroup")
    h.advance(1)
    h.request("JoinGroup")


def test_answered_heartbeats_keep_the_session_alive():
    h = Harness(session_timeout_ms=10000, heartbeat_interval_ms=3000)
    join_to_steady(h)
    for _ in range(20):
        beat(h)
    h.none(RebalanceCallback)
    assert h.sm.join_state is JoinState.STEADY and h.sm.generation_id == 1


def test_coordinator_lost_while_waiting_for_sync_restarts_the_join():
    h = Harness(retry_backoff_ms=10)
    join = start(h)
    h.respond(join, join_ok("me", leader="other"))
    sync = h.request("SyncGroup")
    h.respond(sync, sync_error(KafkaError.NOT_COORDINATOR))
    assert h.sm.join_state is JoinState.INIT and h.one(CoordinatorChanged).node_id == -1
    h.advance(10)
    h.respond(h.request("FindCoordinator"), coordinator(node_id=4))
    rejoin = h.request("JoinGroup")
    assert rejoin.broker_id == 4 and rejoin.fields["member_id"] == "me"


def test_session_timeout_without_heartbeat_replies_loses_the_assignment():
    h = Harness(session_timeout_ms=10000, heartbeat_interval_ms=3000)
    join_to_steady(h)
    h.advance(3000)
    h.request("Heartbeat")  # never answered: the transport keeps it in flight
    h.advance(3000)
    h.none(SendRequest, "Heartbeat")  # one heartbeat in flight at a time
    h.advance(4000)
    assert h.one(RebalanceCallback).kind == LOST
    assert h.one(CoordinatorChanged).node_id == -1
    assert h.sm.member_id == ""


def test_static_member_sends_instance_id_never_leaves_and_is_fenced_fatally():
    h = Harness(group_instance_id="host-1")
    join = start(h)
    assert join.fields["group_instance_id"] == "host-1"
    h.respond(join, join_ok("me", leader="other"))
    sync = h.request("SyncGroup")
    assert sync.fields["group_instance_id"] == "host-1"
    h.respond(sync, sync_ok([("t", 0)]))
    h.one(RebalanceCallback)
    h.call("rebalance_done")
    h.take(SendRequest)
    beat(h, KafkaError.FENCED_INSTANCE_ID)
    error = h.one(SurfaceError).error
    assert error == KafkaError.FENCED_INSTANCE_ID and error.fatal()
    assert h.one(RebalanceCallback).kind == LOST
    with pytest.raises(KafkaException) as excinfo:
        h.call("subscribe", ["t"])
    assert excinfo.value.error.fatal()


def test_static_member_close_commits_but_sends_no_leave_group():
    h = Harness(group_instance_id="host-1")
    join_to_steady(h)
    h.sm.auto_store("t", 1, 9)
    h.call("close")
    assert h.one(RebalanceCallback).kind == REVOKE
    h.call("rebalance_done")
    commit = h.request("OffsetCommit")
    assert commit.fields["group_instance_id"] == "host-1"
    h.none(Closed)
    h.respond(commit, commit_reply(commit))
    h.none(SendRequest, "LeaveGroup")
    h.one(Closed)


def test_max_poll_interval_exceeded_surfaces_error_leaves_and_rejoins_on_next_poll():
    h = Harness(max_poll_interval_ms=60000, session_timeout_ms=100000)
    join_to_steady(h)
    h.take(SendRequest)
    h.advance(59999)
    h.none(SurfaceError)
    h.advance(2)
    error = h.one(SurfaceError).error
    assert error == KafkaError._MAX_POLL_EXCEEDED
    leave = h.request("LeaveGroup")
    assert leave.fields["member_id"] == "me"
    assert h.one(RebalanceCallback).kind == LOST
    h.advance(100000)
    h.none(SendRequest, "JoinGroup")
    h.call("poll_called")
    h.call("rebalance_done")
    h.one(StopFetching)
    assert h.request("JoinGroup").fields["member_id"] == ""


def test_close_revokes_commits_then_leaves_then_reports_closed():
    h = Harness()
    join_to_steady(h)
    h.sm.auto_store("t", 0, 11)
    h.call("close")
    h.none(SendRequest, "LeaveGroup")
    assert h.one(RebalanceCallback).kind == REVOKE
    h.call("rebalance_done")
    h.one(StopFetching)
    commit = h.request("OffsetCommit")
    assert commit.fields["offsets"] == [("t", 0, 11, None, None)]
    h.none(SendRequest, "LeaveGroup")
    h.respond(commit, commit_reply(commit))
    result = h.one(CommitResult)
    assert result.error is None and result.partitions == [TopicPartition("t", 0, 11)]
    leave = h.request("LeaveGroup")
    h.none(Closed)
    h.respond(leave, leave_ok())
    h.one(Closed)
    assert h.sm.closed and h.sm.next_deadline() is None
    assert h.call("close") == []
    with pytest.raises(KafkaException):
        h.call("commit")


def test_close_before_the_coordinator_is_known_fails_queued_commits():
    h = Harness()
    h.call("subscribe", ["t"])
    h.take(SendRequest)
    h.call("close")
    h.one(Closed)


def test_unsubscribe_revokes_commits_and_leaves():
    h = Harness()
    join_to_steady(h)
    h.sm.auto_store("t", 1, 3)
    h.call("unsubscribe")
    h.call("rebalance_done")
    h.request("OffsetCommit")
    h.request("LeaveGroup")
    assert h.sm.join_state is JoinState.INIT and h.sm.member_id == ""
    h.advance(h.settings.heartbeat_interval_ms * 3)
    h.none(SendRequest, "Heartbeat")


def test_auto_commit_interval_commits_only_changed_stored_offsets():
    h = Harness(auto_commit_interval_ms=5000, heartbeat_interval_ms=10000, session_timeout_ms=60000)
    join_to_steady(h)
    h.sm.auto_store("t", 0, 5)
    h.sm.auto_store("x", 0, 5)  # not assigned: not stored
    h.advance(5000)
    commit = h.request("OffsetCommit")
    assert commit.fields["offsets"] == [("t", 0, 5, None, None)]
    assert commit.fields["generation_id"] == 1 and commit.fields["member_id"] == "me"
    h.respond(commit, commit_reply(commit))
    assert h.one(CommitResult).tag is None
    h.advance(5000)
    h.none(SendRequest, "OffsetCommit")  # nothing new
    h.sm.auto_store("t", 0, 6)
    h.advance(5000)
    commit = h.request("OffsetCommit")
    h.respond(commit, commit_reply(commit, KafkaError.REBALANCE_IN_PROGRESS))
    result = h.one(CommitResult)
    assert result.error == KafkaError.REBALANCE_IN_PROGRESS
    assert result.partitions[0].error == KafkaError.REBALANCE_IN_PROGRESS
    h.advance(5000)
    assert h.request("OffsetCommit").fields["offsets"] == [("t", 0, 6, None, None)]  # retried: not committed


def test_manual_store_and_commit_with_tags_and_errors():
    h = Harness(enable_auto_offset_store=False, enable_auto_commit=False)
    join_to_steady(h)
    h.sm.auto_store("t", 0, 99)
    assert h.sm.stored_offset("t", 0) is None
    result = h.sm.store_offsets([TopicPartition("t", 0, 10), TopicPartition("other", 0, 1),
                                 TopicPartition("t", 1, -2)])
    assert result[0].error is None
    assert result[1].error == KafkaError._STATE and result[2].error == KafkaError._INVALID_ARG
    h.call("commit", tag="sync-1")
    commit = h.request("OffsetCommit")
    h.respond(commit, TRANSPORT_DOWN)
    failed = h.one(CommitResult)
    assert failed.tag == "sync-1" and failed.error == KafkaError._TRANSPORT
    h.one(CoordinatorChanged)
    h.call("commit", offsets=[TopicPartition("t", 1, 4)], tag="explicit")
    h.none(SendRequest, "OffsetCommit")  # queued until the coordinator is back
    h.advance(h.settings.retry_backoff_ms)
    h.respond(h.request("FindCoordinator"), coordinator())
    assert h.request("OffsetCommit").fields["offsets"] == [("t", 1, 4, None, None)]
    h.call("commit")
    assert h.request("OffsetCommit").fields["offsets"] == [("t", 0, 10, None, None)]


def test_commit_with_nothing_stored_reports_no_offset_and_auto_store_api_guard():
    h = Harness()
    join_to_steady(h)
    h.call("commit", tag=1)
    assert h.one(CommitResult).error == KafkaError._NO_OFFSET
    with pytest.raises(KafkaException) as excinfo:
        h.sm.store_offsets([TopicPartition("t", 0, 1)])
    assert excinfo.value.error == KafkaError._INVALID_ARG
    with pytest.raises(KafkaException):
        h.call("commit", offsets=[TopicPartition("t", 0, -1)])


def test_settings_validation():
    for kwargs in ({"group_id": ""}, {"group_id": "g", "assignment_strategies": ("range", "cooperative-sticky")},
                   {"group_id": "g", "assignment_strategies": ("nope",)}):
        with pytest.raises(KafkaException) as excinfo:
            GroupSettings(**kwargs)
        assert excinfo.value.error == KafkaError._INVALID_ARG
    # librdkafka leaves heartbeat vs session to the broker (tests/compat/test_config_parity.py)
    GroupSettings(group_id="g", heartbeat_interval_ms=5000, session_timeout_ms=5000)
    settings = GroupSettings.from_config({"group.id": "g", "group.instance.id": "i",
                                          "partition.assignment.strategy": "cooperative-sticky",
                                          "enable.auto.commit": False})
    assert settings.is_static and settings.rebalance_protocol == "COOPERATIVE" and not settings.enable_auto_commit


def test_coordinator_is_queried_again_every_coordinator_query_interval():
    h = Harness(coordinator_query_interval_ms=60000, heartbeat_interval_ms=150000, session_timeout_ms=300000,
                enable_auto_commit=False)
    join_to_steady(h)
    h.take(SendRequest)
    h.advance(59999)
    h.none(SendRequest, "FindCoordinator")
    h.advance(1)
    h.respond(h.request("FindCoordinator"), coordinator(node_id=1))  # unchanged: nothing else happens
    h.none(CoordinatorChanged)
    assert h.sm.join_state is JoinState.STEADY
    h.advance(60000)
    h.respond(h.request("FindCoordinator"), coordinator(node_id=3))  # the group moved: follow it
    assert h.one(CoordinatorChanged).node_id == 3
    h.advance(30000)  # the first heartbeat (t=150 s) goes to the new coordinator
    assert h.request("Heartbeat").broker_id == 3
