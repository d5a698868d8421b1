"""KIP-848 member state machine (group.protocol=consumer) on a fake clock: joining with a client-generated
member id, heartbeat fields sent only when needed, target assignments by topic id resolved through metadata,
incremental revoke/assign then acknowledgement, fencing, coordinator loss, fatal errors, leaving."""

from __future__ import annotations

import pytest

from kqactors.core.group.actions import (
    Closed,
    CoordinatorChanged,
    RebalanceCallback,
    RequestMetadata,
    SendRequest,
    StartFetching,
    StopFetching,
    SurfaceError,
)
from kqactors.core.group.consumer_protocol import ConsumerProtocolMachine
from kqactors.core.group.requests import build_request
from kqactors.core.group.states import JoinState
from kqactors.errors import KafkaError, KafkaException
from kqactors.message import TopicPartition
from kqactors.ops.group import ASSIGN, LOST, REVOKE
from kqactors.protocol.generated.consumer_group_heartbeat import (
    Assignment,
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
    ConsumerGroupHeartbeatResponseTopicPartitions,
)

from .harness import TRANSPORT_DOWN, Harness, commit_reply, coordinator, fetch_reply

HB = "ConsumerGroupHeartbeat"
T_ID = bytes(range(1, 17))
U_ID = bytes(range(17, 33))
IDS = {"t": T_ID, "u": U_ID}


def hb_ok(epoch, assignment=None, interval=500, member_id=None):
    parts = None
    if assignment is not None:
        parts = Assignment(topic_partitions=[ConsumerGroupHeartbeatResponseTopicPartitions(topic_id=tid, partitions=ps)
                                             for tid, ps in assignment.items()])
    return ConsumerGroupHeartbeatResponse(error_code=0, member_id=member_id, member_epoch=epoch,
                                          heartbeat_interval_ms=interval, assignment=parts)


def hb_error(code):
    return ConsumerGroupHeartbeatResponse(error_code=code, error_message=KafkaError(code).str(), member_epoch=-1)


def harness(**settings):
    settings.setdefault("group_protocol", "consumer")
    return Harness(machine=ConsumerProtocolMachine, machine_args={"member_id": "m-1"}, **settings)


def join(h, topics=("t",)):
    """subscribe → coordinator → the join heartbeat (returned, not yet answered)."""
    h.call("subscribe", list(topics))
    h.take(RequestMetadata)
    h.respond(h.request("FindCoordinator"), coordinator())
    return h.request(HB)


def assign_and_ack(h, held, epoch=1):
    """Answer the pending ASSIGN callback; return the acknowledging heartbeat."""
    cb = h.one(RebalanceCallback)
    assert cb.kind == ASSIGN and cb.incremental
    assert [(tp.topic, tp.partition) for tp in cb.partitions] == held
    h.call("rebalance_done")
    fetch = h.request("OffsetFetch")
    h.respond(fetch, fetch_reply(fetch, {}))
    h.one(StartFetching)
    ack = h.request(HB)
    assert ack.fields["member_epoch"] == epoch
    return ack


def steady(h, held=(("t", 0), ("t", 1)), epoch=1):
    """Joined at ``epoch`` holding ``held`` of topic t, acknowledged."""
    request = join(h)
    h.call("metadata_update", {"t": 4}, topic_ids={"t": T_ID})
    h.respond(request, hb_ok(epoch, {T_ID: [p for _t, p in held]}))
    ack = assign_and_ack(h, list(held), epoch)
    h.respond(ack, hb_ok(epoch))
    h.actions.clear()


def test_join_is_a_full_request_with_the_client_member_id_and_encodes_at_v1():
    h = harness(remote_assignor="uniform", client_rack="rack-a", max_poll_interval_ms=30000)
    h.call("subscribe", ["t", "^re-.*"])
    assert h.one(RequestMetadata).topics is None  # a regex needs every topic
    h.respond(h.request("FindCoordinator"), coordinator())
    request = h.request(HB)
    assert request.broker_id == 1
    f = request.fields
    assert f["member_id"] == "m-1" and f["member_epoch"] == 0
    assert f["subscribed_topic_names"] == ["t"] and f["subscribed_topic_regex"] == "(^re-.*)"
    assert f["server_assignor"] == "uniform" and f["rack_id"] == "rack-a"
    assert f["rebalance_timeout_ms"] == 30000 and f["topic_partitions"] == []
    encoded = build_request(HB, f, 1).encode(1)
    decoded = ConsumerGroupHeartbeatRequest.decode(encoded, 1)
    assert decoded.member_id == "m-1" and decoded.subscribed_topic_regex == "(^re-.*)"
    assert decoded.topic_partitions == []
    assert h.sm.join_state is JoinState.WAIT_JOIN


def test_generated_member_ids_are_uuids_in_kafka_text_form():
    a = ConsumerProtocolMachine(harness().settings, 0.0).member_id
    b = ConsumerProtocolMachine(harness().settings, 0.0).member_id
    assert a != b and len(a) == 22 and "=" not in a


def test_target_waits_for_topic_ids_then_assigns_then_acknowledges_the_owned_partitions():
    h = harness()
    request = join(h)
    h.respond(request, hb_ok(3, {T_ID: [0, 1]}))
    assert h.sm.member_epoch == 3 and h.sm.heartbeat_interval_ms == 500
    assert h.one(RequestMetadata).topics == ["t"]  # the id is unknown: resolve it first
    h.none(RebalanceCallback)
    h.call("metadata_update", {"t": 2}, topic_ids={"t": T_ID})
    h.none(SendRequest, HB)  # no ack before the app has the partitions
    ack = assign_and_ack(h, [("t", 0), ("t", 1)], epoch=3)
    f = ack.fields
    assert f["topic_partitions"] == [(T_ID, [0, 1])]
    assert f["subscribed_topic_names"] is None and f["rebalance_timeout_ms"] == -1 and f["instance_id"] is None
    h.respond(ack, hb_ok(3))
    h.advance(499)
    h.none(SendRequest, HB)
    h.advance(1)
    regular = h.request(HB)
    assert regular.fields["topic_partitions"] is None and regular.fields["member_epoch"] == 3


def test_new_target_revokes_first_then_assigns_then_acks_once():
    h = harness(enable_auto_offset_store=False)
    steady(h)
    h.sm.store_offsets([TopicPartition("t", 0, 42)])
    h.advance(500)
    h.respond(h.request(HB), hb_ok(2, {T_ID: [1, 2]}))
    revoke = h.one(RebalanceCallback)
    assert revoke.kind == REVOKE and [tp.partition for tp in revoke.partitions] == [0]
    h.none(SendRequest, HB)
    h.call("rebalance_done")
    assert [tp.partition for tp in h.one(StopFetching).partitions] == [0]
    commit = h.request("OffsetCommit")  # the revoke commit carries the member epoch as generation
    assert commit.fields["generation_id"] == 2 and commit.fields["offsets"][0][:3] == ("t", 0, 42)
    ack = assign_and_ack(h, [("t", 2)], epoch=2)
    assert ack.fields["topic_partitions"] == [(T_ID, [1, 2])]
    h.respond(commit, commit_reply(commit))
    h.respond(ack, hb_ok(2))
    h.none(SendRequest, HB)
    assert [(tp.topic, tp.partition) for tp in h.sm.assignment] == [("t", 1), ("t", 2)]


def test_fenced_member_loses_its_partitions_then_rejoins_at_epoch_zero_with_the_same_id():
    for code in (KafkaError.FENCED_MEMBER_EPOCH, KafkaError.UNKNOWN_MEMBER_ID):
        h = harness()
        steady(h)
        h.advance(500)
        h.respond(h.request(HB), hb_error(code))
        lost = h.one(RebalanceCallback)
        assert lost.kind == LOST and len(lost.partitions) == 2
        h.none(SendRequest, HB)  # the rejoin waits for on_lost
        h.call("rebalance_done")
        h.one(StopFetching)
        h.none(SendRequest, "OffsetCommit")
        rejoin = h.request(HB)
        assert rejoin.fields["member_epoch"] == 0 and rejoin.fields["member_id"] == "m-1"
        assert rejoin.fields["subscribed_topic_names"] == ["t"] and rejoin.fields["topic_partitions"] == []


def test_coordinator_loss_keeps_the_assignment_and_sends_a_full_heartbeat_to_the_new_one():
    h = harness(retry_backoff_ms=100)
    steady(h)
    h.advance(500)
    h.respond(h.request(HB), hb_error(KafkaError.NOT_COORDINATOR))
    assert h.one(CoordinatorChanged).node_id == -1
    h.none(RebalanceCallback)
    h.advance(100)
    h.respond(h.request("FindCoordinator"), coordinator(node_id=2))
    h.advance(50)
    request = h.request(HB)
    assert request.broker_id == 2 and request.fields["member_epoch"] == 1
    assert request.fields["subscribed_topic_names"] == ["t"] and request.fields["topic_partitions"] == [(T_ID, [0, 1])]
    assert request.fields["rebalance_timeout_ms"] > 0
    h.respond(request, hb_ok(1))
    assert len(h.sm.assignment) == 2


def test_transport_failure_is_a_coordinator_error_too():
    h = harness(retry_backoff_ms=100)
    steady(h)
    h.advance(500)
    h.respond(h.request(HB), TRANSPORT_DOWN)
    assert h.one(CoordinatorChanged).node_id == -1


@pytest.mark.parametrize("code", [KafkaError.GROUP_MAX_SIZE_REACHED, KafkaError.UNSUPPORTED_ASSIGNOR,
                                  KafkaError.UNRELEASED_INSTANCE_ID, KafkaError._UNSUPPORTED_FEATURE])
def test_fatal_errors_reach_the_app_and_stop_the_member(code):
    h = harness()
    request = join(h)
    reply = (KafkaError(code, "broker 1 does not support cgrp:ConsumerGroupHeartbeat v1-1")
             if code < 0 else hb_error(code))
    h.respond(request, reply)
    error = h.one(SurfaceError).error
    assert error.code() == code and error.fatal() and "ConsumerGroupHeartbeat fatal error" in error.str()
    h.advance(10000)
    h.none(SendRequest, HB)
    with pytest.raises(KafkaException) as info:
        h.call("subscribe", ["t"])
    assert info.value.args[0].code() == code
    h.call("close")
    h.one(Closed)
    h.none(SendRequest, HB)  # no leave after a fatal error


def test_fatal_error_while_assigned_loses_the_partitions():
    h = harness()
    steady(h)
    h.advance(500)
    h.respond(h.request(HB), hb_error(KafkaError.GROUP_MAX_SIZE_REACHED))
    assert h.one(SurfaceError).error.fatal()
    assert h.one(RebalanceCallback).kind == LOST


def test_retriable_errors_back_off_and_other_errors_are_reported_but_keep_the_membership():
    h = harness(retry_backoff_ms=100, retry_backoff_max_ms=1000)
    request = join(h)
    h.respond(request, hb_error(KafkaError.COORDINATOR_LOAD_IN_PROGRESS))
    h.none(SurfaceError)
    h.advance(99)
    h.none(SendRequest, HB)
    h.advance(1)
    h.respond(h.request(HB), hb_ok(1, {}))
    h.advance(500)
    h.respond(h.request(HB), hb_error(KafkaError.TOPIC_AUTHORIZATION_FAILED))
    assert h.one(SurfaceError).error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    h.advance(999)
    h.none(SendRequest, HB)
    h.advance(1)
    assert h.request(HB).fields["member_epoch"] == 1


def test_unsubscribe_revokes_then_leaves_with_epoch_minus_one():
    h = harness()
    steady(h)
    h.call("unsubscribe")
    assert h.one(RebalanceCallback).kind == REVOKE
    h.none(SendRequest, HB)
    h.call("rebalance_done")
    leave = h.request(HB)
    assert leave.fields["member_epoch"] == -1 and leave.fields["member_id"] == "m-1"
    h.advance(5000)
    h.none(SendRequest, HB)  # no heartbeats without a subscription


def test_close_of_a_static_member_leaves_with_epoch_minus_two_and_waits_for_the_reply():
    h = harness(group_instance_id="i-1")
    steady(h)
    h.call("close")
    h.one(RebalanceCallback)
    h.call("rebalance_done")
    leave = h.request(HB)
    assert leave.fields["member_epoch"] == -2 and leave.fields["instance_id"] == "i-1"
    h.none(Closed)
    h.respond(leave, hb_ok(-2))
    h.one(Closed)


def test_a_new_subscription_is_sent_at_once_and_only_then():
    h = harness()
    steady(h)
    h.call("subscribe", ["t", "u"])
    request = h.request(HB)
    assert request.fields["subscribed_topic_names"] == ["t", "u"]
    h.respond(request, hb_ok(2, {T_ID: [0, 1], U_ID: [0]}))
    # u's id is unknown until metadata: nothing is assigned or acknowledged before it resolves
    assert h.take(RequestMetadata)[-1].topics == ["t", "u"]
    h.none(RebalanceCallback)
    h.none(SendRequest, HB)
    h.call("metadata_update", {"t": 4, "u": 1}, topic_ids=IDS)
    ack = assign_and_ack(h, [("u", 0)], epoch=2)
    assert ack.fields["topic_partitions"] == sorted([(T_ID, [0, 1]), (U_ID, [0])])
    assert ack.fields["subscribed_topic_names"] is None


def test_max_poll_exceeded_leaves_loses_and_rejoins_on_the_next_poll():
    h = harness(max_poll_interval_ms=10000)
    steady(h)
    for _ in range(20):
        h.advance(500)
        if any(isinstance(a, SurfaceError) for a in h.actions):
            break
        for request in h.take(SendRequest, HB):
            h.respond(request, hb_ok(1))
    assert h.now == 10000
    error = h.one(SurfaceError).error
    assert error.code() == KafkaError._MAX_POLL_EXCEEDED
    leave = h.request(HB)
    assert leave.fields["member_epoch"] == -1
    assert h.one(RebalanceCallback).kind == LOST
    h.call("rebalance_done")
    h.one(StopFetching)
    h.none(SendRequest, HB)
    h.call("poll_called")
    assert h.request(HB).fields["member_epoch"] == 0


def test_stale_heartbeat_replies_after_a_leave_are_ignored():
    h = harness()
    steady(h)
    h.advance(500)
    in_flight = h.request(HB)
    h.call("unsubscribe")
    assert h.one(RebalanceCallback).kind == REVOKE
    h.call("rebalance_done")
    h.request(HB)  # the leave
    h.respond(in_flight, hb_ok(5, {T_ID: [3]}))
    h.none(RebalanceCallback)
    assert h.sm.member_epoch == -1


def test_an_epoch_zero_reply_keeps_the_member_joining_with_full_requests():
    """The mock cluster answers epoch 0 while the partitions due to a new member are held by another."""
    h = harness()
    h.respond(join(h), hb_ok(0, {}))
    h.advance(500)
    request = h.request(HB)
    assert request.fields["member_epoch"] == 0 and request.fields["rebalance_timeout_ms"] > 0
    assert request.fields["subscribed_topic_names"] == ["t"] and request.fields["topic_partitions"] == []
    h.respond(request, hb_ok(4))
    h.advance(500)
    assert h.request(HB).fields["rebalance_timeout_ms"] == -1


def test_regex_only_subscription_sends_an_empty_name_list_and_the_combined_regex():
    h = harness()
    request = join(h, topics=("^a-.*", "^b-.*"))
    assert request.fields["subscribed_topic_names"] == []
    assert request.fields["subscribed_topic_regex"] == "(^a-.*)|(^b-.*)"
    h.respond(request, hb_ok(1, {T_ID: [0]}))
    assert h.take(RequestMetadata)[-1].topics is None  # regex: every topic's metadata resolves the id
    h.call("metadata_update", {"a-1": 1}, topic_ids={"a-1": T_ID})
    assert [(tp.topic, tp.partition) for tp in h.one(RebalanceCallback).partitions] == [("a-1", 0)]


def test_unsubscribe_of_a_static_member_leaves_for_good_with_epoch_minus_one():
    h = harness(group_instance_id="i-1")
    steady(h)
    h.call("unsubscribe")
    h.one(RebalanceCallback)
    h.call("rebalance_done")
    assert h.request(HB).fields["member_epoch"] == -1


def test_a_target_arriving_while_an_ack_is_in_flight_is_acknowledged_again():
    h = harness()
    steady(h)
    h.advance(500)
    beat = h.request(HB)
    h.respond(beat, hb_ok(2, {T_ID: [0, 1, 2]}))
    ack = assign_and_ack(h, [("t", 2)], epoch=2)
    # the coordinator moves on before answering the ack: the reply carries yet another target
    h.respond(ack, hb_ok(3, {T_ID: [0, 1, 2, 3]}))
    ack = assign_and_ack(h, [("t", 3)], epoch=3)
    assert ack.fields["topic_partitions"] == [(T_ID, [0, 1, 2, 3])]
    h.respond(ack, hb_ok(3))
    h.none(SendRequest, HB)


def test_partitions_resolved_while_an_ack_is_in_flight_get_their_own_ack():
    h = harness()
    steady(h)
    h.advance(500)
    h.respond(h.request(HB), hb_ok(2, {T_ID: [0, 1, 2], U_ID: [0]}))
    first_ack = assign_and_ack(h, [("t", 2)], epoch=2)  # u's id is not known yet
    assert first_ack.fields["topic_partitions"] == [(T_ID, [0, 1, 2])]
    h.call("metadata_update", {"t": 4, "u": 1}, topic_ids=IDS)
    cb = h.one(RebalanceCallback)
    assert [(tp.topic, tp.partition) for tp in cb.partitions] == [("u", 0)]
    h.call("rebalance_done")
    h.respond(fetch := h.request("OffsetFetch"), fetch_reply(fetch, {}))
    h.none(SendRequest, HB)  # one heartbeat at a time: the first ack is still out
    h.respond(first_ack, hb_ok(2))
    second_ack = h.request(HB)
    assert second_ack.fields["topic_partitions"] == sorted([(T_ID, [0, 1, 2]), (U_ID, [0])])


def test_the_revoke_commit_of_an_unsubscribe_carries_an_epoch_learnt_during_the_callback():
    h = harness(enable_auto_offset_store=False)
    steady(h)
    h.sm.store_offsets([TopicPartition("t", 1, 9)])
    h.advance(500)
    in_flight = h.request(HB)
    h.call("unsubscribe")
    assert h.one(RebalanceCallback).kind == REVOKE
    h.respond(in_flight, hb_ok(7, {T_ID: [0]}))  # a new target while leaving: not reconciled
    h.none(RebalanceCallback)
    h.call("rebalance_done")
    assert h.request("OffsetCommit").fields["generation_id"] == 7
    assert h.request(HB).fields["member_epoch"] == -1
