"""Group state machine on a fake clock: coordinator discovery, join as leader and follower (KIP-394 member
id), rebalances (metadata change, heartbeat REBALANCE_IN_PROGRESS), cooperative incremental rebalancing and
the request fields the actor sends."""

from __future__ import annotations

import pytest

from kqactors.core.group.actions import (
    CoordinatorChanged,
    RebalanceCallback,
    RequestMetadata,
    SendRequest,
    StartFetching,
    StopFetching,
)
from kqactors.core.group.member_metadata import decode_assignment, decode_subscription
from kqactors.core.group.states import CoordState, JoinState
from kqactors.errors import KafkaError, KafkaException
from kqactors.message import OFFSET_BEGINNING, OFFSET_INVALID, TopicPartition
from kqactors.ops.group import ASSIGN, REVOKE
from kqactors.protocol.api import api_info

from .harness import (
    Harness,
    coordinator,
    fetch_reply,
    heartbeat,
    join_error,
    join_ok,
    member,
    sync_ok,
)


def start(h, topics=("t",), counts=None):
    h.call("subscribe", list(topics))
    assert h.one(RequestMetadata).topics == sorted(topics)
    h.respond(h.request("FindCoordinator"), coordinator())
    assert h.one(CoordinatorChanged).node_id == 1
    h.call("metadata_update", counts or {t: 4 for t in topics})
    return h.request("JoinGroup")


def join_to_steady(h, topics=("t",), counts=None, assigned=(("t", 0), ("t", 1)), member_id="me", generation=1,
                   committed=None):
    """Join as a follower with ``assigned``; returns after fetchers started."""
    join = start(h, topics, counts)
    h.respond(join, join_ok(member_id, generation, leader="other", protocol=h.settings.assignment_strategies[0]))
    sync = h.request("SyncGroup")
    assert sync.fields["assignments"] == []
    h.respond(sync, sync_ok(list(assigned)))
    callback = h.one(RebalanceCallback)
    assert callback.kind == ASSIGN
    h.call("rebalance_done")
    if assigned:
        fetch = h.request("OffsetFetch")
        h.respond(fetch, fetch_reply(fetch, committed or {}))
        h.one(StartFetching)
    assert h.sm.join_state is JoinState.STEADY
    return callback


def test_leader_join_with_member_id_required_runs_the_assignor_and_starts_fetching():
    h = Harness()
    join = start(h, ["t"], {"t": 3})
    fields = join.fields
    assert fields["member_id"] == "" and fields["protocol_type"] == "consumer"
    assert [name for name, _ in fields["protocols"]] == ["range", "roundrobin"]
    assert decode_subscription("x", None, fields["protocols"][0][1]).topics == ["t"]
    assert join.broker_id == 1 and join.timeout_ms > h.settings.max_poll_interval_ms

    h.respond(join, join_error(KafkaError.MEMBER_ID_REQUIRED, member_id="me-1"))
    rejoin = h.request("JoinGroup")
    assert rejoin.fields["member_id"] == "me-1"

    members = [member("me-1", ["t"]), member("zz-2", ["t", "u"])]
    h.respond(rejoin, join_ok("me-1", generation=5, members=members))
    assert h.sm.is_leader and h.sm.join_state is JoinState.WAIT_METADATA
    assert h.one(RequestMetadata).topics == ["t", "u"]
    h.call("metadata_update", {"t": 3, "u": 2})
    sync = h.request("SyncGroup")
    assignments = {m: decode_assignment(a) for m, a in sync.fields["assignments"]}
    assert assignments == {"me-1": [("t", 0), ("t", 1)], "zz-2": [("t", 2), ("u", 0), ("u", 1)]}
    assert sync.fields["generation_id"] == 5 and sync.fields["protocol_name"] == "range"

    h.respond(sync, sync_ok(assignments["me-1"]))
    callback = h.one(RebalanceCallback)
    assert (callback.kind, callback.incremental) == (ASSIGN, False)
    assert callback.error == KafkaError._ASSIGN_PARTITIONS
    assert callback.partitions == [TopicPartition("t", 0), TopicPartition("t", 1)]
    assert h.sm.join_state is JoinState.WAIT_ASSIGN_CALL

    h.call("rebalance_done")
    fetch = h.request("OffsetFetch")
    h.respond(fetch, fetch_reply(fetch, {("t", 0): 42}))
    started = {(tp.topic, tp.partition): tp.offset for tp in h.one(StartFetching).partitions}
    assert started == {("t", 0): 42, ("t", 1): OFFSET_INVALID}
    assert h.sm.join_state is JoinState.STEADY and h.sm.generation_id == 5


def test_follower_assign_with_explicit_offsets_skips_offset_fetch_for_them():
    h = Harness()
    join = start(h)
    h.respond(join, join_ok("me", leader="other"))
    h.respond(h.request("SyncGroup"), sync_ok([("t", 0), ("t", 1)]))
    h.one(RebalanceCallback)
    h.call("rebalance_done", partitions=[TopicPartition("t", 0, OFFSET_BEGINNING), TopicPartition("t", 1)])
    assert h.one(StartFetching).partitions[0].offset == OFFSET_BEGINNING
    assert h.request("OffsetFetch").fields["partitions"] == [("t", 1)]


def test_heartbeats_follow_the_interval_and_rebalance_in_progress_triggers_eager_rejoin():
    h = Harness(heartbeat_interval_ms=1000, enable_auto_commit=True)
    join_to_steady(h)
    h.advance(999)
    h.none(SendRequest, "Heartbeat")
    h.advance(1)
    hb = h.request("Heartbeat")
    assert hb.fields["generation_id"] == 1 and hb.fields["member_id"] == "me"
    h.respond(hb, heartbeat())
    h.sm.auto_store("t", 0, 100)
    h.advance(1000)
    h.respond(h.request("Heartbeat"), heartbeat(KafkaError.REBALANCE_IN_PROGRESS))
    revoke = h.one(RebalanceCallback)
    assert (revoke.kind, revoke.incremental) == (REVOKE, False)
    assert h.sm.join_state is JoinState.WAIT_UNASSIGN_CALL
    h.none(SendRequest, "JoinGroup")  # eager: nothing rejoins before the app gave the partitions up
    h.call("rebalance_done")
    assert len(h.one(StopFetching).partitions) == 2
    commit = h.request("OffsetCommit")
    assert commit.fields["offsets"] == [("t", 0, 100, None, None)]
    join = h.request("JoinGroup")
    assert join.fields["member_id"] == "me"
    assert h.sm.stored_offset("t", 0) is None  # stored offsets reset on revoke


def test_metadata_change_of_a_subscribed_topic_triggers_rejoin():
    h = Harness()
    join_to_steady(h, counts={"t": 4})
    h.call("metadata_update", {"t": 4, "other": 9})
    h.none(RebalanceCallback)
    h.call("metadata_update", {"t": 6})
    assert h.one(RebalanceCallback).kind == REVOKE
    h.call("rebalance_done")
    h.take(StopFetching)
    h.request("JoinGroup")


def test_pattern_subscription_rejoins_when_a_new_topic_matches():
    h = Harness()
    h.call("subscribe", ["^orders-.*"])
    assert h.one(RequestMetadata).topics is None
    h.respond(h.request("FindCoordinator"), coordinator())
    h.call("metadata_update", {"orders-eu": 2, "payments": 1})
    join = h.request("JoinGroup")
    assert decode_subscription("m", None, join.fields["protocols"][0][1]).topics == ["orders-eu"]
    h.respond(join, join_ok("me", leader="other"))
    h.respond(h.request("SyncGroup"), sync_ok([]))
    h.one(RebalanceCallback)
    h.call("rebalance_done")
    h.call("metadata_update", {"orders-eu": 2, "orders-us": 3, "payments": 1})
    join = h.request("JoinGroup")
    assert decode_subscription("m", None, join.fields["protocols"][0][1]).topics == ["orders-eu", "orders-us"]


def test_the_refresh_scope_of_a_pattern_subscription_stays_every_topic_after_the_leader_assigns():
    """A leader asks for the group's topics by name to assign them; the periodic refresh must still cover
    every topic, or a topic created later that matches is never seen."""
    h = Harness()
    h.call("subscribe", ["^orders-.*"])
    h.one(RequestMetadata)
    h.respond(h.request("FindCoordinator"), coordinator())
    h.call("metadata_update", {"orders-eu": 2})
    h.respond(h.request("JoinGroup"), join_ok("me", members=[member("me", ["orders-eu"]),
                                                               member("you", ["orders-eu", "audit"])]))
    assert h.one(RequestMetadata).topics == ["audit", "orders-eu"]  # the leader's one-off request
    assert h.sm.metadata_scope() is None


def test_the_refresh_scope_of_a_leader_covers_the_topics_of_every_member():
    h = Harness()
    join = start(h, ["t"])
    assert h.sm.metadata_scope() == ["t"]
    h.respond(join, join_ok("me", members=[member("me", ["t"]), member("you", ["u"])]))
    h.one(RequestMetadata)
    h.call("metadata_update", {"t": 1, "u": 2})
    assert h.sm.metadata_scope() == ["t", "u"]


def test_cooperative_incremental_revoke_then_assign_then_follow_up_rejoin():
    h = Harness(assignment_strategies=("cooperative-sticky",))
    join_to_steady(h, assigned=[("t", 0), ("t", 1), ("t", 2)])
    h.advance(h.settings.heartbeat_interval_ms)
    h.respond(h.request("Heartbeat"), heartbeat(KafkaError.REBALANCE_IN_PROGRESS))
    h.none(RebalanceCallback)  # cooperative: keep everything while rejoining
    join = h.request("JoinGroup")
    subscription = decode_subscription("me", None, join.fields["protocols"][0][1])
    assert subscription.owned_partitions == [("t", 0), ("t", 1), ("t", 2)]
    assert subscription.generation_id == 1
    h.respond(join, join_ok("me", generation=2, leader="other", protocol="cooperative-sticky"))
    h.respond(h.request("SyncGroup"), sync_ok([("t", 0), ("t", 3)]))

    revoke = h.one(RebalanceCallback)
    assert (revoke.kind, revoke.incremental) == (REVOKE, True)
    assert revoke.partitions == [TopicPartition("t", 1), TopicPartition("t", 2)]
    h.call("rebalance_done")
    assert [tp.partition for tp in h.one(StopFetching).partitions] == [1, 2]
    assign = h.one(RebalanceCallback)
    assert (assign.kind, assign.incremental, assign.partitions) == (ASSIGN, True, [TopicPartition("t", 3)])
    h.none(SendRequest, "JoinGroup")
    h.call("rebalance_done")
    assert h.request("OffsetFetch").fields["partitions"] == [("t", 3)]
    follow_up = h.request("JoinGroup")
    owned = decode_subscription("me", None, follow_up.fields["protocols"][0][1]).owned_partitions
    assert owned == [("t", 0), ("t", 3)]
    assert [(tp.topic, tp.partition) for tp in h.sm.assignment] == [("t", 0), ("t", 3)]


def test_cooperative_leader_withholds_partitions_still_owned_by_others():
    h = Harness(assignment_strategies=("cooperative-sticky",))
    join = start(h, ["t"], {"t": 4})
    members = [member("a", ["t"], owned=[("t", p) for p in range(4)], generation=3), member("b", ["t"])]
    h.respond(join, join_ok("a", generation=4, protocol="cooperative-sticky", members=members))
    h.one(RequestMetadata)
    h.call("metadata_update", {"t": 4})
    assignments = {m: decode_assignment(a) for m, a in h.request("SyncGroup").fields["assignments"]}
    assert len(assignments["a"]) == 2 and assignments["b"] == []


def test_request_fields_build_and_encode_at_every_supported_version():
    h = Harness(group_instance_id="host-1")
    join_to_steady(h)
    h.sm.auto_store("t", 0, 5)
    h.call("commit")
    h.advance(h.settings.heartbeat_interval_ms)
    h.call("unsubscribe")
    h.call("rebalance_done")
    requests = [a for a in h.actions if isinstance(a, SendRequest)]
    requests.append(SendRequest(0, "LeaveGroup", {"group_id": "g", "member_id": "m", "group_instance_id": None},
                                1, 1000))
    assert {r.api for r in requests} >= {"OffsetCommit", "Heartbeat", "LeaveGroup"}
    for request in requests:
        info = api_info(request.api)
        built = 0
        for version in range(info.min_version, info.max_version + 1):
            try:
                body = request.build(version)
            except KafkaException as exc:  # static membership on a version without group_instance_id
                assert exc.error == KafkaError._UNSUPPORTED_FEATURE and request.fields.get("group_instance_id")
                continue
            assert body.encode(version)
            built += 1
        assert built >= 1 and request.build(info.max_version)
    with pytest.raises(KafkaException) as excinfo:
        SendRequest(0, "Heartbeat", {"group_id": "g", "generation_id": 1, "member_id": "m",
                                     "group_instance_id": "i"}, 1, 1).build(2)
    assert excinfo.value.error == KafkaError._UNSUPPORTED_FEATURE


def test_find_coordinator_errors_retry_with_backoff():
    h = Harness(retry_backoff_ms=100, retry_backoff_max_ms=400)
    h.call("subscribe", ["t"])
    h.respond(h.request("FindCoordinator"), coordinator(error=KafkaError.COORDINATOR_NOT_AVAILABLE))
    assert h.sm.coord_state is CoordState.WAIT_COORD
    h.advance(99)
    h.none(SendRequest, "FindCoordinator")
    h.advance(1)
    h.respond(h.request("FindCoordinator"), coordinator(error=KafkaError.COORDINATOR_NOT_AVAILABLE))
    h.advance(199)
    h.none(SendRequest, "FindCoordinator")
    h.advance(1)
    h.respond(h.request("FindCoordinator"), coordinator(node_id=3))
    assert h.sm.coord_state is CoordState.UP and h.sm.coordinator[0] == 3


def test_stale_replies_are_ignored():
    h = Harness()
    join = start(h)
    h.respond(join, join_error(KafkaError.MEMBER_ID_REQUIRED, member_id="m"))
    second = h.request("JoinGroup")
    h.respond(join, join_ok("m", generation=9, leader="x"))  # already answered: dropped
    assert h.sm.generation_id == -1 and h.sm.join_state is JoinState.WAIT_JOIN
    h.respond(second, join_ok("m", generation=2, leader="x"))
    assert h.sm.generation_id == 2


def test_subscribe_rejects_bad_input():
    h = Harness()
    for bad in ([], "t", [""], [3], ["^(unclosed"]):
        with pytest.raises(KafkaException) as excinfo:
            h.call("subscribe", bad)
        assert excinfo.value.error == KafkaError._INVALID_ARG
    with pytest.raises(KafkaException) as excinfo:
        h.call("rebalance_done")
    assert excinfo.value.error == KafkaError._STATE
