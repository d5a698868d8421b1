"""Runs in: the main host. Owns ``AdminMainActor``, an AdminClient's ``main``: the MainActor (bootstrap, metadata,
broker registry) that also serves admin requests (docs/admin-ops.md): it routes each planned protocol call to
its target — the controller, a group's coordinator (FindCoordinator, cached), a given broker, any broker, every
broker, the partitions' leaders — and retries until the request timeout when the target moved or was not
reachable: NOT_CONTROLLER (fresh metadata, next controller), NOT_COORDINATOR / COORDINATOR_NOT_AVAILABLE /
COORDINATOR_LOAD_IN_PROGRESS (the coordinator looked up again), a leader change of a partition (fresh metadata,
that partition resent to its new leader) and a lost connection. Each admin request gets exactly one
ADMIN_RESULT, by its deadline.

Ops in:  the admin request ops of kqactors.ops.admin (app), plus MainActor's.
Ops out: REQUEST (broker/N), ADMIN_RESULT (app), plus MainActor's.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Callable
from typing import Any

from kqactors.actors.main import BROKER_FACTORY, MainActor
from kqactors.errors import KafkaError
from kqactors.ops import admin as aops
from kqactors.ops import client as ops
from kqactors.runtime.actor import ActorContext, on
from kqactors.runtime.op import Op

log = logging.getLogger(__name__)

_EXPIRE = "ADMIN_EXPIRE"
_RETRY = "ADMIN_RETRY"
# a call that failed with these may succeed when sent again (to the same target, or to where it moved)
_TRANSIENT = {KafkaError._TRANSPORT, KafkaError._DESTROY, KafkaError._RESOLVE, KafkaError._TIMED_OUT}
_CONTROLLER_MOVED = {KafkaError.NOT_CONTROLLER}
_COORDINATOR_MOVED = {KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_NOT_AVAILABLE,
                      KafkaError.COORDINATOR_LOAD_IN_PROGRESS}
_LEADER_MOVED = {KafkaError.NOT_LEADER_OR_FOLLOWER, KafkaError.LEADER_NOT_AVAILABLE, KafkaError.FENCED_LEADER_EPOCH,
                 KafkaError.UNKNOWN_LEADER_EPOCH}
_BACKOFF_MAX_S = 1.0
# a call whose connection failed this often in a row fails with that error: a broker that drops the connection
# on a request it cannot serve would otherwise be asked again until the request timeout
_TRANSPORT_ATTEMPTS = 3


def error_codes(result: Any) -> list[int]:
    """Every non-zero ``error_code`` in a decoded response (nested dicts and lists), outermost first."""
    found: list[int] = []
    stack = [result]
    while stack:
        value = stack.pop(0)
        if isinstance(value, dict):
            code = value.get("error_code")
            if isinstance(code, int) and code:
                found.append(code)
            stack.extend(v for v in value.values() if isinstance(v, (dict, list)))
        elif isinstance(value, list):
            stack.extend(v for v in value if isinstance(v, (dict, list)))
    return found


def moved(result: Any, codes: set[int]) -> bool:
    """True when a response says only that its target was the wrong broker (every error in ``codes``)."""
    found = error_codes(result)
    return bool(found) and all(code in codes for code in found)


def rows_args(kind: str, common: dict[str, Any], rows: list[list[Any]]) -> dict[str, Any]:
    """The args of one leader's request for ``rows`` ([topic, partition, value])."""
    by_topic: dict[str, list[list[Any]]] = {}
    for topic, partition, value in rows:
        by_topic.setdefault(topic, []).append([partition, value])
    if kind == "ListOffsets":
        return {**common, "topics": [[t, [[p, ts, -1] for p, ts in parts]] for t, parts in by_topic.items()]}
    return {**common, "topics": [{"name": t, "partitions": [{"partition_index": p, "offset": off} for p, off in parts]}
                                 for t, parts in by_topic.items()]}


def rows_result(kind: str, result: Any) -> dict[tuple[str, int], list[Any]]:
    """{(topic, partition): [error_code, *values]} from one leader's response."""
    out: dict[tuple[str, int], list[Any]] = {}
    if kind == "ListOffsets":
        for topic, partition, code, offset, timestamp, epoch in (result or {}).get("partitions", ()):
            out[(topic, partition)] = [code, offset, timestamp, epoch]
        return out
    for topic in (result or {}).get("topics", ()):
        for part in topic["partitions"]:
            out[(topic["name"], part["partition_index"])] = [part["error_code"], part["low_watermark"]]
    return out


class _Job:
    """One admin request: its calls' outcomes, filled as they complete, and its deadline."""

    __slots__ = ("op", "deadline", "outcomes", "pending", "timer", "done", "waiting", "partial")

    def __init__(self, op: Op, deadline: float, count: int) -> None:
        self.op = op
        self.deadline = deadline
        self.outcomes: list[dict[str, Any] | None] = [None] * count
        self.pending = count
        self.timer: int | None = None
        self.done = False
        self.waiting: dict[int, str] = {}  # call index → what it waits for (the timeout's reason)
        # call index → completes that call with what it has so far, when the deadline comes first (a call to
        # several leaders keeps the partitions that were answered)
        self.partial: dict[int, Callable[[], None]] = {}


class _Call:
    """One protocol request of a job to one target, sent again (after a backoff) while its target moves."""

    __slots__ = ("job", "target", "kind", "args", "finish", "attempts", "finished", "lost", "slot")

    def __init__(self, job: _Job, target: list[Any], kind: str, args: dict[str, Any],
                 finish: Callable[[int, str, Any, int], None], slot: int) -> None:
        self.job = job
        self.slot = slot  # the index of the job's call this request serves
        self.target = target
        self.kind = kind
        self.args = args
        self.finish = finish  # finish(error_code, reason, result, broker_id), called once
        self.attempts = 0  # retries so far (the backoff doubles with each)
        self.finished = False
        self.lost = 0  # connections lost under this call in a row


class AdminMainActor(MainActor):
    """An AdminClient's ``main``: MainActor plus the admin request ops (no toppars, no idempotence)."""

    # KIND stays "producer": librdkafka's admin client is a producer handle, and its statistics say so

    def __init__(self, ctx: ActorContext, config: dict[str, Any] | None = None, app: str = "app",
                 broker_factory: str = BROKER_FACTORY) -> None:
        super().__init__(ctx, config, app, broker_factory)
        self.idempotent = False
        self.backoff_s = int(self.config.get("retry.backoff.ms", 100) or 100) / 1000
        self.jobs: dict[int, _Job] = {}
        self.job_ids = itertools.count(1)
        self.coordinators: dict[str, int] = {}  # group id → coordinator node id (FindCoordinator answers)
        self.waiting_metadata: list[Callable[[], None]] = []
        self.metadata_in_flight = False
        self.retries: dict[int, Callable[[], None]] = {}
        self.retry_ids = itertools.count(1)
        for op_type in aops.ADMIN_OPS:
            self._handlers[op_type] = self._on_admin_request

    # ---- jobs --------------------------------------------------------------------------------------------

    def _on_admin_request(self, op: Op) -> None:
        payload = op.payload or {}
        calls = list(payload.get("calls") or ())
        timeout_s = max(1, int(payload.get("request_timeout_ms") or self.socket_timeout_ms)) / 1000
        job = _Job(op, time.monotonic() + timeout_s, len(calls))
        job_id = next(self.job_ids)
        self.jobs[job_id] = job
        job.timer = self.ctx.timer(timeout_s, Op(_EXPIRE, {"job": job_id}))
        if not calls:
            self._finish_job(job_id)
            return
        for index, entry in enumerate(calls):
            self._start_call(job_id, job, index, entry)

    def _start_call(self, job_id: int, job: _Job, index: int, entry: dict[str, Any]) -> None:
        def finish(code: int, reason: str, result: Any, broker_id: int) -> None:
            if job.done or job.outcomes[index] is not None:
                return
            job.outcomes[index] = aops.outcome(code, reason, result, broker_id, self._node(broker_id))
            job.pending -= 1
            if job.pending <= 0:
                self._finish_job(job_id)

        target, kind, args = list(entry.get("target") or ["any"]), entry.get("kind", ""), entry.get("args") or {}
        if target[0] == "all":
            self._fan_out(job, kind, args, finish, index)
        elif target[0] == "leaders":
            self._to_leaders(job, kind, args, [list(row) for row in entry.get("rows") or ()], finish, index)
        else:
            self._send(_Call(job, target, kind, args, finish, index))

    def _node(self, node_id: int) -> list[Any] | None:
        """[node_id, host, port, rack] of a known broker (for results naming their coordinator)."""
        handle = self.brokers.get(node_id)
        if handle is None or node_id < 0:
            return None
        info = self.cache.brokers.get(node_id)
        return [node_id, handle.host, handle.port, getattr(info, "rack", None)]

    def _finish_job(self, job_id: int) -> None:
        job = self.jobs.pop(job_id, None)
        if job is None or job.done:
            return
        job.done = True
        if job.timer is not None:
            self.ctx.cancel_timer(job.timer)
        results = [o if o is not None else aops.outcome(
            KafkaError._TIMED_OUT, f"Failed while waiting for {job.waiting.get(i, 'response')}: Local: Timed out")
            for i, o in enumerate(job.outcomes)]
        self.ctx.reply(job.op, Op(aops.ADMIN_RESULT, {"results": results}))

    @on(_EXPIRE)
    def _on_expire(self, op: Op) -> None:
        job_id = (op.payload or {}).get("job")
        job = self.jobs.get(job_id)
        if job is not None:
            job.timer = None
            for slot, complete in list(job.partial.items()):
                if not job.done and job.outcomes[slot] is None:
                    complete()
            self._finish_job(job_id)

    # ---- one call to one target ----------------------------------------------------------------------------

    def _remaining_ms(self, job: _Job) -> int:
        return int((job.deadline - time.monotonic()) * 1000)

    def _send(self, call: _Call) -> None:
        """Resolve the call's target to a broker and send it; called again for each retry."""
        if call.finished or call.job.done:
            return
        remaining = self._remaining_ms(call.job)
        if remaining <= 0:
            what = call.job.waiting.get(call.slot, call.target[0])
            self._end(call, KafkaError._TIMED_OUT, f"Failed while waiting for {what}: Local: Timed out", None, -1)
            return
        kind, arg = call.target[0], call.target[1] if len(call.target) > 1 else None
        call.job.waiting[call.slot] = {"controller": "controller", "coordinator": "coordinator",
                                       "broker": f"broker {arg}", "leaders": "partition leaders",
                                       "all": "brokers"}.get(kind, "a broker")
        if kind == "controller":
            node = self.cache.controller_id
            if node < 0 or node not in self.brokers:
                self._after_metadata(call, lambda: self._send_known(call, self.cache.controller_id, "controller"))
                return
        elif kind == "coordinator":
            node = self.coordinators.get(arg, -1)
            if node < 0:
                self._find_coordinator(call)
                return
            if node not in self.brokers:
                self._after_metadata(call, lambda: self._send_known(call, self.coordinators.get(arg, -1),
                                                                    "coordinator"))
                return
        elif kind == "broker":
            node = int(arg)
            if node not in self.brokers:
                self._after_metadata(call, lambda: self._send_known(call, node, f"broker {node}"))
                return
        else:
            handle = self._pick_broker()
            if handle is None:
                self._retry(call)
                return
            node = handle.node_id
        self._transmit(call, node)

    def _send_known(self, call: _Call, node: int, what: str) -> None:
        if call.finished or call.job.done:
            return
        if node >= 0 and node in self.brokers:
            self._transmit(call, node)
        else:
            log.debug("admin %s: %s %s not known yet", call.kind, what, node)
            self._retry(call)

    def _transmit(self, call: _Call, node: int) -> None:
        call.job.waiting[call.slot] = f"{call.kind.split(':')[-1]} response from broker {node}"
        remaining = max(1, self._remaining_ms(call.job))
        payload = {"kind": call.kind, "args": call.args, "timeout_ms": remaining}
        self.ctx.request(ops.broker_name(node), Op(ops.REQUEST, payload),
                         lambda reply: self._on_reply(call, node, reply), remaining / 1000 + 1.0)

    def _on_reply(self, call: _Call, node: int, reply: Op) -> None:
        if call.finished or call.job.done:
            return
        error, reason, result = ops.unpack_response(reply)
        broker_id = int((reply.payload or {}).get("broker_id", node)) if reply.error is None else node
        target = call.target[0]
        if error in _TRANSIENT and error != KafkaError._TIMED_OUT:
            call.lost += 1
            if call.lost < _TRANSPORT_ATTEMPTS:
                if target == "coordinator":
                    self.coordinators.pop(call.target[1], None)
                elif target == "controller":
                    self.cache.controller_id = -1
                self._retry(call)
                return
            self._end(call, error, reason, result, broker_id)
            return
        call.lost = 0
        if not error and target == "controller" and moved(result, _CONTROLLER_MOVED):
            self.cache.controller_id = -1  # ask the cluster where it went
            self._retry(call)
            return
        if not error and target == "coordinator" and moved(result, _COORDINATOR_MOVED):
            self.coordinators.pop(call.target[1], None)
            self._retry(call)
            return
        self._end(call, error, reason, result, broker_id)

    def _end(self, call: _Call, error: int, reason: str, result: Any, broker_id: int) -> None:
        if not call.finished:
            call.finished = True
            call.finish(error, reason, result, broker_id)

    def _retry(self, call: _Call, then: Callable[[], None] | None = None) -> None:
        """Run ``then`` (default: send the call again) after a backoff (retry.backoff.ms, doubling to 1 s), or end
        the call with _TIMED_OUT when the deadline would pass first."""
        delay = min(_BACKOFF_MAX_S, self.backoff_s * (2 ** min(call.attempts, 6)))
        if time.monotonic() + delay >= call.job.deadline:
            what = call.job.waiting.get(call.slot, call.target[0])
            self._end(call, KafkaError._TIMED_OUT, f"Failed while waiting for {what}: Local: Timed out", None, -1)
            return
        call.attempts += 1
        retry_id = next(self.retry_ids)
        self.retries[retry_id] = then if then is not None else (lambda: self._send(call))
        self.ctx.timer(delay, Op(_RETRY, {"retry": retry_id}))

    @on(_RETRY)
    def _on_retry(self, op: Op) -> None:
        resume = self.retries.pop((op.payload or {}).get("retry"), None)
        if resume is not None:
            resume()

    # ---- targets -----------------------------------------------------------------------------------------

    def _after_metadata(self, call: _Call, then: Callable[[], None], topics: list[str] | None = None) -> None:
        """Fetch fresh metadata (brokers and controller, plus ``topics``), then call ``then``; when the metadata
        request fails, try again after a backoff (``call``'s deadline ends it)."""
        def again() -> None:
            if not (call.finished or call.job.done):
                self._after_metadata(call, then, topics)

        if topics:
            def on_topics(reply: Op, requested: list[str] | None) -> None:
                error, _reason, result = ops.unpack_response(reply)
                if error:
                    self._retry(call, again)
                    return
                self._apply_metadata(result, requested, time.monotonic())
                then()

            if not self._request_metadata(topics, on_topics, max(1, self._remaining_ms(call.job))):
                self._retry(call, again)
            return
        self.waiting_metadata.append(then)
        if self.metadata_in_flight:
            return
        self.metadata_in_flight = True

        def on_reply(reply: Op, requested: list[str] | None) -> None:
            self.metadata_in_flight = False
            error, _reason, result = ops.unpack_response(reply)
            waiting, self.waiting_metadata = self.waiting_metadata, []
            if not error:
                self._apply_metadata(result, requested, time.monotonic())
            for resume in waiting:
                resume()  # each checks what it waited for, and retries when it is still missing

        timeout_ms = max(1, min(self.socket_timeout_ms, self._remaining_ms(call.job)))
        if not self._request_metadata([], on_reply, timeout_ms):
            self.metadata_in_flight = False
            self.waiting_metadata.remove(then)
            self._retry(call, again)

    def _find_coordinator(self, call: _Call) -> None:
        group = call.target[1]

        def found(code: int, reason: str, result: Any, _broker_id: int) -> None:
            if call.finished or call.job.done:
                return
            if not code and result is not None:
                entry = (result.get("coordinators") or [result])[0]
                code, node = int(entry.get("error_code", 0)), int(entry.get("node_id", -1))
                if not code and node >= 0:
                    self.coordinators[group] = node
                    self._send(call)
                    return
                reason = entry.get("error_message") or reason
            if code in _TRANSIENT or code in _COORDINATOR_MOVED:
                self._retry(call)
                return
            self._end(call, code, reason or f"FindCoordinator({group}) failed", None, -1)

        self._send(_Call(call.job, ["any"], "admin:FindCoordinator", {"key": group, "key_type": 0}, found, call.slot))

    def _fan_out(self, job: _Job, kind: str, args: dict[str, Any], finish: Callable[..., None], slot: int) -> None:
        """One request per broker of the cluster (from fresh metadata); the outcome lists every broker's."""
        probe = _Call(job, ["all"], kind, args, lambda code, reason, _r, _b: finish(code, reason, None, -1), slot)

        def with_brokers() -> None:
            nodes = sorted(node for node in self.cache.brokers if node in self.brokers)
            if not nodes:
                self._retry(probe, lambda: self._after_metadata(probe, with_brokers))
                return
            answers: dict[int, list[Any]] = {}

            def one(node: int) -> Callable[[int, str, Any, int], None]:
                def done(code: int, reason: str, result: Any, _broker_id: int) -> None:
                    answers[node] = [node, code, reason, result]
                    if len(answers) == len(nodes):
                        finish(0, "", [answers[n] for n in nodes], -1)
                return done

            def partial() -> None:  # at the deadline: the brokers that answered, a timeout for the others
                what = kind.split(":")[-1]
                finish(0, "", [answers.get(n) or [n, KafkaError._TIMED_OUT,
                                                  f"Failed while waiting for {what} response from broker {n}: "
                                                  "Local: Timed out", None] for n in nodes], -1)

            job.partial[slot] = partial
            for node in nodes:
                self._send(_Call(job, ["broker", node], kind, args, one(node), slot))

        self._after_metadata(probe, with_brokers)

    def _to_leaders(self, job: _Job, kind: str, common: dict[str, Any], rows: list[list[Any]],
                    finish: Callable[..., None], slot: int) -> None:
        """Each row to its partition's leader, one request per leader; rows whose leader moved go again with
        fresh metadata until they succeed, fail for good or the deadline is near (a row whose leader could not
        be reached goes again once)."""
        order = [(topic, partition) for topic, partition, _value in rows]
        values = {(topic, partition): value for topic, partition, value in rows}
        topics = sorted(values and {topic for topic, _partition in values})
        answers: dict[tuple[str, int], list[Any]] = {}
        pending: set[tuple[str, int]] = set(order)
        rerouted: set[tuple[str, int]] = set()  # rows whose leader's connection failed, sent again once

        def complete() -> None:
            finish(0, "", {"rows": [[t, p, *answers.get((t, p), [KafkaError._TIMED_OUT])] for t, p in order]}, -1)

        def answer(key: tuple[str, int], found: list[Any]) -> None:
            answers[key] = found
            if found[0] in _TRANSIENT and key not in rerouted:
                rerouted.add(key)  # the leader may have died: ask the metadata where the partition went
            elif found[0] not in _LEADER_MOVED:
                pending.discard(key)

        def route() -> None:
            if job.done:
                return
            by_leader: dict[int, list[list[Any]]] = {}
            for key in sorted(pending):
                topic, partition = key
                if topic not in self.cache.topics or self.cache.topic_error(topic):
                    answer(key, [self.cache.topic_error(topic) or KafkaError.UNKNOWN_TOPIC_OR_PART])
                elif partition >= self.cache.partition_count(topic):
                    answer(key, [KafkaError.UNKNOWN_TOPIC_OR_PART])
                elif self.cache.leader(topic, partition) not in self.brokers:
                    answer(key, [KafkaError.LEADER_NOT_AVAILABLE])
                else:
                    by_leader.setdefault(self.cache.leader(topic, partition), []).append([topic, partition,
                                                                                          values[key]])
            if not by_leader:
                settle()
                return
            outstanding = [len(by_leader)]
            for leader, leader_rows in by_leader.items():
                def done(code: int, _reason: str, result: Any, _broker_id: int,
                         leader_rows: list[list[Any]] = leader_rows) -> None:
                    found = rows_result(kind, result) if not code else {}
                    for topic, partition, _value in leader_rows:
                        answer((topic, partition), found.get((topic, partition)) or [code or KafkaError._BAD_MSG])
                    outstanding[0] -= 1
                    if outstanding[0] == 0:
                        settle()

                self._send(_Call(job, ["broker", leader], kind, rows_args(kind, common, leader_rows), done, slot))

        def settle() -> None:
            if not pending or time.monotonic() + self.backoff_s >= job.deadline:
                complete()  # rows still pending keep their last (leader) error
                return
            probe = _Call(job, ["leaders"], kind, common, lambda _c, _r, _res, _b: complete(), slot)
            self._retry(probe, lambda: self._after_metadata(probe, route, topics))

        job.partial[slot] = complete
        first = _Call(job, ["leaders"], kind, common, lambda _c, _r, _res, _b: complete(), slot)
        self._after_metadata(first, route, topics)
