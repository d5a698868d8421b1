"""Runs in: pytest. The main side of the admin contract (kqactors.actors.admin.AdminMainActor) with a recording
context — no runtime, no broker: each admin call reaches its target (controller, coordinator, a broker, every
broker, the partitions' leaders), follows it when it moves (NOT_CONTROLLER, NOT_COORDINATOR, a leader change),
gives up on a connection that keeps failing, and every admin request gets exactly one ADMIN_RESULT, by its
deadline, saying what it was waiting for when it timed out."""

from __future__ import annotations

import time
from typing import Any

from kqactors.actors.admin import AdminMainActor, error_codes, moved
from kqactors.core.metadata import BrokerInfo, MetadataSnapshot, PartitionInfo, TopicInfo, snapshot_to_wire
from kqactors.errors import KafkaError
from kqactors.ops import admin as aops
from kqactors.ops import client as ops
from kqactors.runtime.op import REPLY, Op


class Context:
    """Just enough of ActorContext: records requests (answered by the test), timers (fired by the test) and
    replies."""

    name = "main"

    def __init__(self) -> None:
        self.requests: list[tuple[str, Op, Any]] = []
        self.replies: list[Op] = []
        self.timers: dict[int, tuple[float, Op]] = {}
        self.next_timer = 0

    def send(self, name, op, *, qid=0):
        pass

    def reply(self, request, reply):
        self.replies.append(reply)

    def request(self, name, op, on_reply, timeout):
        self.requests.append((name, op, on_reply))

    def timer(self, interval, op, *, repeat=False):
        self.next_timer += 1
        if not repeat:
            self.timers[self.next_timer] = (interval, op)
        return self.next_timer

    def cancel_timer(self, timer_id):
        return self.timers.pop(timer_id, None) is not None

    def spawn(self, name, factory, args):
        pass

    def stop(self, name):
        pass

    # ---- the test's side ---------------------------------------------------------------------------------
    def pending(self, kind: str | None = None) -> list[tuple[str, Op, Any]]:
        return [r for r in self.requests if kind is None or r[1].payload.get("kind") == kind]

    def answer(self, kind: str, result: Any = None, error: int = 0, to: str | None = None) -> str:
        """Answer the oldest pending request of ``kind`` (to broker ``to``); returns the broker it went to."""
        for index, (name, op, on_reply) in enumerate(self.requests):
            if op.payload.get("kind") == kind and (to is None or name == to):
                del self.requests[index]
                node = int(name.split("/")[1])
                on_reply(Op(ops.RESPONSE, {"error_code": error, "reason": "test" if error else "", "result": result,
                                           "broker_id": node}, flags=REPLY))
                return name
        raise AssertionError(f"no pending {kind} request (to {to}): {[(n, o.payload['kind']) for n, o, _ in self.requests]}")

    def fire(self, op_type: str, actor: AdminMainActor) -> None:
        """Fire every pending one-shot timer of ``op_type`` (the retries after their backoff)."""
        for timer_id, (_interval, op) in sorted(self.timers.items()):
            if op.type == op_type:
                del self.timers[timer_id]
                actor.handle(op)


def metadata(controller: int = 1, leaders: dict[int, int] | None = None, brokers=(1, 2, 3)) -> dict[str, Any]:
    topics = [TopicInfo("t", 0, {p: PartitionInfo(p, leader, 0, [leader], [leader])
                                 for p, leader in (leaders or {}).items()})] if leaders else []
    return snapshot_to_wire(MetadataSnapshot([BrokerInfo(b, "127.0.0.1", 9000 + b) for b in brokers], topics,
                                             controller, "cluster"))


def started(timeout_ms: int = 30000) -> tuple[AdminMainActor, Context]:
    ctx = Context()
    actor = AdminMainActor(ctx, {"bootstrap.servers": "127.0.0.1:9001", "retry.backoff.ms": 10,
                                 "socket.timeout.ms": timeout_ms})
    actor.on_start()
    ctx.answer("Metadata", metadata())  # the first refresh: brokers 1-3, controller 1
    return actor, ctx


def submit(actor: AdminMainActor, ctx: Context, op_type: str, *calls: dict[str, Any], timeout_ms: int = 30000) -> Op:
    request = Op(op_type, aops.request_payload(list(calls), timeout_ms), req_id=7)
    request.reply_to = ("app", 1, 1)
    actor.handle(request)
    return request


def result_of(ctx: Context) -> list[dict[str, Any]]:
    (reply,) = ctx.replies
    assert reply.type == aops.ADMIN_RESULT
    return reply.payload["results"]


def test_error_codes_and_moved() -> None:
    response = {"error_code": 0, "topics": [{"error_code": 41, "partitions": [{"error_code": 0}]},
                                            {"error_code": 41}]}
    assert error_codes(response) == [41, 41]
    assert moved(response, {KafkaError.NOT_CONTROLLER})
    assert not moved({"topics": [{"error_code": 41}, {"error_code": 36}]}, {KafkaError.NOT_CONTROLLER})
    assert not moved({"topics": []}, {KafkaError.NOT_CONTROLLER})


def test_a_call_follows_the_controller() -> None:
    actor, ctx = started()
    submit(actor, ctx, aops.CREATETOPICS, aops.call(["controller"], "admin:CreateTopics", {"topics": []}))
    assert ctx.answer("admin:CreateTopics", {"topics": [{"name": "a", "error_code": 41}]}) == "broker/1"
    ctx.fire("ADMIN_RETRY", actor)  # the controller is unknown now: fresh metadata first
    ctx.answer("Metadata", metadata(controller=2))
    assert ctx.answer("admin:CreateTopics", {"topics": [{"name": "a", "error_code": 0}]}) == "broker/2"
    (outcome,) = result_of(ctx)
    assert (outcome["error_code"], outcome["broker_id"], outcome["result"]["topics"][0]["error_code"]) == (0, 2, 0)
    assert outcome["node"] == [2, "127.0.0.1", 9002, None]


def test_a_call_follows_the_coordinator() -> None:
    actor, ctx = started()
    submit(actor, ctx, aops.DELETEGROUPS, aops.call(["coordinator", "g"], "admin:DeleteGroups", {"groups_names": ["g"]}))
    ctx.answer("admin:FindCoordinator", {"_version": 2, "error_code": 0, "node_id": 2, "host": "h", "port": 1})
    assert ctx.answer("admin:DeleteGroups", {"results": [{"group_id": "g", "error_code": 16}]}) == "broker/2"
    ctx.fire("ADMIN_RETRY", actor)
    ctx.answer("admin:FindCoordinator", {"_version": 4, "coordinators": [{"key": "g", "node_id": 3, "error_code": 0}]})
    assert ctx.answer("admin:DeleteGroups", {"results": [{"group_id": "g", "error_code": 0}]}) == "broker/3"
    assert result_of(ctx)[0]["broker_id"] == 3
    # the coordinator is cached: the next call goes straight to it
    ctx.replies.clear()
    submit(actor, ctx, aops.DELETEGROUPS, aops.call(["coordinator", "g"], "admin:DeleteGroups", {"groups_names": ["g"]}))
    assert not ctx.pending("admin:FindCoordinator")
    assert ctx.answer("admin:DeleteGroups", {"results": [{"group_id": "g", "error_code": 0}]}) == "broker/3"


def test_a_coordinator_that_is_loading_is_asked_again() -> None:
    actor, ctx = started()
    submit(actor, ctx, aops.LISTCONSUMERGROUPOFFSETS, aops.call(["coordinator", "g"], "admin:OffsetFetch", {}))
    ctx.answer("admin:FindCoordinator", {"error_code": 15, "node_id": -1})  # COORDINATOR_NOT_AVAILABLE
    ctx.fire("ADMIN_RETRY", actor)
    ctx.answer("admin:FindCoordinator", {"error_code": 0, "node_id": 1})
    ctx.answer("admin:OffsetFetch", {"error_code": 14, "topics": []})  # COORDINATOR_LOAD_IN_PROGRESS
    ctx.fire("ADMIN_RETRY", actor)
    ctx.answer("admin:FindCoordinator", {"error_code": 0, "node_id": 1})
    ctx.answer("admin:OffsetFetch", {"error_code": 0, "topics": []})
    assert result_of(ctx)[0]["error_code"] == 0


def test_every_broker_is_asked() -> None:
    actor, ctx = started()
    submit(actor, ctx, aops.LISTCONSUMERGROUPS, aops.call(["all"], "admin:ListGroups", {}))
    ctx.answer("Metadata", metadata())
    for node in (3, 1):
        ctx.answer("admin:ListGroups", {"error_code": 0, "groups": [{"group_id": f"g{node}"}]}, to=f"broker/{node}")
    assert not ctx.replies
    ctx.answer("admin:ListGroups", error=KafkaError._UNSUPPORTED_FEATURE, to="broker/2")
    (outcome,) = result_of(ctx)
    assert [(node, code) for node, code, _reason, _result in outcome["result"]] == \
        [(1, 0), (2, KafkaError._UNSUPPORTED_FEATURE), (3, 0)]


def test_rows_go_to_their_leaders_and_follow_a_move() -> None:
    actor, ctx = started()
    rows = [["t", 0, 5], ["t", 1, 7], ["t", 9, 1]]
    submit(actor, ctx, aops.DELETERECORDS, aops.call(["leaders"], "admin:DeleteRecords", {"timeout_ms": 1}, rows))
    ctx.answer("Metadata", metadata(leaders={0: 1, 1: 2}))
    first = {name: op.payload["args"] for name, op, _ in ctx.pending("admin:DeleteRecords")}
    assert first["broker/1"]["topics"] == [{"name": "t", "partitions": [{"partition_index": 0, "offset": 5}]}]
    assert first["broker/2"]["topics"] == [{"name": "t", "partitions": [{"partition_index": 1, "offset": 7}]}]

    def answer(partition: int, code: int, low: int) -> dict[str, Any]:
        return {"topics": [{"name": "t", "partitions": [{"partition_index": partition, "error_code": code,
                                                          "low_watermark": low}]}]}

    ctx.answer("admin:DeleteRecords", answer(1, 0, 7), to="broker/2")
    ctx.answer("admin:DeleteRecords", answer(0, KafkaError.NOT_LEADER_OR_FOLLOWER, -1), to="broker/1")
    ctx.fire("ADMIN_RETRY", actor)
    ctx.answer("Metadata", metadata(leaders={0: 3, 1: 2}))
    ctx.answer("admin:DeleteRecords", answer(0, 0, 5), to="broker/3")
    (outcome,) = result_of(ctx)
    assert outcome["result"]["rows"] == [["t", 0, 0, 5], ["t", 1, 0, 7], ["t", 9, KafkaError.UNKNOWN_TOPIC_OR_PART]]


def test_a_connection_that_keeps_failing_fails_the_call() -> None:
    actor, ctx = started()
    submit(actor, ctx, aops.DESCRIBECONFIGS, aops.call(["broker", 2], "admin:DescribeConfigs", {}))
    for _ in range(2):
        ctx.answer("admin:DescribeConfigs", error=KafkaError._TRANSPORT, to="broker/2")
        ctx.fire("ADMIN_RETRY", actor)
    ctx.answer("admin:DescribeConfigs", error=KafkaError._TRANSPORT, to="broker/2")
    assert result_of(ctx)[0]["error_code"] == KafkaError._TRANSPORT


def test_one_result_per_request_by_its_deadline() -> None:
    actor, ctx = started()
    submit(actor, ctx, aops.CREATETOPICS, aops.call(["controller"], "admin:CreateTopics", {}),
           aops.call(["broker", 3], "admin:DescribeConfigs", {}), timeout_ms=50)
    ctx.answer("admin:DescribeConfigs", {"results": []})
    assert not ctx.replies  # the first call is still out
    ctx.fire("ADMIN_EXPIRE", actor)
    first, second = result_of(ctx)
    assert (first["error_code"], first["reason"]) == (
        KafkaError._TIMED_OUT, "Failed while waiting for CreateTopics response from broker 1: Local: Timed out")
    assert second["error_code"] == 0
    ctx.answer("admin:CreateTopics", {"topics": []})  # a late answer: no second reply
    assert len(ctx.replies) == 1


def test_an_unknown_controller_is_waited_for_until_the_deadline() -> None:
    actor, ctx = started()
    actor.cache.controller_id = 0  # as the librdkafka mock cluster reports it: no such broker
    submit(actor, ctx, aops.DESCRIBECLUSTER, aops.call(["controller"], "admin:Metadata", {"topics": []}),
           timeout_ms=200)
    deadline = time.monotonic() + 2
    while not ctx.replies and time.monotonic() < deadline:
        for name, _op, _ in list(ctx.pending("Metadata")):
            ctx.answer("Metadata", metadata(controller=0), to=name)
        time.sleep(0.02)
        ctx.fire("ADMIN_RETRY", actor)
    (outcome,) = result_of(ctx)
    assert outcome["error_code"] == KafkaError._TIMED_OUT
    assert outcome["reason"] == "Failed while waiting for controller: Local: Timed out"


def test_a_request_without_calls_is_answered_at_once() -> None:
    actor, ctx = started()
    submit(actor, ctx, aops.DELETERECORDS)
    assert result_of(ctx) == []


def test_rows_whose_leader_is_unreachable_are_routed_again_once() -> None:
    actor, ctx = started()
    submit(actor, ctx, aops.LISTOFFSETS, aops.call(["leaders"], "ListOffsets", {"isolation_level": 0}, [["t", 0, -1]]))
    ctx.answer("Metadata", metadata(leaders={0: 1}))
    for _ in range(3):  # the leader's connection fails, and fails again when asked again
        ctx.answer("ListOffsets", error=KafkaError._TRANSPORT, to="broker/1")
        ctx.fire("ADMIN_RETRY", actor)
    ctx.answer("Metadata", metadata(leaders={0: 2}))  # it died: the partition moved
    ctx.answer("ListOffsets", {"partitions": [["t", 0, 0, 42, -1, 3]]}, to="broker/2")
    assert result_of(ctx)[0]["result"]["rows"] == [["t", 0, 0, 42, -1, 3]]
