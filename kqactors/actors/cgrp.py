"""Runs in: the main host (next to `main` and the broker actors). Owns the `cgrp` actor: it drives the pure
consumer-group state machine (kqactors.core.group.GroupStateMachine, or ConsumerProtocolMachine for
group.protocol=consumer) with time, broker replies, metadata (with topic ids) and the app's calls, and executes
its actions — group requests to the coordinator, rebalance / commit / error ops to the app's group queue —
plus committed() lookups for the app.

Group requests to the coordinator travel on a connection of their own (a BrokerActor child named
``cgrp-coord/<node>``, as librdkafka's logical coordinator broker): a broker answers one connection's requests
in order, so on the fetching connection a commit or heartbeat would wait behind the Fetch long-poll
(fetch.wait.max.ms). FindCoordinator goes to any broker actor of main.

Ops in (app):  CGRP_SUBSCRIBE, CGRP_UNSUBSCRIBE, CGRP_COMMIT, CGRP_COMMITTED, CGRP_CLOSE (requests),
               CGRP_POLL, CGRP_REBALANCE_DONE (sends). Most carry ``stored`` offsets (see _apply_stored).
Ops out (app): CGRP_REBALANCE, CGRP_FETCH_START, CGRP_FETCH_STOP, CGRP_COMMIT_RESULT, CGRP_STATE, CGRP_ERROR.
Ops out:       REQUEST (cgrp-coord/N or broker/N, kinds ``cgrp:<Api>``; ``cgrp848:OffsetCommit`` for KIP-848),
               METADATA (main).
Ops in (children): BROKER_STATE from the coordinator connections (ignored: requests report their own errors).
"""

from __future__ import annotations

import logging
import time
from typing import Any

from kqactors.actors.main import BROKER_FACTORY, broker_connection_config
from kqactors.core.group.actions import (
    Action,
    Closed,
    CommitResult,
    CoordinatorChanged,
    RebalanceCallback,
    RequestMetadata,
    SendRequest,
    StartFetching,
    StopFetching,
    SurfaceError,
)
from kqactors.core.group.commits import COORDINATOR_ERRORS
from kqactors.core.group.consumer_protocol import ConsumerProtocolMachine
from kqactors.core.group.machine import GroupStateMachine
from kqactors.core.group.requests import coordinator_from_response, offset_fetch_partitions
from kqactors.core.group.settings import GroupSettings
from kqactors.core.log import ClientLog
from kqactors.errors import KafkaError, KafkaException
from kqactors.message import OFFSET_INVALID, TopicPartition
from kqactors.ops import client as ops
from kqactors.ops import security as sops
from kqactors.ops.client import runtime_failure_code
from kqactors.ops.group import (
    CGRP_CLOSE,
    CGRP_COMMIT,
    CGRP_COMMIT_RESULT,
    CGRP_COMMITTED,
    CGRP_ERROR,
    CGRP_FETCH_START,
    CGRP_FETCH_STOP,
    CGRP_POLL,
    CGRP_REBALANCE,
    CGRP_REBALANCE_DONE,
    CGRP_RESUME,
    CGRP_STATE,
    CGRP_SUBSCRIBE,
    CGRP_UNSUBSCRIBE,
    partitions_to_wire,
)
from kqactors.protocol.api import api_info
from kqactors.protocol.requests import group_request_kind
from kqactors.runtime.actor import Actor, ActorContext, on
from kqactors.runtime.op import Op

log = logging.getLogger(__name__)

TICK_SECONDS = 0.05
_TICK = "CGRP_TICK"
_ANY_BROKER_APIS = frozenset({"FindCoordinator"})  # every other group API goes to the coordinator


def coordinator_link_name(node_id: int) -> str:
    """The name of the cgrp's own connection to broker ``node_id`` as group coordinator."""
    return f"cgrp-coord/{node_id}"


# Request kinds: one per group API (``cgrp:<Api>``, ``cgrp848:OffsetCommit``), in kqactors.protocol.requests'
# table with their version ranges; encoded by kqactors.core.group.requests at the negotiated version.


def _now_ms() -> float:
    return time.monotonic() * 1000.0


def reply_from_response(api: str, reply: Op) -> Any:
    """A broker's RESPONSE (or a runtime error reply) → the decoded group response, or a KafkaError."""
    if reply.error is not None:
        code = runtime_failure_code(reply.error.code)
        return KafkaError(code, f"{api}: {reply.error.code}: {reply.error.message}")
    payload = reply.payload or {}
    code = int(payload.get("error_code", 0))
    if code:
        return KafkaError(code, f"{api}: {payload.get('reason') or KafkaError(code).str()}")
    result = payload.get("result") or {}
    try:
        return api_info(api).response.decode(result["body"], int(result["version"]))
    except Exception as exc:  # noqa: BLE001 - a malformed response is this request's error
        return KafkaError(KafkaError._BAD_MSG, f"malformed {api} response: {exc}")


class _CommittedQuery:
    """One app committed() call: OffsetFetch through the coordinator, retried until its deadline."""

    __slots__ = ("op", "partitions", "deadline")

    def __init__(self, op: Op, partitions: list[list[Any]], deadline: float) -> None:
        self.op, self.partitions, self.deadline = op, partitions, deadline


class CgrpActor(Actor):
    """The `cgrp` actor. ``config`` uses librdkafka property names (plain values only); group ops for the
    app go to ("app", ``app_qid``)."""

    def __init__(self, ctx: ActorContext, config: dict[str, Any] | None = None, app_qid: int = 0,
                 main: str = "main") -> None:
        super().__init__(ctx)
        self.config = dict(config or {})
        self.app_qid = int(app_qid)
        self.main = main
        self.settings = GroupSettings.from_config(self.config)
        #: debug=cgrp records (join states, coordinator changes), sent to the app as LOG ops
        self.clog = ClientLog.from_config(self.config, lambda record: ctx.send("app", Op(ops.LOG, record)), "main")
        self.request_timeout_ms = int(self.config.get("socket.timeout.ms", 60000))
        self.metadata_interval_ms = int(self.config.get("topic.metadata.refresh.interval.ms", 300000))
        self.consumer_protocol = self.settings.consumer_protocol
        machine_class = ConsumerProtocolMachine if self.consumer_protocol else GroupStateMachine
        self.machine = machine_class(self.settings, _now_ms(), self.request_timeout_ms)
        self.brokers: list[int] = []
        self.broker_addresses: dict[int, tuple[str, int]] = {}
        self.coordinator_links: dict[int, str] = {}  # node id → child BrokerActor for group requests
        self._rr = 0
        self.waiting_for_broker: list[SendRequest] = []
        self.metadata_in_flight = False
        self.metadata_topics: list[str] | None = []
        self.metadata_refreshed_at = 0.0
        self.subscribed = False
        self.sync_commits: dict[int, Op] = {}
        self.close_waiters: list[Op] = []
        self.committed_queries: list[_CommittedQuery] = []
        self.lookup_coordinator: int | None = None
        self.lookup_in_flight = False
        self.missing_topics_reported: set[str] = set()
        self.last_state: tuple | None = None

    def on_start(self) -> None:
        self.ctx.timer(TICK_SECONDS, Op(_TICK), repeat=True)
        self._push_state()

    # ---- driving the machine ---------------------------------------------------------------------------

    def _run(self, method: str, *args: Any, **kwargs: Any) -> None:
        actions = getattr(self.machine, method)(*args, now=_now_ms(), **kwargs)
        self._execute(actions)

    def _execute(self, actions: list[Action]) -> None:
        for action in actions:
            if isinstance(action, SendRequest):
                self._send_request(action)
            elif isinstance(action, RequestMetadata):
                self.metadata_topics = action.topics
                self._request_metadata()
            elif isinstance(action, CoordinatorChanged):
                self.clog.debug("cgrp", "CGRPCOORD", f'Group "{self.settings.group_id}": coordinator is now '
                                                     f"broker {action.node_id}")
                if action.node_id >= 0 and action.node_id not in self.brokers:
                    self._request_metadata()  # main spawns broker/N for the coordinator from metadata
            elif isinstance(action, RebalanceCallback):
                self._to_app(CGRP_REBALANCE, {"kind": action.kind, "incremental": action.incremental,
                                              "partitions": partitions_to_wire(action.partitions),
                                              "error_code": action.error.code()})
            elif isinstance(action, StartFetching):
                self._to_app(CGRP_FETCH_START, {"partitions": partitions_to_wire(action.partitions)})
            elif isinstance(action, StopFetching):
                self._to_app(CGRP_FETCH_STOP, {"partitions": partitions_to_wire(action.partitions)})
            elif isinstance(action, CommitResult):
                self._commit_result(action)
            elif isinstance(action, SurfaceError):
                self._to_app(CGRP_ERROR, {"error": action.error.to_tuple()})
            elif isinstance(action, Closed):
                waiters, self.close_waiters = self.close_waiters, []
                for op in waiters:
                    self.ctx.reply(op, Op(CGRP_CLOSE, {"error_code": 0}))
        self._push_state()

    def _to_app(self, op_type: str, payload: dict[str, Any]) -> None:
        self.ctx.send("app", Op(op_type, payload), qid=self.app_qid)

    def _push_state(self) -> None:
        m = self.machine
        state = (m.member_id, m.generation_id, m.join_state.name, m.coordinator[0] if m.coordinator else -1)
        if state != self.last_state:
            self.clog.debug("cgrp", "CGRPJOINSTATE", f'Group "{self.settings.group_id}" join state {state[2]} '
                                                     f"(member {state[0] or '-'}, generation {state[1]}, "
                                                     f"coordinator {state[3]})")
            self.last_state = state
            self._to_app(CGRP_STATE, {"member_id": state[0], "generation_id": state[1], "join_state": state[2],
                                      "coordinator": state[3]})

    @on(_TICK)
    def _on_tick(self, _op: Op) -> None:
        now = _now_ms()
        due = self.machine.next_deadline()
        if due is not None and due <= now:
            self._execute(self.machine.tick(now))
        if self.subscribed and now - self.metadata_refreshed_at >= self.metadata_interval_ms:
            # the subscription's scope, not that of the last one-off request (a leader's assignment asks for
            # the group's topics by name, which would leave a pattern subscription blind to new topics)
            self.metadata_topics = self.machine.metadata_scope()
            self._request_metadata()
        if self.committed_queries:
            self._serve_committed_queries()

    # ---- requests to brokers ---------------------------------------------------------------------------

    def _pick_broker(self) -> int | None:
        if not self.brokers:
            return None
        self._rr += 1
        return self.brokers[self._rr % len(self.brokers)]

    def _send_request(self, action: SendRequest) -> None:
        broker = action.broker_id if action.broker_id is not None else self._pick_broker()
        if broker is None:
            self.waiting_for_broker.append(action)
            self._request_metadata()
            return
        self._broker_request(broker, action.api, action.fields, action.timeout_ms,
                             lambda reply: self._on_group_reply(action, reply))

    def _broker_request(self, broker: int, api: str, fields: dict[str, Any], timeout_ms: int, on_reply: Any) -> None:
        payload = {"kind": group_request_kind(api, self.consumer_protocol), "args": fields, "timeout_ms": timeout_ms}
        target = ops.broker_name(broker) if api in _ANY_BROKER_APIS else self._coordinator_link(broker)
        self.ctx.request(target, Op(ops.REQUEST, payload), on_reply, timeout_ms / 1000 + 1.0)

    def _coordinator_link(self, node_id: int) -> str:
        """This group's connection to ``node_id``, started on first use; main's broker actor while the
        broker's address is not known yet (the next metadata brings it)."""
        name = self.coordinator_links.get(node_id)
        if name is not None:
            return name
        address = self.broker_addresses.get(node_id)
        if address is None:
            return ops.broker_name(node_id)
        name = coordinator_link_name(node_id)
        args = {"node_id": node_id, "host": address[0], "port": address[1],
                "config": broker_connection_config(self.config), "owner": self.ctx.name}
        try:
            self.ctx.spawn(name, BROKER_FACTORY, args)
        except Exception:  # noqa: BLE001 - the shared connection still works, only slower
            log.exception("cgrp: cannot start %s; group requests use %s", name, ops.broker_name(node_id))
            return ops.broker_name(node_id)
        self.coordinator_links[node_id] = name
        return name

    @on(sops.SASL_CREDENTIALS)
    def _on_sasl_credentials(self, op: Op) -> None:
        """set_sasl_credentials(): the group's coordinator connections (running and later ones) authenticate
        with the new credentials from their next authentication on (the payload is a secret: never logged)."""
        payload = op.payload if isinstance(op.payload, dict) else {}
        self.config["sasl.username"] = str(payload.get("username") or "")
        self.config["sasl.password"] = str(payload.get("password") or "")
        for name in self.coordinator_links.values():
            self.ctx.send(name, Op(sops.SASL_CREDENTIALS, payload))

    def _retire_links(self, keep: set[int]) -> None:
        """Stop the coordinator connections of brokers that left the metadata (or moved)."""
        for node_id in [n for n in self.coordinator_links if n not in keep]:
            name = self.coordinator_links.pop(node_id)
            try:
                self.ctx.stop(name)
            except ValueError:
                pass  # already gone with its host

    @on(ops.BROKER_STATE)
    def _on_link_state(self, _op: Op) -> None:
        """Coordinator connections report their state here; failed requests already say what happened."""

    def _on_group_reply(self, action: SendRequest, reply: Op) -> None:
        response = reply_from_response(action.api, reply)
        if isinstance(response, KafkaError) and response.code() == KafkaError._TRANSPORT and reply.error:
            self._forget_broker_if_gone(action.broker_id, reply)
        self._run("handle_response", action.request_id, response)

    def _forget_broker_if_gone(self, broker: int | None, reply: Op) -> None:
        if broker is not None and reply.error is not None and reply.error.code == "UNKNOWN_ACTOR":
            self.coordinator_links.pop(broker, None)
            if broker in self.brokers:
                self.brokers.remove(broker)
            self._request_metadata()

    # ---- metadata --------------------------------------------------------------------------------------

    def _request_metadata(self) -> None:
        if self.metadata_in_flight:
            return
        self.metadata_in_flight = True
        topics = self.metadata_topics
        payload = {"topics": None if topics is None else list(topics), "timeout_ms": self.request_timeout_ms}
        self.ctx.request(self.main, Op(ops.METADATA, payload), self._on_metadata,
                         self.request_timeout_ms / 1000 + 1.0)

    def _on_metadata(self, reply: Op) -> None:
        self.metadata_in_flight = False
        self.metadata_refreshed_at = _now_ms()
        payload = reply.payload or {}
        if reply.error is not None or payload.get("error_code") or not payload.get("metadata"):
            self.ctx.timer(self.settings.retry_backoff_ms / 1000, Op(_TICK))
            self.metadata_refreshed_at -= self.metadata_interval_ms - self.settings.retry_backoff_max_ms
            return
        wire = payload["metadata"]
        self.brokers = sorted(int(b[0]) for b in wire.get("brokers", ()) if int(b[0]) >= 0)
        addresses = {int(b[0]): (str(b[1]), int(b[2])) for b in wire.get("brokers", ()) if int(b[0]) >= 0}
        self._retire_links({n for n, address in addresses.items() if self.broker_addresses.get(n, address) == address})
        self.broker_addresses = addresses
        waiting, self.waiting_for_broker = self.waiting_for_broker, []
        for action in waiting:
            self._send_request(action)
        counts: dict[str, int] = {}
        topic_ids: dict[str, bytes | None] = {}
        for name, error, topic_id, parts in wire.get("topics", ()):
            if not error and parts:
                counts[name] = len(parts)
                topic_ids[name] = topic_id
                self.missing_topics_reported.discard(name)  # reported again should it go missing again
            elif self.consumer_protocol:
                continue  # KIP-848: a subscribed topic that does not exist (yet) is not an error
            elif self.subscribed and name not in self.missing_topics_reported and not name.startswith("^"):
                # librdkafka's consumer error for it, once per topic (the app's poll() returns it)
                self.missing_topics_reported.add(name)
                code = error or KafkaError.UNKNOWN_TOPIC_OR_PART
                text = "Broker: Unknown topic or partition" if code == KafkaError.UNKNOWN_TOPIC_OR_PART \
                    else KafkaError(code).str()
                self._to_app(CGRP_ERROR, {"topic": name, "error": KafkaError(
                    code, f"Subscribed topic not available: {name}: {text}").to_tuple()})
        if self.subscribed:
            if self.consumer_protocol:
                self._run("metadata_update", counts, topic_ids=topic_ids)
            else:
                self._run("metadata_update", counts)

    # ---- app ops ---------------------------------------------------------------------------------------

    def _apply_stored(self, payload: dict[str, Any] | None) -> None:
        """``stored``: [[topic, partition, next_offset, leader_epoch, metadata, explicit]] the app stored
        since it last told us (explicit: store_offsets(); else enable.auto.offset.store positions)."""
        for topic, partition, offset, epoch, metadata, explicit in (payload or {}).get("stored") or ():
            epoch = epoch if epoch is not None and epoch >= 0 else None
            if explicit:
                try:
                    self.machine.store_offsets([TopicPartition(topic, partition, offset, metadata, epoch)])
                except KafkaException as exc:
                    log.debug("store_offsets ignored: %s", exc)
            else:
                self.machine.auto_store(topic, partition, offset, epoch)

    def _reply_status(self, op: Op, error: KafkaError | None = None, **extra: Any) -> None:
        if op.is_request:
            body = {"error": error.to_tuple() if error else None, **extra}
            self.ctx.reply(op, Op(op.type, body))

    @on(CGRP_SUBSCRIBE)
    def _on_subscribe(self, op: Op) -> None:
        try:
            self.missing_topics_reported.clear()
            self._run("subscribe", list(op.payload["topics"]))
            self.subscribed = True
        except KafkaException as exc:
            self._reply_status(op, exc.args[0])
            return
        self._reply_status(op)

    @on(CGRP_RESUME)
    def _on_resume(self, op: Op) -> None:
        """This actor replaces one that died with main's host: carry on as the member it was (the app kept
        member id, generation and assignment), without a rebalance. KIP-848 members rejoin instead."""
        payload = op.payload or {}
        topics = list(payload.get("topics") or ())
        try:
            if self.consumer_protocol or not payload.get("member_id") or int(payload.get("generation_id", -1)) < 0:
                self._run("subscribe", topics)
            else:
                self._run("resume", topics, str(payload["member_id"]), int(payload["generation_id"]),
                          payload.get("protocol"), [tuple(k) for k in payload.get("assignment") or ()])
            self.subscribed = True
        except KafkaException as exc:
            log.warning("resuming the group failed: %s", exc)

    @on(CGRP_UNSUBSCRIBE)
    def _on_unsubscribe(self, op: Op) -> None:
        self._apply_stored(op.payload)
        try:
            self._run("unsubscribe")
            self.subscribed = False
            self.metadata_topics = []
        except KafkaException as exc:
            self._reply_status(op, exc.args[0])
            return
        self._reply_status(op)

    @on(CGRP_POLL)
    def _on_poll(self, op: Op) -> None:
        self._apply_stored(op.payload)
        self._run("poll_called")

    @on(CGRP_REBALANCE_DONE)
    def _on_rebalance_done(self, op: Op) -> None:
        payload = op.payload or {}
        self._apply_stored(payload)
        given = payload.get("partitions")
        partitions = None if given is None else [TopicPartition(t, p, off) for t, p, off, *_ in given]
        try:
            self._execute(self.machine.rebalance_done(_now_ms(), partitions))
        except KafkaException as exc:
            log.warning("rebalance_done ignored: %s", exc)

    @on(CGRP_COMMIT)
    def _on_commit(self, op: Op) -> None:
        payload = op.payload or {}
        self._apply_stored(payload)
        offsets = payload.get("offsets")
        tps = None if offsets is None else [TopicPartition(t, p, off, meta, epoch if epoch is not None else None)
                                            for t, p, off, epoch, meta in offsets]
        tag = ("sync", op.req_id) if op.is_request else ("async", payload.get("tag"))
        if op.is_request:
            self.sync_commits[op.req_id] = op
        try:
            self._execute(self.machine.commit(_now_ms(), tps, tag=tag))
        except KafkaException as exc:
            self.sync_commits.pop(op.req_id, None)
            error = exc.args[0]
            if op.is_request:
                self._reply_status(op, error, partitions=[])
            else:
                self._to_app(CGRP_COMMIT_RESULT, {"tag": payload.get("tag"), "error": error.to_tuple(),
                                                  "partitions": []})

    def _commit_result(self, action: CommitResult) -> None:
        kind, tag = action.tag if isinstance(action.tag, tuple) else ("auto", None)
        parts = partitions_to_wire(action.partitions, with_errors=True)
        error = action.error.to_tuple() if action.error else None
        if kind == "sync":
            op = self.sync_commits.pop(tag, None)
            if op is not None:
                self._reply_status(op, action.error, partitions=parts)
            tag = None
        if action.error is not None and action.error.code() == KafkaError._NO_OFFSET and kind == "auto":
            return
        self._to_app(CGRP_COMMIT_RESULT, {"tag": tag, "error": error, "partitions": parts})

    @on(CGRP_CLOSE)
    def _on_close(self, op: Op) -> None:
        self._apply_stored(op.payload)
        self.subscribed = False
        if self.machine.closed:
            self._reply_status(op)
            return
        if op.is_request:
            self.close_waiters.append(op)
        self._run("close")

    # ---- committed() -----------------------------------------------------------------------------------

    @on(CGRP_COMMITTED)
    def _on_committed(self, op: Op) -> None:
        payload = op.payload or {}
        timeout_ms = int(payload.get("timeout_ms") or self.request_timeout_ms)
        query = _CommittedQuery(op, [list(p[:2]) for p in payload.get("partitions") or ()],
                                _now_ms() + timeout_ms)
        self.committed_queries.append(query)
        self._serve_committed_queries()

    def _coordinator_for_lookup(self) -> int | None:
        if self.machine.coordinator is not None:
            return self.machine.coordinator[0]
        if self.lookup_coordinator is not None:
            return self.lookup_coordinator
        broker = self._pick_broker()
        if broker is None:
            self._request_metadata()
        elif not self.lookup_in_flight:
            self.lookup_in_flight = True
            fields = {"key": self.settings.group_id, "key_type": 0}
            self._broker_request(broker, "FindCoordinator", fields, self.request_timeout_ms,
                                 self._on_lookup_coordinator)
        return None

    def _on_lookup_coordinator(self, reply: Op) -> None:
        self.lookup_in_flight = False
        response = reply_from_response("FindCoordinator", reply)
        if not isinstance(response, KafkaError):
            code, node_id, *_ = coordinator_from_response(response)
            if not code:
                self.lookup_coordinator = node_id
                if node_id not in self.brokers:
                    self._request_metadata()
        self._serve_committed_queries()

    def _serve_committed_queries(self) -> None:
        now = _now_ms()
        for query in [q for q in self.committed_queries if q.deadline <= now]:
            self.committed_queries.remove(query)
            self._reply_status(query.op, KafkaError(KafkaError._TIMED_OUT, "committed(): timed out"), partitions=[])
        pending = [q for q in self.committed_queries if q.partitions is not None]
        if not pending:
            return
        coordinator = self._coordinator_for_lookup()
        if coordinator is None:
            return
        for query in pending:
            fields = {"group_id": self.settings.group_id, "partitions": query.partitions, "require_stable": True}
            asked, query.partitions = query.partitions, None  # None: in flight
            remaining = max(1, int(query.deadline - now))
            self._broker_request(coordinator, "OffsetFetch", fields, remaining,
                                 lambda reply, q=query, a=asked, c=coordinator: self._on_committed_reply(q, a, c, reply))

    def _on_committed_reply(self, query: _CommittedQuery, asked: list[list[Any]], coordinator: int,
                            reply: Op) -> None:
        if query not in self.committed_queries:
            return
        response = reply_from_response("OffsetFetch", reply)
        if isinstance(response, KafkaError):
            group_error, found = response.code(), {}
        else:
            group_error, found = offset_fetch_partitions(response)
        if group_error:
            if group_error in COORDINATOR_ERRORS or group_error == KafkaError.COORDINATOR_LOAD_IN_PROGRESS \
                    or group_error == KafkaError.UNSTABLE_OFFSET_COMMIT:
                if self.lookup_coordinator == coordinator:
                    self.lookup_coordinator = None
                query.partitions = asked  # retried on the next tick until the deadline
                return
            self.committed_queries.remove(query)
            self._reply_status(query.op, KafkaError(group_error, "committed(): OffsetFetch failed"), partitions=[])
            return
        self.committed_queries.remove(query)
        result = []
        for topic, partition in asked:
            offset, epoch, metadata, code = found.get((topic, partition), (-1, -1, None, 0))
            result.append([topic, partition, offset if offset >= 0 else OFFSET_INVALID, epoch, metadata or None,
                           code])
        self._reply_status(query.op, partitions=result)

    def on_stop(self) -> None:
        self._retire_links(set())
        error = KafkaError(KafkaError._DESTROY, "consumer group actor stopped")
        for op in list(self.sync_commits.values()) + self.close_waiters:
            if not op.replied:
                self._reply_status(op, error, partitions=[])
        self.sync_commits.clear()
        self.close_waiters.clear()

