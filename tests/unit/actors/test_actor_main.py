"""Unit tests for the main actor's logic with a recording context (no runtime, no broker)."""

from __future__ import annotations

import time

import pytest

from kqactors.actors.main import MainActor, parse_bootstrap
from kqactors.core.metadata import BrokerInfo, MetadataSnapshot, PartitionInfo, TopicInfo, snapshot_to_wire
from kqactors.errors import KafkaError
from kqactors.ops import client as ops
from kqactors.ops import producer as pops
from kqactors.runtime.op import REPLY, Op


class RecordingContext:
    """Just enough of ActorContext: records what the actor sends, spawns and asks."""

    name = "main"

    def __init__(self) -> None:
        self.sent: list[tuple[str, Op]] = []
        self.replies: list[tuple[Op, Op]] = []
        self.requests: list[tuple[str, Op, object]] = []
        self.spawned: list[str] = []
        self.stopped: list[str] = []

    def send(self, name, op, *, qid=0):
        self.sent.append((name, op))

    def reply(self, request, reply):
        self.replies.append((request, reply))

    def request(self, name, op, on_reply, timeout):
        self.requests.append((name, op, on_reply))
        return len(self.requests)

    def timer(self, interval, op, *, repeat=False):
        return 1

    def spawn(self, name, factory, args):
        self.spawned.append(name)

    def stop(self, name):
        self.stopped.append(name)

    def take(self, op_type):
        out = [(name, op.payload) for name, op in self.sent if op.type == op_type]
        self.sent = [(n, op) for n, op in self.sent if op.type != op_type]
        return out


def response(payload) -> Op:
    return Op(ops.RESPONSE, {"error_code": 0, "reason": "", "result": payload}, flags=REPLY)


def error_response(code) -> Op:
    return Op(ops.RESPONSE, {"error_code": code, "reason": "test"}, flags=REPLY)


def wire(leaders, epoch=0, brokers=(1, 2)):
    return snapshot_to_wire(MetadataSnapshot(
        [BrokerInfo(b, "127.0.0.1", 9000 + b) for b in brokers],
        [TopicInfo("t", 0, {p: PartitionInfo(p, leader, epoch, [leader], [leader]) for p, leader in
                            enumerate(leaders)})]))


def started(**config) -> tuple[MainActor, RecordingContext]:
    ctx = RecordingContext()
    actor = MainActor(ctx, {"bootstrap.servers": "127.0.0.1:9001,localhost:9002", **config})
    actor.on_start()
    return actor, ctx


def test_parse_bootstrap():
    assert parse_bootstrap("a:1, PLAINTEXT://b:2,c") == [("a", 1), ("b", 2), ("c", 9092)]
    assert parse_bootstrap("[::1]:9092") == [("::1", 9092)]
    for bad in ("a:0", "a:x", ",,"):
        with pytest.raises(ValueError):
            parse_bootstrap(bad)
    assert parse_bootstrap("") == parse_bootstrap(None) == parse_bootstrap("  ") == []  # no broker configured


def test_bootstrap_then_learned_brokers_replace_bootstrap_ones():
    actor, ctx = started()
    assert ctx.spawned == ["broker/-1", "broker/-2"]
    (name, op, on_reply) = ctx.requests[0]
    assert name in ("broker/-1", "broker/-2") and op.payload["kind"] == "Metadata"
    assert op.payload["args"]["topics"] == []  # brokers only: no topic known yet
    on_reply(response(wire([1], brokers=(1, 2))))
    assert ctx.spawned[2:] == ["broker/1", "broker/2"]
    assert sorted(ctx.stopped) == ["broker/-1", "broker/-2"]
    assert set(actor.brokers) == {1, 2}


def test_toppar_join_leader_moves_and_partition_membership():
    actor, ctx = started()
    ctx.requests[0][2](response(wire([], brokers=(1, 2))))
    join = Op(pops.TOPPAR_JOIN, {"topic": "t", "partition": 0}, reply_to=("toppar/t/0", 0, 0), sender="toppar/t/0")
    actor.handle(join)
    (_, reply) = ctx.replies[-1]
    assert reply.payload["broker_id"] == -1  # not known yet; a refresh for "t" was asked for
    actor._on_tick(None)
    name, op, on_reply = ctx.requests[-1]
    assert op.payload["args"]["topics"] == ["t"]
    on_reply(response(wire([1, 2])))
    assert ctx.take(pops.LEADER) == [("toppar/t/0", pops.leader_payload("t", 0, 1, 0))]
    assert ("broker/1", ops.partition_membership_payload("t", 0, 0)) in ctx.take(ops.PARTITION_JOIN)

    actor.handle(Op(ops.METADATA_REFRESH, ops.metadata_refresh_payload("t", "NOT_LEADER")))
    name, op, on_reply = ctx.requests[-1]
    on_reply(response(wire([2, 2], epoch=1)))
    assert ctx.take(pops.LEADER) == [("toppar/t/0", pops.leader_payload("t", 0, 2, 1))]
    assert ctx.take(ops.PARTITION_LEAVE) == [("broker/1", ops.partition_membership_payload("t", 0, 1))]


def test_failed_refresh_is_retried_fast():
    actor, ctx = started()
    ctx.requests[0][2](error_response(KafkaError._TRANSPORT))
    before = len(ctx.requests)
    actor.scheduler._fast_at = 0.0  # pretend the fast backoff elapsed
    actor._on_tick(None)
    assert len(ctx.requests) == before + 1


def test_init_producer_id_retries_after_retriable_errors_and_broadcasts_pid():
    actor, ctx = started(**{"enable.idempotence": True, "retry.backoff.ms": 1})
    ctx.requests[0][2](response(wire([1])))
    actor.toppars[("t", 0)] = "toppar/t/0"
    actor.handle(Op(ops.BROKER_STATE, {"node_id": 1, "state": "UP"}))
    pid_requests = [r for r in ctx.requests if r[1].payload["kind"] == "InitProducerId"]
    assert len(pid_requests) == 1
    pid_requests[0][2](error_response(KafkaError._DESTROY))  # its broker was retired meanwhile
    assert actor.idempotent and actor.producer_id == -1
    actor.pid_retry_at = 0.0
    actor._on_tick(None)
    pid_requests = [r for r in ctx.requests if r[1].payload["kind"] == "InitProducerId"]
    assert len(pid_requests) == 2
    pid_requests[1][2](response({"error_code": 0, "producer_id": 42, "producer_epoch": 3}))
    assert ("toppar/t/0", pops.pid_payload(42, 3)) in ctx.take(pops.PID)

    # an epoch bump: every toppar drains first, then the epoch is bumped locally, once
    actor.toppars[("t", 1)] = "toppar/t/1"
    actor.handle(Op(pops.PID_BUMP, {"producer_id": 42, "epoch": 3, "reason": "x"}))
    actor.handle(Op(pops.PID_BUMP, {"producer_id": 42, "epoch": 3, "reason": "x"}))
    drains = ctx.take(pops.PID)
    assert sorted(name for name, _ in drains) == ["toppar/t/0", "toppar/t/1"]
    assert all(p["drain"] and p["producer_id"] == -1 for _, p in drains)
    actor.handle(Op(pops.DRAINED, {"topic": "t", "partition": 0}))
    assert ctx.take(pops.PID) == []  # toppar/t/1 still has requests in flight
    actor.handle(Op(pops.DRAINED, {"topic": "t", "partition": 1}))
    bumped = ctx.take(pops.PID)
    assert sorted(bumped) == [("app", pops.pid_payload(42, 4)), ("toppar/t/0", pops.pid_payload(42, 4)),
                              ("toppar/t/1", pops.pid_payload(42, 4))]
    assert len([r for r in ctx.requests if r[1].payload["kind"] == "InitProducerId"]) == 2  # no new request
    actor.handle(Op(pops.PID_BUMP, {"producer_id": 42, "epoch": 3, "reason": "late"}))  # stale: ignored
    assert ctx.take(pops.PID) == []


def test_drain_gives_up_waiting_after_the_socket_timeout():
    actor, ctx = started(**{"enable.idempotence": True})
    actor.toppars[("t", 0)] = "toppar/t/0"
    actor._set_pid(7, 0)
    ctx.take(pops.PID)
    actor.handle(Op(pops.PID_BUMP, {"producer_id": 7, "epoch": 0, "reason": "x"}))
    ctx.take(pops.PID)
    actor.drain_deadline = 0.0
    actor._on_tick(None)
    assert ("toppar/t/0", pops.pid_payload(7, 1)) in ctx.take(pops.PID)


def test_fatal_init_producer_id_error_reaches_the_app():
    actor, ctx = started(**{"enable.idempotence": True})
    ctx.requests[0][2](response(wire([1])))
    actor.handle(Op(ops.BROKER_STATE, {"node_id": 1, "state": "UP"}))
    pid_request = [r for r in ctx.requests if r[1].payload["kind"] == "InitProducerId"][0]
    pid_request[2](response({"error_code": 87, "producer_id": -1, "producer_epoch": -1}))
    (err,) = ctx.take(ops.ERR)
    assert err[0] == "app" and err[1]["code"] == 87 and err[1]["fatal"]


def test_all_brokers_down_reported_once():
    actor, ctx = started()
    for node_id in (-1, -2, -1):
        actor.handle(Op(ops.BROKER_STATE, {"node_id": node_id, "state": "DOWN"}))
    errs = ctx.take(ops.ERR)
    assert [e[1]["code"] for e in errs] == [KafkaError._ALL_BROKERS_DOWN]


def test_metadata_requests_follow_allow_auto_create_topics():
    for allowed in (True, False):
        actor, ctx = started(**{"allow.auto.create.topics": allowed})
        ctx.requests[0][2](response(wire([1])))
        actor.handle(Op(ops.METADATA_REFRESH, ops.metadata_refresh_payload("new", "produce")))
        (_, refresh, _) = ctx.requests[-1]
        assert refresh.payload["args"] == {"topics": ["new"], "allow_auto_create": allowed}
        # the producer's look-up asks to create; the property has the last word
        actor.handle(Op(ops.METADATA, {"topics": ["other"], "allow_auto_create": True}, reply_to=("app", 1, 0)))
        assert ctx.requests[-1][1].payload["args"]["allow_auto_create"] is allowed
        # list_topics() never creates
        actor.handle(Op(ops.METADATA, {"topics": ["x"], "allow_auto_create": False}, reply_to=("app", 1, 0)))
        assert ctx.requests[-1][1].payload["args"]["allow_auto_create"] is False
        # the group's requests do not say: the property decides
        actor.handle(Op(ops.METADATA, {"topics": ["sub"]}, reply_to=("cgrp", 1, 0)))
        assert ctx.requests[-1][1].payload["args"]["allow_auto_create"] is allowed


def test_cache_entries_older_than_metadata_max_age_expire():
    actor, ctx = started(**{"metadata.max.age.ms": 1000, "debug": "metadata"})
    ctx.requests[0][2](response(wire([1, 2])))
    assert set(actor.cache.topics) == {"t"}
    actor._expire_metadata(time.monotonic() + 0.5)
    assert set(actor.cache.topics) == {"t"}
    actor._expire_metadata(time.monotonic() + 1.5)
    assert actor.cache.topics == {}
    logs = [p["message"] for _, p in ctx.take(ops.LOG)]
    assert "[thrd:main]: Expired 1 entries from metadata cache (0 entries remain)" in logs
    assert ctx.take(pops.LEADER) == [] and ctx.take(ops.PARTITION_LEAVE) == []  # partitions keep their leaders
    # a partition that joins afterwards asks for fresh metadata
    before = len(ctx.requests)
    actor.handle(Op(pops.TOPPAR_JOIN, {"topic": "t", "partition": 0}, sender="toppar/t/0"))
    actor._on_tick(None)
    assert ctx.requests[before][1].payload["args"]["topics"] == ["t"]


def test_debug_contexts_log_brokers_metadata_and_leader_changes():
    actor, ctx = started(debug="broker,topic,metadata")
    ctx.requests[0][2](response(wire([1, 2])))
    logs = [(p["fac"], p["message"].removeprefix("[thrd:main]: ")) for _, p in ctx.take(ops.LOG)]
    assert ("BROKER", "127.0.0.1:9001/bootstrap: Added new broker with NodeId -1") in logs
    assert ("BROKER", "127.0.0.1:9001/1: Added new broker with NodeId 1") in logs
    assert ("METADATA", "Received metadata: 2 broker(s), 1 topic(s) (controller -1)") in logs
    assert ("PARTCNT", "Topic t partition count changed from 0 to 2") in logs
    assert ("TOPBRK", "Topic t [1]: leader changed from broker -1 to 2 (leader epoch 0)") in logs
    quiet, ctx = started()
    ctx.requests[0][2](response(wire([1, 2])))
    assert ctx.take(ops.LOG) == []


def test_a_leader_whose_broker_comes_back_is_routed_again():
    """Broker 1 down: metadata lists the leader of t[0] as 1 but not broker 1 itself, so the toppar hears
    broker -1. When broker 1 is listed again the leader has not changed, yet the toppar must hear of it."""
    actor, ctx = started()
    ctx.requests[0][2](response(wire([], brokers=(2,))))
    actor.handle(Op(pops.TOPPAR_JOIN, {"topic": "t", "partition": 0}, sender="toppar/t/0"))
    actor._on_tick(None)
    ctx.requests[-1][2](response(wire([1], brokers=(2,))))
    assert {payload["broker_id"] for _, payload in ctx.take(pops.LEADER)} == {-1}  # the join's answer, the change
    actor.handle(Op(ops.METADATA_REFRESH, ops.metadata_refresh_payload("t", "refresh")))
    ctx.requests[-1][2](response(wire([1], brokers=(1, 2))))
    assert ctx.take(pops.LEADER) == [("toppar/t/0", pops.leader_payload("t", 0, 1, 0))]
    assert ("broker/1", ops.partition_membership_payload("t", 0, 0)) in ctx.take(ops.PARTITION_JOIN)


def _bootstrap_up_with_the_apps_lookup_behind_mains() -> tuple[MainActor, RecordingContext]:
    """Start-up as it runs: main's brokers-only request, then the app's topic look-up, both written to the one
    bootstrap connection."""
    ctx = RecordingContext()
    actor = MainActor(ctx, {"bootstrap.servers": "127.0.0.1:9001"})
    actor.on_start()
    actor.handle(Op(ops.BROKER_STATE, {"node_id": -1, "state": "UP"}))
    actor.handle(Op(ops.METADATA, {"topics": ["t"]}, reply_to=("app", 1, 0)))
    assert [name for name, _, _ in ctx.requests] == ["broker/-1", "broker/-1"]
    return actor, ctx


def test_a_replaced_bootstrap_broker_answers_the_lookups_written_to_it_first():
    actor, ctx = _bootstrap_up_with_the_apps_lookup_behind_mains()
    ctx.requests[0][2](response(wire([], brokers=(1,))))  # brokers only
    assert ctx.spawned == ["broker/-1", "broker/1"]
    assert ctx.stopped == []  # the app's look-up is still on its connection: not failed over to broker/1
    assert actor._pick_broker().name == "broker/1"  # nothing new goes to it
    ctx.requests[1][2](response(wire([0])))  # the app's look-up, answered by the bootstrap connection
    ((request, reply),) = ctx.replies
    assert reply.payload["error_code"] == 0 and reply.payload["metadata"]["topics"][0][0] == "t"
    assert ctx.stopped == ["broker/-1"]
    assert len(ctx.requests) == 2  # no retry elsewhere


def test_a_replaced_bootstrap_broker_that_does_not_answer_is_stopped_after_the_wait():
    actor, ctx = _bootstrap_up_with_the_apps_lookup_behind_mains()
    ctx.requests[0][2](response(wire([], brokers=(1,))))
    actor._retire_bootstrap_brokers(time.monotonic() + 0.5)
    assert ctx.stopped == []
    actor._retire_bootstrap_brokers(time.monotonic() + 1.5)
    assert ctx.stopped == ["broker/-1"]
    # the look-up it held fails over as before: the broker actor's stop fails it with _TRANSPORT
    ctx.requests[1][2](error_response(KafkaError._TRANSPORT))
    assert ctx.requests[-1][0] == "broker/1" and ctx.replies == []
    assert ctx.stopped == ["broker/-1"]  # stopped once


def test_a_replaced_bootstrap_broker_not_up_is_stopped_at_once():
    ctx = RecordingContext()
    actor = MainActor(ctx, {"bootstrap.servers": "127.0.0.1:9001"})
    actor.on_start()
    actor.handle(Op(ops.METADATA, {"topics": ["t"]}, reply_to=("app", 1, 0)))
    ctx.requests[0][2](response(wire([], brokers=(1,))))
    assert ctx.stopped == ["broker/-1"]


def test_partitions_of_a_new_topic_joining_ask_for_its_metadata_at_once_and_once():
    actor, ctx = started()
    ctx.requests[0][2](response(wire([], brokers=(1,))))  # bootstrap done, topic t unknown
    before = len(ctx.requests)
    for partition in range(3):  # a consumer's assign(): its partitions join before main knows the topic
        actor.handle(Op(pops.TOPPAR_JOIN, {"topic": "t", "partition": partition}, sender=f"ctoppar/t/{partition}"))
    # no tick needed, and the joins behind the first one wait for its answer instead of asking again
    assert [op.payload["args"]["topics"] for _, op, _ in ctx.requests[before:]] == [["t"]]
    ctx.requests[-1][2](response(wire([1, 1, 1], brokers=(1,))))
    leaders = ctx.take(pops.LEADER)
    assert sorted(name for name, payload in leaders if payload["broker_id"] == 1) == [
        "ctoppar/t/0", "ctoppar/t/1", "ctoppar/t/2"]
    actor._on_tick(None)
    assert len(ctx.requests) == before + 1  # nothing left to ask


def test_a_topic_joining_while_the_bootstrap_request_is_out_is_asked_for_when_it_answers():
    actor, ctx = started()
    # a consumer assigned right after start: its partition joins while main's first (brokers-only) request is out
    actor.handle(Op(pops.TOPPAR_JOIN, {"topic": "t", "partition": 0}, sender="ctoppar/t/0"))
    assert len(ctx.requests) == 1  # one request at a time: the topic waits for the answer
    ctx.requests[0][2](response(wire([], brokers=(1,))))
    # asked for at that answer, not at main's next tick (up to 50 ms later)
    assert [op.payload["args"]["topics"] for _, op, _ in ctx.requests[1:]] == [["t"]]
