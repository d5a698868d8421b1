"""Runs in: the main host, as a part of a consumer's broker/N actors (present when the actor is spawned with
``consumer=True`` or ``fetch=...``). Owns the fetch side of one broker connection: the fetch loop for the
partitions whose ctoppars asked this broker (it leads them), wiring the pure ``core.consumer.FetchPlanner`` to
the connection, and the resolution of logical offsets with ListOffsets.

One Fetch request is in flight per broker; from Fetch v7 on it is part of a fetch session (KIP-227, kept by
the planner). Its response is scanned (batch headers only, no decoding) and each partition's complete record
set goes to its ctoppar as a FETCHED op with the records as one raw frame; a preferred read replica (KIP-392)
or a follower that cannot serve a partition is reported to its ctoppar, which moves the fetching.
Logical start offsets (OFFSET_BEGINNING/END) and OFFSET_OUT_OF_RANGE resets (auto.offset.reset) are resolved
here with ListOffsets on this same connection, then fetching continues at the resolved offset.

Records before the next Fetch: after a response of at most ``RECORDS_FIRST_BYTES`` that carried records, the next
Fetch is built and written only once the host has sent this turn's output (``ActorContext.continue_later``), so
the ctoppars' decoded batches leave for the app first instead of waiting behind the Fetch's planning, encoding
and write (a light stream's latency). A larger response keeps the Fetch first: a busy stream's next Fetch then
overlaps the decoding.

Ops in:  B_FETCH_START / B_FETCH_STOP / FETCH_FLOW (ctoppar), FETCHER_RETRY_RESOLVE (its own timer),
         FETCHER_PUMP (itself, after a turn's output has left).
Ops out: FETCHED / FETCH_ERROR / FETCH_POSITION / FETCH_PREFERRED / FETCH_REVERT (ctoppar), METADATA_REFRESH
         (the broker's owner), REQUEST ListOffsets (to its own broker actor).
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from kqactors.core.connection import Completion, ConnState, Request
from kqactors.core.consumer.planner import AWAITING_RESET, FETCH_SESSION_MIN_VERSION, FetchPlan, FetchPlanner
from kqactors.core.consumer.settings import FetchSettings
from kqactors.errors import KafkaError
from kqactors.message import OFFSET_BEGINNING, OFFSET_END
from kqactors.ops import client as ops
from kqactors.ops import consumer as cops
from kqactors.protocol.requests import (
    EARLIEST_TIMESTAMP,
    FETCH,
    LATEST_TIMESTAMP,
    LIST_OFFSETS,
    list_offsets_args,
)
from kqactors.runtime.op import Op

if TYPE_CHECKING:
    from kqactors.actors.broker.actor import BrokerActor

log = logging.getLogger(__name__)

_RESOLVE_RETRY_S = 0.5
_RETRY_RESOLVE = "FETCHER_RETRY_RESOLVE"
_PUMP = "FETCHER_PUMP"
#: a Fetch response with records of at most this many bytes lets its records leave before the next Fetch
RECORDS_FIRST_BYTES = 64 * 1024
_REFRESH_CODES = frozenset({KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.UNKNOWN_TOPIC_OR_PART,
                            KafkaError.LEADER_NOT_AVAILABLE, KafkaError.FENCED_LEADER_EPOCH})


class FetchSource:
    """The broker actor's fetch part; it reaches the connection and the context through ``broker``."""

    def __init__(self, broker: BrokerActor, settings: FetchSettings) -> None:
        self.broker = broker
        self.fetch_settings = settings
        self.planner = FetchPlanner(settings)
        #: (topic, partition) → ctoppar name that receives its data
        self.fetch_owner: dict[tuple[str, int], str] = {}
        #: (topic, partition) → (version, logical offset or reset policy) waiting for ListOffsets
        self.resolving: dict[tuple[str, int], tuple[int, int]] = {}
        self.fetch_requests = 0
        self.fetch_request_bytes = 0  # encoded Fetch request bodies (what fetch sessions save)
        self.fetched_bytes = 0
        self.completed = False  # a Fetch completed since the actor last pumped
        self.records_first = False  # that Fetch brought a small response with records (see the module docstring)
        self.pump_posted = False  # a FETCHER_PUMP is on its way (continue_later)

    def handlers(self) -> dict[str, Any]:
        return {cops.BROKER_FETCH_START: self._on_fetch_start, cops.BROKER_FETCH_STOP: self._on_fetch_stop,
                cops.FETCH_FLOW: self._on_fetch_flow, _RETRY_RESOLVE: self._on_retry_resolve,
                _PUMP: self._on_pump}

    # ---- ops from ctoppars --------------------------------------------------------------------------------

    def _on_fetch_start(self, op: Op) -> None:
        p = op.payload
        topic, partition, offset, version = p["topic"], int(p["partition"]), int(p["offset"]), int(p["version"])
        key = (topic, partition)
        target = self.planner.target(topic, partition)
        if target is not None and version < target.version:
            return  # a stale start (the partition moved on meanwhile)
        self.fetch_owner[key] = op.sender or cops.ctoppar_name(topic, partition)
        self.resolving.pop(key, None)
        follower = bool(p.get("follower", False))
        if offset >= 0:
            self.planner.start(topic, partition, offset, version, follower=follower)
        else:
            # Not fetchable until ListOffsets resolves the logical offset.
            target = self.planner.start(topic, partition, 0, version, follower=follower)
            target.state = AWAITING_RESET
            self._resolve(topic, partition, version, offset)
        self.planner.set_flow(topic, partition, bool(p.get("flow_open", True)))
        self.planner.set_paused(topic, partition, bool(p.get("paused", False)))
        # A partition waiting for ListOffsets adds nothing to fetch (with thousands of them assigned at once,
        # a pump each would scan them all thousands of times); _on_resolved pumps.
        if offset >= 0:
            self.pump()

    def _on_fetch_stop(self, op: Op) -> None:
        key = (op.payload["topic"], int(op.payload["partition"]))
        target = self.planner.target(*key)
        version = op.payload.get("version")
        if target is not None and version is not None and int(version) < target.version:
            return
        self.planner.stop(*key)
        self.fetch_owner.pop(key, None)
        self.resolving.pop(key, None)

    def _on_fetch_flow(self, op: Op) -> None:
        p = op.payload
        target = self.planner.target(p["topic"], int(p["partition"]))
        if target is None or int(p.get("version", target.version)) < target.version:
            return
        self.planner.set_flow(p["topic"], int(p["partition"]), bool(p["open"]))
        self.pump()

    def _on_retry_resolve(self, op: Op) -> None:
        p = op.payload
        key = (p["topic"], int(p["partition"]))
        if self.resolving.get(key) == (int(p["version"]), int(p["logical"])):
            self._resolve(key[0], key[1], int(p["version"]), int(p["logical"]))

    # ---- offset resolution (logical start offsets and auto.offset.reset) ----------------------------------

    def _resolve(self, topic: str, partition: int, version: int, logical: int) -> None:
        """ListOffsets for ``logical`` (OFFSET_BEGINNING / OFFSET_END), then start fetching there."""
        ctx = self.broker.ctx
        timeout_ms = self.broker.socket_timeout_ms
        key = (topic, partition)
        self.resolving[key] = (version, logical)
        timestamp = EARLIEST_TIMESTAMP if logical == OFFSET_BEGINNING else LATEST_TIMESTAMP
        args = list_offsets_args([(topic, partition, timestamp)], self.fetch_settings.read_committed)
        request = Op(ops.REQUEST, {"kind": LIST_OFFSETS.name, "args": args, "timeout_ms": timeout_ms})
        ctx.request(ctx.name, request, lambda reply: self._on_resolved(key, version, logical, reply),
                    timeout_ms / 1000 + 1.0)

    def _on_resolved(self, key: tuple[str, int], version: int, logical: int, reply: Op) -> None:
        if self.resolving.get(key) != (version, logical):
            return  # stopped, restarted or seeked meanwhile
        target = self.planner.target(*key)
        if target is None or target.version != version:
            self.resolving.pop(key, None)
            return
        broker = self.broker
        code, offset = KafkaError._TRANSPORT, -1
        if reply.error is None:
            payload = reply.payload or {}
            code = int(payload.get("error_code", 0))
            rows = (payload.get("result") or {}).get("partitions") or []
            if not code:
                code = KafkaError._UNKNOWN_PARTITION
                for topic, partition, error_code, found, _ts, _epoch in rows:
                    if (topic, partition) == key:
                        code, offset = error_code, found
        if code or offset < 0:
            log.debug("broker/%s: resolving %s %s failed (%s), retrying", broker.node_id, key, logical, code)
            if code in _REFRESH_CODES:
                broker.ctx.send(broker.owner, Op(ops.METADATA_REFRESH, {"topic": key[0], "reason": "ListOffsets"}))
            broker.ctx.timer(_RESOLVE_RETRY_S, Op(_RETRY_RESOLVE, {"topic": key[0], "partition": key[1],
                                                                    "version": version, "logical": logical}))
            return
        self.resolving.pop(key, None)
        self.planner.seek(key[0], key[1], offset, version)
        owner = self.fetch_owner.get(key)
        if owner:
            broker.ctx.send(owner, Op(cops.FETCH_POSITION, {"topic": key[0], "partition": key[1],
                                                            "version": version, "offset": offset}))
        self.pump()

    # ---- the fetch loop -----------------------------------------------------------------------------------

    def after_completions(self) -> None:
        """The actor's batch of completions is done: the next Fetch now, or after this turn's output."""
        self.completed = False
        if self.records_first:
            self.records_first = False
            if not self.pump_posted:
                self.pump_posted = True
                self.broker.ctx.continue_later(Op(_PUMP))
            return
        self.pump()

    def _on_pump(self, _op: Op) -> None:
        self.pump_posted = False
        self.pump()

    def pump(self) -> None:
        """Send the next Fetch if the connection is UP, none is in flight and some partition is fetchable."""
        broker = self.broker
        conn = broker.conn
        if conn.state != ConnState.UP or self.planner.in_flight is not None or broker.stopped:
            if conn.state == ConnState.INIT and self.fetch_owner and not broker.stopped:
                broker.ensure_connecting()  # closed while idle (connections.max.idle.ms): there is work now
            return
        version = conn.version_for(FETCH)
        plan = self.planner.build(sessions=version is not None and version >= FETCH_SESSION_MIN_VERSION)
        if plan is None:
            return
        if version is None:
            self.planner.handle_failure(plan, KafkaError._UNSUPPORTED_FEATURE)
            for key in plan.partitions:
                owner = self.fetch_owner.get(key)
                if owner:
                    broker.ctx.send(owner, Op(cops.FETCH_ERROR, {
                        "topic": key[0], "partition": key[1], "version": plan.partitions[key][0],
                        "offset": plan.partitions[key][1], "code": KafkaError._UNSUPPORTED_FEATURE,
                        "reason": f"broker {broker.node_id} does not support Fetch v{FETCH.min_version}+"}))
            return
        body = FETCH.encode(version, {"request": plan.request}, [])
        size = sum(len(chunk) for chunk in body)
        self.fetch_requests += 1
        self.fetch_request_bytes += size
        if broker.clog.debugging("fetch"):
            req = plan.request
            listed = sum(len(t.partitions) for t in req.topics)
            broker.clog.debug("fetch", "FETCH", f"{broker.log_name}: Fetch v{version} session {req.session_id} "
                                                f"epoch {req.session_epoch}: {listed}/{len(plan.partitions)} "
                                                f"partition(s) listed, {size} bytes")
            for (topic, partition), (part_version, offset, max_bytes) in plan.partitions.items():
                broker.clog.debug("fetch", "FETCH", f"{broker.log_name}: Fetch topic {topic} [{partition}] at offset "
                                                    f"{offset} (v{part_version}, max {max_bytes} bytes)")
        conn.enqueue(Request(FETCH.api_key, version, body, FETCH.is_flexible(version), timeout_ms=plan.timeout_ms,
                             context=(self.complete, plan, FETCH, version)), time.monotonic())
        broker.write()

    def complete(self, plan: FetchPlan, _kind: Any, version: int, completion: Completion) -> None:
        """A Fetch finished (the actor calls ``pump`` after the batch of completions)."""
        self.completed = True
        if completion.error_code:
            self.planner.handle_failure(plan, completion.error_code)
            return
        broker = self.broker
        try:
            response = FETCH.decode(version, completion.response)
        except Exception as exc:  # noqa: BLE001 - a malformed response fails this round only
            log.warning("broker/%s: malformed Fetch v%d response: %s", broker.node_id, version, exc)
            self.planner.handle_failure(plan, KafkaError._BAD_MSG)
            return
        outcome = self.planner.handle_response(plan, response)
        self.fetched_bytes += outcome.received_bytes
        if broker.clog.debugging("fetch"):
            broker.clog.debug("fetch", "FETCH", f"{broker.log_name}: Fetch reply: {outcome.received_bytes} bytes, "
                                                f"{len(outcome.slices)} slice(s), {len(outcome.errors)} error(s), "
                                                f"{len(outcome.resets)} offset reset(s)")
        send = broker.ctx.send
        if 0 < outcome.received_bytes <= RECORDS_FIRST_BYTES:
            self.records_first = True
        for sl in outcome.slices:
            owner = self.fetch_owner.get((sl.topic, sl.partition))
            if owner:
                send(owner, Op(cops.FETCHED, sl.payload(), [sl.records] if len(sl.records) else None))
        for error in outcome.errors:
            owner = self.fetch_owner.get((error.topic, error.partition))
            if owner:
                send(owner, Op(cops.FETCH_ERROR, error.payload()))
        for moved in outcome.preferred:
            owner = self.fetch_owner.get((moved.topic, moved.partition))
            if owner:
                send(owner, Op(cops.FETCH_PREFERRED, {"topic": moved.topic, "partition": moved.partition,
                                                      "version": moved.version, "broker_id": moved.broker_id}))
        for topic, partition, part_version, code in outcome.reverts:
            owner = self.fetch_owner.get((topic, partition))
            if owner:
                send(owner, Op(cops.FETCH_REVERT, {"topic": topic, "partition": partition, "version": part_version,
                                                   "code": code}))
        for reset in outcome.resets:
            logical = OFFSET_BEGINNING if reset.policy == "earliest" else OFFSET_END
            self._resolve(reset.topic, reset.partition, reset.version, logical)
        for topic in outcome.refresh_topics:
            send(broker.owner, Op(ops.METADATA_REFRESH, {"topic": topic, "reason": "Fetch error"}))
