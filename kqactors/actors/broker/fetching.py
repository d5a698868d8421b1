"""Runs in: the main host, as the broker/N actors of a Consumer. Owns the broker side of fetching: a
``FetchingBrokerActor`` is a BrokerActor that also runs the fetch loop for the partitions whose ctoppars
asked it to (it leads them), wiring the pure ``consumer_core.FetchPlanner`` to the connection.

One Fetch request is in flight per broker. Its response is scanned (batch headers only, no decoding) and each
partition's complete record set goes to its ctoppar as a FETCHED op with the records as one raw frame.
Logical start offsets (OFFSET_BEGINNING/END) and OFFSET_OUT_OF_RANGE resets (auto.offset.reset) are resolved
here with ListOffsets on this same connection, then fetching continues at the resolved offset.

Ops in:  B_FETCH_START / B_FETCH_STOP / B_FETCH_FLOW (ctoppar), plus everything a BrokerActor handles.
Ops out: B_FETCHED / B_FETCH_ERROR / B_FETCH_POSITION (ctoppar), METADATA_REFRESH (main).

``ConsumerMainActor`` is the consumer's ``main``: MainActor spawning FetchingBrokerActors and shipping them
the fetch properties. Also registers the ``ListOffsets`` REQUEST kind (used by the app for watermarks and offsets_for_times).
"""

from __future__ import annotations

import logging
import time
from typing import Any

from kqactors.actors.broker.actor import BrokerActor
from kqactors.actors.main import MainActor
from kqactors.core.connection import Completion, ConnState, Request
from kqactors.core.consumer import FetchPlan, FetchPlanner, FetchSettings
from kqactors.core.consumer.planner import AWAITING_RESET
from kqactors.core.consumer.settings import _PROPERTIES as FETCH_PROPERTIES
from kqactors.errors import KafkaError
from kqactors.message import OFFSET_BEGINNING, OFFSET_END
from kqactors.ops import client as ops
from kqactors.ops import consumer as cops
from kqactors.protocol.generated.fetch import FetchRequest, FetchResponse
from kqactors.protocol.generated.list_offsets import (
    ListOffsetsPartition,
    ListOffsetsRequest,
    ListOffsetsResponse,
    ListOffsetsTopic,
)
from kqactors.protocol.requests import REQUEST_KINDS, RequestKind, register_request_kind
from kqactors.runtime.actor import ActorContext, on
from kqactors.runtime.op import Op

log = logging.getLogger(__name__)

FETCH_KEY = FetchRequest.API_KEY
FETCH_MIN_VERSION = 4    # isolation level, last stable offset and aborted transactions
FETCH_MAX_VERSION = 12   # v13+ names topics by id only; the planner does not track topic ids here
_FETCH_FLEXIBLE_FROM = FetchRequest.FLEXIBLE_VERSIONS[0]
_LIST_OFFSETS_KIND = "ListOffsets"
_RESOLVE_RETRY_S = 0.5
_WAKE = "FETCHER_WAKE"
FETCHING_BROKER_FACTORY = "kqactors.actors.broker.fetching:FetchingBrokerActor"
_RETRY_RESOLVE = "FETCHER_RETRY_RESOLVE"

# ListOffsets special timestamps
LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2


# ---- ListOffsets request kind ------------------------------------------------------------------------------

def _encode_list_offsets(version: int, args: dict[str, Any], _frames: list[Any]) -> list[Any]:
    """args: {isolation_level, topics: [[topic, [[partition, timestamp, leader_epoch], ...]], ...]}"""
    topics = [ListOffsetsTopic(name=name, partitions=[
        ListOffsetsPartition(partition_index=int(p), timestamp=int(ts), current_leader_epoch=int(epoch))
        for p, ts, epoch in parts]) for name, parts in args["topics"]]
    request = ListOffsetsRequest(replica_id=-1, isolation_level=int(args.get("isolation_level", 0)),
                                 topics=topics, timeout_ms=int(args.get("timeout_ms", 30000)))
    return [request.encode(version)]


def _decode_list_offsets(version: int, body: bytes) -> dict[str, Any]:
    """{"partitions": [[topic, partition, error_code, offset, timestamp, leader_epoch], ...]}"""
    response = ListOffsetsResponse.decode(body, version)
    rows = []
    for topic in response.topics:
        for part in topic.partitions:
            offset = part.offset
            if version == 0:
                offset = part.old_style_offsets[0] if part.old_style_offsets else -1
            rows.append([topic.name, part.partition_index, part.error_code, offset, part.timestamp,
                         part.leader_epoch])
    return {"partitions": rows}


if _LIST_OFFSETS_KIND not in REQUEST_KINDS:
    register_request_kind(RequestKind(_LIST_OFFSETS_KIND, ListOffsetsRequest.API_KEY, 1, 7,
                                      ListOffsetsRequest.FLEXIBLE_VERSIONS[0], _encode_list_offsets,
                                      _decode_list_offsets))


def list_offsets_args(rows: list[tuple[str, int, int]], read_committed: bool) -> dict[str, Any]:
    """REQUEST args for ListOffsets of (topic, partition, timestamp) rows (timestamp -1 latest, -2 earliest)."""
    by_topic: dict[str, list[list[int]]] = {}
    for topic, partition, timestamp in rows:
        by_topic.setdefault(topic, []).append([partition, timestamp, -1])
    return {"isolation_level": 1 if read_committed else 0, "topics": [[t, p] for t, p in by_topic.items()]}


# ---- the actor ---------------------------------------------------------------------------------------------

class FetchingBrokerActor(BrokerActor):
    """broker/N of a consumer: BrokerActor plus the fetch loop. ``fetch`` holds FetchSettings.to_dict()."""

    def __init__(self, ctx: ActorContext, node_id: int, host: str, port: int, config: dict[str, Any] | None = None,
                 owner: str = "main", fetch: dict[str, Any] | None = None) -> None:
        super().__init__(ctx, node_id, host, port, config, owner)
        self.fetch_settings = (FetchSettings.from_dict(fetch) if fetch is not None
                               else FetchSettings.from_config(config or {}))
        self.planner = FetchPlanner(self.fetch_settings)
        #: (topic, partition) → ctoppar name that receives its data
        self.fetch_owner: dict[tuple[str, int], str] = {}
        #: (topic, partition) → (version, logical offset or reset policy) waiting for ListOffsets
        self.resolving: dict[tuple[str, int], tuple[int, int]] = {}
        self.fetch_requests = 0
        self.fetched_bytes = 0

    # ---- ops from ctoppars --------------------------------------------------------------------------------

    @on(cops.BROKER_FETCH_START)
    def _on_fetch_start(self, op: Op) -> None:
        p = op.payload
        topic, partition, offset, version = p["topic"], int(p["partition"]), int(p["offset"]), int(p["version"])
        key = (topic, partition)
        target = self.planner.target(topic, partition)
        if target is not None and version < target.version:
            return  # a stale start (the partition moved on meanwhile)
        self.fetch_owner[key] = op.sender or cops.ctoppar_name(topic, partition)
        self.resolving.pop(key, None)
        if offset >= 0:
            self.planner.start(topic, partition, offset, version)
        else:
            # Not fetchable until ListOffsets resolves the logical offset.
            target = self.planner.start(topic, partition, 0, version)
            target.state = AWAITING_RESET
            self._resolve(topic, partition, version, offset)
        self.planner.set_flow(topic, partition, bool(p.get("flow_open", True)))
        self.planner.set_paused(topic, partition, bool(p.get("paused", False)))
        self._pump_fetch()

    @on(cops.BROKER_FETCH_STOP)
    def _on_fetch_stop(self, op: Op) -> None:
        key = (op.payload["topic"], int(op.payload["partition"]))
        target = self.planner.target(*key)
        version = op.payload.get("version")
        if target is not None and version is not None and int(version) < target.version:
            return
        self.planner.stop(*key)
        self.fetch_owner.pop(key, None)
        self.resolving.pop(key, None)

    @on(cops.FETCH_FLOW)
    def _on_fetch_flow(self, op: Op) -> None:
        p = op.payload
        target = self.planner.target(p["topic"], int(p["partition"]))
        if target is None or int(p.get("version", target.version)) < target.version:
            return
        self.planner.set_flow(p["topic"], int(p["partition"]), bool(p["open"]))
        self._pump_fetch()

    @on(_WAKE)
    def _on_wake(self, _op: Op) -> None:
        self._pump_fetch()

    @on(_RETRY_RESOLVE)
    def _on_retry_resolve(self, op: Op) -> None:
        p = op.payload
        key = (p["topic"], int(p["partition"]))
        if self.resolving.get(key) == (int(p["version"]), int(p["logical"])):
            self._resolve(key[0], key[1], int(p["version"]), int(p["logical"]))

    # ---- offset resolution (logical start offsets and auto.offset.reset) ----------------------------------

    def _resolve(self, topic: str, partition: int, version: int, logical: int) -> None:
        """ListOffsets for ``logical`` (OFFSET_BEGINNING / OFFSET_END), then start fetching there."""
        key = (topic, partition)
        self.resolving[key] = (version, logical)
        timestamp = EARLIEST_TIMESTAMP if logical == OFFSET_BEGINNING else LATEST_TIMESTAMP
        args = list_offsets_args([(topic, partition, timestamp)], self.fetch_settings.read_committed)
        request = Op(ops.REQUEST, {"kind": _LIST_OFFSETS_KIND, "args": args,
                                   "timeout_ms": self.socket_timeout_ms})
        self.ctx.request(self.ctx.name, request, lambda reply: self._on_resolved(key, version, logical, reply),
                         self.socket_timeout_ms / 1000 + 1.0)

    def _on_resolved(self, key: tuple[str, int], version: int, logical: int, reply: Op) -> None:
        if self.resolving.get(key) != (version, logical):
            return  # stopped, restarted or seeked meanwhile
        target = self.planner.target(*key)
        if target is None or target.version != version:
            self.resolving.pop(key, None)
            return
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
            log.debug("broker/%s: resolving %s %s failed (%s), retrying", self.node_id, key, logical, code)
            if code in (KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.UNKNOWN_TOPIC_OR_PART,
                        KafkaError.LEADER_NOT_AVAILABLE, KafkaError.FENCED_LEADER_EPOCH):
                self.ctx.send(self.owner, Op(ops.METADATA_REFRESH, {"topic": key[0], "reason": "ListOffsets"}))
            self.ctx.timer(_RESOLVE_RETRY_S, Op(_RETRY_RESOLVE, {"topic": key[0], "partition": key[1],
                                                                  "version": version, "logical": logical}))
            return
        self.resolving.pop(key, None)
        self.planner.seek(key[0], key[1], offset, version)
        owner = self.fetch_owner.get(key)
        if owner:
            self.ctx.send(owner, Op(cops.FETCH_POSITION, {"topic": key[0], "partition": key[1],
                                                          "version": version, "offset": offset}))
        self._pump_fetch()

    # ---- the fetch loop -----------------------------------------------------------------------------------

    def _pump_fetch(self) -> None:
        if self.conn.state != ConnState.UP or self.planner.in_flight is not None or self.stopped:
            return
        plan = self.planner.build()
        if plan is None:
            return
        version = self.conn.pick_version(FETCH_KEY, FETCH_MIN_VERSION, FETCH_MAX_VERSION)
        if version is None:
            self.planner.handle_failure(plan, KafkaError._UNSUPPORTED_FEATURE)
            for key in plan.partitions:
                owner = self.fetch_owner.get(key)
                if owner:
                    self.ctx.send(owner, Op(cops.FETCH_ERROR, {
                        "topic": key[0], "partition": key[1], "version": plan.partitions[key][0],
                        "offset": plan.partitions[key][1], "code": KafkaError._UNSUPPORTED_FEATURE,
                        "reason": f"broker {self.node_id} does not support Fetch v{FETCH_MIN_VERSION}+"}))
            return
        body = plan.request.encode(version)
        self.fetch_requests += 1
        self.conn.enqueue(Request(FETCH_KEY, version, [body], version >= _FETCH_FLEXIBLE_FROM,
                                  timeout_ms=plan.timeout_ms, context=("fetch", plan, None, version)),
                          time.monotonic())
        self._write()

    def _dispatch(self, completions: list[Completion]) -> None:
        others = []
        fetched = False
        for completion in completions:
            context = completion.request.context
            if context and context[0] == "fetch":
                self._complete_fetch(context[1], context[3], completion)
                fetched = True
            else:
                others.append(completion)
        if others:
            super()._dispatch(others)
        if fetched:
            self._pump_fetch()

    def _complete_fetch(self, plan: FetchPlan, version: int, completion: Completion) -> None:
        if completion.error_code:
            self.planner.handle_failure(plan, completion.error_code)
            return
        try:
            response = FetchResponse.decode(completion.response, version)
        except Exception as exc:  # noqa: BLE001 - a malformed response fails this round only
            log.warning("broker/%s: malformed Fetch v%d response: %s", self.node_id, version, exc)
            self.planner.handle_failure(plan, KafkaError._BAD_MSG)
            return
        outcome = self.planner.handle_response(plan, response)
        self.fetched_bytes += outcome.received_bytes
        send = self.ctx.send
        for sl in outcome.slices:
            owner = self.fetch_owner.get((sl.topic, sl.partition))
            if owner:
                send(owner, Op(cops.FETCHED, sl.payload(), [sl.records] if len(sl.records) else None))
        for error in outcome.errors:
            owner = self.fetch_owner.get((error.topic, error.partition))
            if owner:
                send(owner, Op(cops.FETCH_ERROR, error.payload()))
        for reset in outcome.resets:
            logical = OFFSET_BEGINNING if reset.policy == "earliest" else OFFSET_END
            self._resolve(reset.topic, reset.partition, reset.version, logical)
        for topic in outcome.refresh_topics:
            send(self.owner, Op(ops.METADATA_REFRESH, {"topic": topic, "reason": "Fetch error"}))

    # ---- hooks into the broker actor ----------------------------------------------------------------------

    def _on_up(self, now: float) -> None:
        super()._on_up(now)
        self._pump_fetch()

    @on("BROKER_TICK")
    def _on_tick(self, op: Op) -> None:
        super()._on_tick(op)
        self._pump_fetch()



class ConsumerMainActor(MainActor):
    """The consumer's ``main``: spawns fetching broker actors and gives them the fetch properties."""

    KIND = "consumer"

    def __init__(self, ctx: ActorContext, config: dict[str, Any] | None = None, app: str = "app",
                 broker_factory: str = FETCHING_BROKER_FACTORY) -> None:
        super().__init__(ctx, config, app, broker_factory)

    def _broker_config(self) -> dict[str, Any]:
        config = super()._broker_config()
        for name in FETCH_PROPERTIES:
            if self.config.get(name) is not None:
                config[name] = self.config[name]
        return config
