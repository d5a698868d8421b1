"""GroupStateMachine.resume: a cgrp actor restarted after its host died carries on as the member its predecessor
was (the app kept member id, generation and assignment): no rebalance, nothing fetched again, heartbeats with
the same identity; the coordinator's answers then decide as for any member."""

from __future__ import annotations

from kqactors.core.group.actions import (
    RebalanceCallback,
    RequestMetadata,
    SendRequest,
    StartFetching,
    StopFetching,
)
from kqactors.core.group.states import JoinState
from kqactors.errors import KafkaError
from kqactors.ops.group import LOST, REVOKE

from .harness import Harness, coordinator, heartbeat

ASSIGNED = [("t", 0), ("t", 2)]


def resumed(**settings) -> Harness:
    h = Harness(**settings)
    h.call("resume", ["t"], "member-7", 4, None, ASSIGNED)
    return h


def test_resume_is_steady_with_the_kept_assignment_and_heartbeats_as_the_same_member():
    h = resumed(heartbeat_interval_ms=500)
    assert h.sm.join_state is JoinState.STEADY
    assert sorted((tp.topic, tp.partition) for tp in h.sm.assignment) == ASSIGNED
    assert h.one(RequestMetadata).topics == ["t"]
    h.respond(h.request("FindCoordinator"), coordinator(node_id=2))
    h.advance(0)
    beat = h.request("Heartbeat")
    assert (beat.broker_id, beat.fields["member_id"], beat.fields["generation_id"]) == (2, "member-7", 4)
    h.respond(beat, heartbeat())
    h.feed(h.sm.metadata_update({"t": 3}, h.now))  # the first metadata is the joined snapshot: no rejoin
    h.advance(500)
    h.request("Heartbeat")
    h.none(SendRequest, "JoinGroup")
    h.none(RebalanceCallback)
    h.none(StartFetching)
    h.none(StopFetching)


def test_a_rebalance_after_resume_revokes_the_kept_assignment_and_rejoins_with_the_member_id():
    h = resumed()
    h.respond(h.request("FindCoordinator"), coordinator())
    h.advance(0)
    h.respond(h.request("Heartbeat"), heartbeat(KafkaError.REBALANCE_IN_PROGRESS))
    revoke = h.one(RebalanceCallback)
    assert revoke.kind == REVOKE
    assert sorted((tp.topic, tp.partition) for tp in revoke.partitions) == ASSIGNED
    h.call("rebalance_done")
    h.feed(h.sm.metadata_update({"t": 3}, h.now))
    assert h.request("JoinGroup").fields["member_id"] == "member-7"


def test_an_unknown_member_after_resume_loses_the_assignment():
    h = resumed()
    h.respond(h.request("FindCoordinator"), coordinator())
    h.advance(0)
    h.respond(h.request("Heartbeat"), heartbeat(KafkaError.UNKNOWN_MEMBER_ID))
    lost = h.one(RebalanceCallback)
    assert lost.kind == LOST
    assert sorted((tp.topic, tp.partition) for tp in lost.partitions) == ASSIGNED
