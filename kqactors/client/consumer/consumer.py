"""The Consumer facade: confluent-kafka's Consumer API on top of the actor runtime.

Runs in: the app process (the user's thread). Owns the public Consumer: its consumer toppar actors
(spread over the toppar hosts; ``main`` is the client handle's), the assignment and its versions
(``PositionTable``), the queue of fetched batches served by poll()/consume() (``MessageBatch``: messages
are built only when taken), prefetch credit returned as the application consumes (``CreditReturner``),
seek/pause/resume, restarting a ctoppar whose host died at the app's position, adaptive placement (toppar hosts
join as the record rate climbs and retire when it drops; a ctoppar moves by a stop and a start on its new host
at the next offset not yet queued for the app, see ``_move_toppar``), watermarks, offsets_for_times and close. Group methods delegate to ``kqactors.client.consumer.group.GroupClient``
(see docs/consumer-ops.md). What every client shares (runtime start, error_cb, statistics, host-death
notices, list_topics) is the client handle's (kqactors.client.handle), held as ``_handle``.

Waiting: poll()/consume() wait in short slices so Ctrl+C (KeyboardInterrupt) interrupts them promptly;
consume(n, timeout) waits until it has n messages or the timeout passes, as librdkafka's. Threads: any
number of threads may call poll()/consume() at once (one serves the queue at a time; each message goes to
one of them).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Mapping
from typing import Any

from kqactors.client.consumer.group import GroupClient
from kqactors.client.consumer.offsets import OffsetLookup
from kqactors.client.handle import ClientHandle, ClusterMetadata, timeout_seconds
from kqactors.client.handle.recovery import MainState
from kqactors.config import Config
from kqactors.core.consumer.packing import MessageBatch
from kqactors.core.consumer.position import PositionTable
from kqactors.core.consumer.prefetch import CreditReturner, partition_limits
from kqactors.core.consumer.settings import FetchSettings
from kqactors.errors import KafkaError, KafkaException
from kqactors.message import (
    OFFSET_BEGINNING,
    OFFSET_END,
    OFFSET_INVALID,
    OFFSET_STORED,
    Message,
    TopicPartition,
)
from kqactors.ops import client as ops
from kqactors.ops import consumer as cops
from kqactors.runtime.op import ActorError, Op

__all__ = ["Consumer"]

_log = logging.getLogger("kqactors.client.consumer.consumer")

MAIN_FACTORY = "kqactors.actors.consumer_main:ConsumerMainActor"
CTOPPAR_FACTORY = "kqactors.actors.ctoppar:ConsumerTopparActor"
_WAIT_SLICE_S = 0.1          # longest uninterrupted wait: keeps Ctrl+C prompt
_MAX_CONSUME = 1_000_000
#: a moved ctoppar that has not said C_READY this long after its SPAWN was sent (its host failed to create it) is
#: started on main's host instead, waiting for the answer there
_MOVE_WAIT_S = 30.0
_LOGICAL_OFFSETS = (OFFSET_BEGINNING, OFFSET_END, OFFSET_STORED, OFFSET_INVALID)

Key = tuple[str, int]


def _check_partitions(partitions: Any, what: str) -> list[TopicPartition]:
    if isinstance(partitions, TopicPartition):
        raise TypeError(f"{what}() expects a list of TopicPartition")
    if not isinstance(partitions, (list, tuple)):
        raise TypeError(f"{what}() expects a list of TopicPartition, not {type(partitions).__name__}")
    for tp in partitions:
        if not isinstance(tp, TopicPartition):
            raise TypeError(f"{what}() expects TopicPartition elements, not {type(tp).__name__}")
        if not tp.topic:
            raise KafkaException(KafkaError(KafkaError._INVALID_ARG, f"{what}(): topic must be set"))
        if tp.partition < 0:
            raise KafkaException(KafkaError(KafkaError._INVALID_ARG, f"{what}(): invalid partition {tp.partition}"))
    return list(partitions)


def _check_offset(offset: int, what: str) -> int:
    if offset >= 0 or offset in _LOGICAL_OFFSETS:
        return offset
    raise KafkaException(KafkaError(KafkaError._INVALID_ARG, f"{what}(): invalid offset {offset}"))


_Taken = tuple[str | None, int, int | None, int]
"""Where a batch's messages (or the client events) start in a call's output: (topic, partition, version: None
for events, index). A Ctrl+C gives what was taken back by it (Consumer._carry)."""

class _Toppar:
    """App-side handle of one spawned consumer toppar actor."""

    __slots__ = ("name", "host", "incarnation", "restarts", "held", "moved_at")

    def __init__(self, name: str, host: str, restarts: int) -> None:
        self.name = name
        self.host = host
        #: the actor's own id of its current life (from C_READY); a new one means it was restarted
        self.incarnation: str | None = None
        self.restarts = restarts
        #: moving (spawned elsewhere without waiting for the answer): the ops for it, sent once it says C_READY
        self.held: list[Op] | None = None
        self.moved_at = 0.0


def whole_ms(seconds: float) -> float:
    """A poll()/consume() timeout as confluent-kafka passes it to librdkafka: whole milliseconds, truncated
    (``int(timeout * 1000)``), so consume(n, 0.0007) returns what is there at once, as confluent-kafka's does.
    Waiting the 0.7 ms precisely kept messages that had already arrived until the deadline (about +0.5 ms per
    message in benchmarks/bench_latency.py's loop, which consumes until its next send)."""
    if seconds == float("inf"):
        return seconds
    return int(seconds * 1000) / 1000


class Consumer:
    """Kafka consumer, a drop-in for ``confluent_kafka.Consumer`` (assign-based fetching; group methods
    delegate to the group client). ``config`` uses librdkafka property names, plus ``error_cb``, ``logger``
    and ``kqactors.hosts`` (number of toppar host processes)."""

    def __init__(self, config: Mapping[str, Any] | None = None, **kwargs: Any) -> None:
        conf = Config(config, kind="consumer", **kwargs)
        self._handle = handle = ClientHandle(conf, "consumer", _log)
        self._conf = conf
        self._logger = handle.logger
        self._settings = FetchSettings.from_config(handle.shipped)
        self._socket_timeout_s = handle.socket_timeout_s
        self._positions = PositionTable(auto_store=self._settings.enable_auto_offset_store)
        self._returner = CreditReturner()
        self._ready: deque[MessageBatch] = deque()
        #: client-level events poll()/consume() return before any fetched message (errors of the group)
        self._events: deque[Message] = deque()
        # One thread at a time serves the queue and takes messages (poll()/consume() from many threads).
        self._consume_lock = threading.RLock()
        self._appending: tuple[Op, MessageBatch] | None = None  # the fetched batch being queued, and its op
        #: messages a Ctrl+C took from a consume()/poll() before it returned them: the next call returns them
        #: first, each as (topic, partition, version: None for a client event, message)
        self._carried: deque[tuple[str | None, int, int | None, Message]] = deque()
        self._toppars: dict[Key, _Toppar] = {}
        self._moving: dict[str, _Toppar] = {}  # by name: the ctoppars spawned on another host, not ready yet
        self._watermarks: dict[Key, tuple[int, int]] = {}
        self._topic_errors: dict[str, int] = {}
        self._unsent: dict[tuple[str, str], Op] = {}
        self._closed = False
        self._hosts = handle.hosts
        self._toppars_per_host = [0] * self._hosts
        # adaptive placement (kqactors.hosts=-1): toppar hosts join as the record rate climbs, retire as it drops
        self._placement = handle.placement
        self._joining: str | None = None  # a toppar host started, not running yet
        self._consumed = 0  # records handed to the app since the last placement check
        #: per partition, (version, offset of the last message queued for the app at it): where a moved ctoppar
        #: resumes (what is queued stays queued)
        self._queued_upto: dict[Key, tuple[int, int]] = {}
        #: placement moves done (statistics, tests)
        self.moves_done = 0
        #: adaptive placement's last events, (time.monotonic(), what): a host started, ran, ctoppars moved and how
        #: long the app's thread spent moving them (benchmarks' timelines, tests)
        self.placement_log: deque[tuple[float, str]] = deque(maxlen=64)
        self._group: GroupClient | None = None
        handle.stats_fields = self._stats_fields
        handle.on_actors_down(self._actors_down)
        self._main_state = MainState(handle.shipped)  # the ctoppars a restarted main tells their leader again
        # The toppar hosts import the decode pipeline while the main host starts main: not one host after
        # the other at the first assign() (~0.15 s each), and nothing here waits for it.
        self._rt = handle.start(MAIN_FACTORY, [CTOPPAR_FACTORY])
        self._toppar_args = {"settings": self._settings.to_dict(), "app_qid": 0}
        self._offsets = OffsetLookup(handle, self._settings.read_committed, self._socket_timeout_s)
        if conf.get("group.id"):
            self._group = GroupClient(self, self._rt, self._conf)

    # ---- assignment ------------------------------------------------------------------------------------
    def assign(self, partitions: list[TopicPartition]) -> None:
        """Replace the assignment and start fetching each partition at its offset (logical offsets are
        resolved: OFFSET_STORED from the committed offset if any, else auto.offset.reset)."""
        self._check_open()
        partitions = _check_partitions(partitions, "assign")
        for tp in partitions:
            _check_offset(tp.offset, "assign")
        self._apply_assignment(partitions, incremental=False, add=True)

    def unassign(self) -> None:
        self._check_open()
        self._apply_assignment([], incremental=False, add=True)

    def incremental_assign(self, partitions: list[TopicPartition]) -> None:
        self._check_open()
        partitions = _check_partitions(partitions, "incremental_assign")
        for tp in partitions:
            _check_offset(tp.offset, "incremental_assign")
            if self._positions.get(tp.topic, tp.partition) is not None:
                raise KafkaException(KafkaError(KafkaError._CONFLICT,
                                                f"{tp.topic} [{tp.partition}] is already assigned"))
        self._apply_assignment(partitions, incremental=True, add=True)

    def incremental_unassign(self, partitions: list[TopicPartition]) -> None:
        self._check_open()
        partitions = _check_partitions(partitions, "incremental_unassign")
        self._apply_assignment(partitions, incremental=True, add=False)

    def assignment(self) -> list[TopicPartition]:
        self._check_open()
        return [TopicPartition(p.topic, p.partition) for p in self._positions.assigned()]

    def _apply_assignment(self, partitions: list[TopicPartition], incremental: bool, add: bool) -> None:
        """The one place the assignment changes (also called by the group client on rebalance)."""
        if self._group is not None and hasattr(self._group, "auto_commit_assigned"):
            # assign()/unassign() replace the whole assignment (a partition kept is removed and added again, its
            # stored offset committed as librdkafka does); incremental_unassign() removes the ones it names
            if not incremental:
                leaving = {(p.topic, p.partition) for p in self._positions.assigned()}
            else:
                leaving = set() if add else {(tp.topic, tp.partition) for tp in partitions}
            if leaving:
                self._group.auto_commit_assigned(leaving)  # enable.auto.commit: before their positions go
        if not incremental:
            removed = self._positions.unassign()
            keep = {(tp.topic, tp.partition) for tp in partitions}
            self._stop_fetching([p for p in removed if (p.topic, p.partition) not in keep])
        elif not add:
            self._stop_fetching(self._positions.unassign([(tp.topic, tp.partition) for tp in partitions]))
        if add and partitions:
            entries = [(tp.topic, tp.partition, tp.offset, tp.leader_epoch if tp.leader_epoch is not None else -1)
                       for tp in partitions]
            parts = self._positions.assign(entries)
            stored = [p for p in parts if p.start_offset == OFFSET_STORED]
            if stored and self._group is not None and hasattr(self._group, "resolve_stored_offsets"):
                self._group.resolve_stored_offsets(stored)  # sets start_offset from committed offsets
            limits = partition_limits(self._settings, len(self._positions.assigned()))
            starts = []
            for part in parts:
                key = (part.topic, part.partition)
                self._returner.set_limits(key, *limits)
                toppar = self._ensure_toppar(part.topic, part.partition)
                if toppar is not None:
                    starts.append((toppar.name, Op(cops.FETCH_START, cops.fetch_start_payload(
                        part.topic, part.partition, part.start_offset, part.version, part.leader_epoch,
                        *limits))))
            self._send_many(starts)
        self._update_limits()

    def _stop_fetching(self, removed: list[Any]) -> None:
        stops = []
        for part in removed:
            key = (part.topic, part.partition)
            self._returner.forget(key)
            self._watermarks.pop(key, None)
            self._queued_upto.pop(key, None)
            toppar = self._toppars.get(key)
            if toppar is not None:
                stops.append((toppar.name, Op(cops.FETCH_STOP, {"version": part.version + 1})))
        self._send_many(stops)

    def _update_limits(self) -> None:
        assigned = self._positions.assigned()
        if not assigned:
            return
        limits = partition_limits(self._settings, len(assigned))
        updates = []
        for part in assigned:
            key = (part.topic, part.partition)
            self._returner.set_limits(key, *limits)
            toppar = self._toppars.get(key)
            if toppar is not None:
                updates.append((toppar.name, Op(cops.PREFETCH_LIMITS,
                                                {"max_messages": limits[0], "max_bytes": limits[1]})))
        self._send_many(updates)

    def _ensure_toppar(self, topic: str, partition: int) -> _Toppar | None:
        key = (topic, partition)
        toppar = self._toppars.get(key)
        if toppar is not None:
            return toppar
        name = cops.ctoppar_name(topic, partition)
        # Least-loaded toppar host (round-robin in spawn order): a name hash can put every partition of a
        # small topic on one host, leaving the other cores idle while that host decodes everything. With no
        # toppar hosts (kqactors.hosts=0) ctoppars share the main host.
        host = 0
        if self._placement is not None:
            host = self._placement.host_for(topic, partition)
        elif self._hosts:
            host = 1 + min(range(self._hosts), key=lambda index: (self._toppars_per_host[index], index))
            self._toppars_per_host[host - 1] += 1
        try:
            host_key = self._rt.spawn(name, CTOPPAR_FACTORY, {"topic": topic, "partition": partition,
                                                              **self._toppar_args}, host=host)
        except ValueError as exc:
            raise KafkaException(KafkaError(KafkaError._INVALID_ARG, f"cannot consume {topic} [{partition}]: {exc}")
                                 ) from None
        except ActorError as exc:
            self._logger.log(logging.ERROR, f"kqactors consumer could not start {name}: {exc}")
            return None
        toppar = self._toppars[key] = _Toppar(name, host_key, self._rt.host_restarts(host_key))
        self._main_state.toppar_spawned(topic, partition, name)
        return toppar

    def _send_many(self, items: list[tuple[str, Op]]) -> None:
        """Send to ctoppars; an op for a toppar whose host is restarting is kept and sent again later
        (the latest op per toppar and type wins: each carries the full state)."""
        if not items:
            return
        moving = self._moving
        if moving:  # held until the moved actor runs: see _move_toppar
            sending = []
            for name, op in items:
                toppar = moving.get(name)
                if toppar is not None and toppar.held is not None:
                    toppar.held.append(op)
                else:
                    sending.append((name, op))
            if not sending:
                return
            items = sending
        try:
            self._rt.send_many(items)
            return
        except ActorError:
            pass
        for name, op in items:  # one toppar's host is restarting: the others still get theirs
            try:
                self._rt.send(name, op)
            except ActorError as exc:
                self._logger.log(logging.DEBUG, f"kqactors consumer: {name} unreachable now: {exc}")
                if op.type != cops.CREDIT:  # credit of a dead toppar is void
                    self._unsent[(name, op.type)] = op

    def _retry_unsent(self) -> None:
        unsent, self._unsent = self._unsent, {}
        self._send_many([(name, op) for (name, _type), op in unsent.items()])

    # ---- seek, pause, resume, position -------------------------------------------------------------------
    def seek(self, partition: TopicPartition) -> None:
        """Move the fetch position of an assigned partition; anything fetched before is dropped."""
        self._check_open()
        if not isinstance(partition, TopicPartition):
            raise TypeError("seek() expects a TopicPartition")
        offset = _check_offset(partition.offset, "seek")
        part = self._positions.get(partition.topic, partition.partition)
        if part is None:
            raise KafkaException(KafkaError(KafkaError._UNKNOWN_PARTITION,
                                            f"seek(): {partition.topic} [{partition.partition}] is not assigned"))
        epoch = partition.leader_epoch if partition.leader_epoch is not None else -1
        self._positions.seek(partition.topic, partition.partition, offset, epoch)
        self._restart(part)

    def _restart(self, part: Any) -> None:
        limits = partition_limits(self._settings, len(self._positions.assigned()))
        toppar = self._toppars.get((part.topic, part.partition))
        if toppar is not None:
            self._send_many([(toppar.name, Op(cops.FETCH_START, cops.fetch_start_payload(
                part.topic, part.partition, part.restart_offset, part.version, part.leader_epoch, *limits,
                paused=part.paused)))])

    def pause(self, partitions: list[TopicPartition]) -> None:
        self._check_open()
        stops = []
        for tp in _check_partitions(partitions, "pause"):
            if self._positions.get(tp.topic, tp.partition) is None:
                continue
            version = self._positions.pause(tp.topic, tp.partition)
            toppar = self._toppars.get((tp.topic, tp.partition))
            if toppar is not None:
                stops.append((toppar.name, Op(cops.FETCH_STOP, {"version": version})))
        self._send_many(stops)

    def resume(self, partitions: list[TopicPartition]) -> None:
        self._check_open()
        for tp in _check_partitions(partitions, "resume"):
            part = self._positions.get(tp.topic, tp.partition)
            if part is None:
                continue
            self._positions.resume(tp.topic, tp.partition)
            self._restart(part)

    def position(self, partitions: list[TopicPartition]) -> list[TopicPartition]:
        """The next offset to consume per partition (OFFSET_INVALID before the first message)."""
        self._check_open()
        out = []
        for tp in _check_partitions(partitions, "position"):
            offset, epoch = self._positions.position(tp.topic, tp.partition)
            out.append(TopicPartition(tp.topic, tp.partition, offset,
                                      leader_epoch=epoch if epoch >= 0 else None))
        return out

    # ---- consuming -------------------------------------------------------------------------------------
    def poll(self, timeout: float | None = None) -> Message | None:
        """One message (or error/EOF event), waiting up to ``timeout`` seconds (None/-1: forever)."""
        self._check_open()
        messages = self._consume(1, whole_ms(timeout_seconds(timeout)))
        return messages[0] if messages else None

    def consume(self, num_messages: int = 1, timeout: float | None = -1) -> list[Message]:
        """``num_messages`` messages (error and EOF events count as messages), or fewer when ``timeout``
        seconds (None/-1: forever) pass first: as librdkafka's consume, it waits for the whole batch."""
        self._check_open()
        if isinstance(num_messages, bool) or not isinstance(num_messages, int):
            raise TypeError("num_messages must be an int")
        if not 0 < num_messages <= _MAX_CONSUME:
            raise ValueError(f"num_messages must be between 1 and {_MAX_CONSUME}")
        return self._consume(num_messages, whole_ms(timeout_seconds(timeout)))

    def _consume(self, limit: int, timeout: float) -> list[Message]:
        deadline = time.monotonic() + timeout
        lock = self._consume_lock
        if not lock.acquire(False):  # another thread serves the queue: wait for it, within our timeout
            if not lock.acquire(True, -1 if timeout == float("inf") else timeout):
                return []
        try:
            if self._group is not None and hasattr(self._group, "on_poll"):
                self._group.on_poll()  # max.poll.interval.ms bookkeeping
            out: list[Message] = []
            taken: list[_Taken] = []  # where in out each batch's messages start
            try:
                if self._carried:
                    self._take_carried(limit, out, taken)
                while True:
                    self._serve_ops(0.0)
                    self._take(limit - len(out), out, taken)
                    if len(out) >= limit:
                        return out
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        return out
                    self._flush_credit()
                    self._serve_ops(min(remaining, _WAIT_SLICE_S))
            except KeyboardInterrupt:
                self._carry(out, taken)
                raise
        finally:
            lock.release()

    def _carry(self, out: list[Message], taken: list[_Taken]) -> None:
        """Ctrl+C in a consume()/poll() that had taken messages: they were never returned, so they go back in
        front of the queue (the next call returns them first) and each partition's position goes back to the
        first of them (a commit meanwhile does not pass messages the app never saw)."""
        if not out:
            return
        carried = [(None, 0, None, msg) for msg in out[:taken[0][3] if taken else len(out)]]
        rewind: dict[tuple[str, int], tuple[int, Message]] = {}
        for (topic, partition, version, start), end in zip(taken, [*(t[3] for t in taken[1:]), len(out)],
                                                           strict=True):
            for msg in out[start:end]:
                carried.append((topic, partition, version, msg))
                if version is not None and msg._error is None:
                    rewind.setdefault((topic, partition), (version, msg))  # type: ignore[index]
        if self._carried and self._carried[0][3] is out[-1]:
            self._carried.popleft()  # interrupted between _take_carried's append and its popleft: in out already
        self._carried.extendleft(reversed(carried))
        for (topic, partition), (version, msg) in rewind.items():
            if self._positions.accepts(topic, partition, version):
                self._positions.consumed(topic, partition, msg._offset - 1, msg._leader_epoch)

    def _take_carried(self, limit: int, out: list[Message],
                      taken: list[_Taken]) -> None:
        """The messages a Ctrl+C left (see _carry) that are still current, in their order, up to ``limit``."""
        carried = self._carried
        positions = self._positions
        while carried and len(out) < limit:
            topic, partition, version, msg = carried[0]
            if version is not None and not positions.accepts(topic, partition, version):  # type: ignore[arg-type]
                carried.popleft()  # seeked, paused or unassigned since: stale
                continue
            taken.append((topic, partition, version, len(out)))
            out.append(msg)
            carried.popleft()
            if version is not None and msg._error is None:
                positions.consumed(topic, partition, msg._offset, msg._leader_epoch)  # type: ignore[arg-type]

    def _take(self, limit: int, out: list[Message], taken: list[_Taken]) -> None:
        """Up to ``limit`` queued events and messages into ``out``; ``taken`` notes where each batch's messages
        (and the events) start, so that a Ctrl+C can give them back (_carry). The order of the steps below is what makes that exact: a
        KeyboardInterrupt comes after a call returns, so the batch's messages are either in ``out`` or still in
        the batch (rewound) when it lands."""
        events = self._events
        if events:
            taken.append((None, 0, None, len(out)))
            while events and limit > 0:
                out.append(events.popleft())
                limit -= 1
        ready = self._ready
        positions = self._positions
        while ready and limit > 0:
            batch = ready[0]
            if not positions.accepts(batch.topic, batch.partition, batch.version):
                ready.popleft()  # seeked, paused or unassigned since it was fetched: stale
                continue
            before = len(out)
            taken.append((batch.topic, batch.partition, batch.version, before))
            mark = batch.mark()
            try:
                messages, count, used = batch.take(limit)
                out.extend(messages)
            except KeyboardInterrupt:
                if len(out) == before:
                    batch.rewind(mark)  # nothing reached out: the batch keeps its messages
                raise
            if not len(batch):
                ready.popleft()
            limit -= len(messages)
            last = None
            for msg in reversed(messages):
                if msg._error is None:
                    last = msg
                    break
            skipped = batch.skipped  # control records / aborted data after the last message taken
            if skipped is not None and (last is None or skipped[0] > last._offset):
                positions.consumed(batch.topic, batch.partition, skipped[0], skipped[1])
            elif last is not None:
                positions.consumed(batch.topic, batch.partition, last._offset, last._leader_epoch)
            self._consumed += count
            credit = self._returner.consumed((batch.topic, batch.partition), batch.version, count, used)
            if credit is not None:
                self._send_credit((batch.topic, batch.partition), *credit)

    def _send_credit(self, key: Key, version: int, messages: int, nbytes: int) -> None:
        toppar = self._toppars.get(key)
        if toppar is not None:
            self._send_many([(toppar.name, Op(cops.CREDIT, {"version": version, "messages": messages,
                                                            "nbytes": nbytes}))])

    def _flush_credit(self) -> None:
        for key, version, messages, nbytes in self._returner.flush():
            self._send_credit(key, version, messages, nbytes)  # type: ignore[arg-type]

    def _serve_ops(self, wait: float) -> None:
        events = self._rt.events
        op = events.poll(wait)
        while op is not None:
            try:
                self._handle_op(op)
            except KeyboardInterrupt:
                self._finish_interrupted(op)
                raise
            op = events.poll(0)
        self._handle.serve_notices()  # a host died: see _actors_down
        if self._placement is not None:
            self._adapt()
        if self._unsent:
            self._retry_unsent()

    def _handle_op(self, op: Op) -> None:
        payload = op.payload if isinstance(op.payload, dict) else {}
        if op.type == cops.CONSUMER_BATCH:
            topic, partition, version = payload["topic"], payload["partition"], payload["version"]
            if not self._positions.accepts(topic, partition, version) or not op.frames:
                return
            high = payload.get("high_watermark", -1)
            if high >= 0:
                self._watermarks[(topic, partition)] = (payload.get("log_start_offset", -1), high)
            batch = MessageBatch(topic, partition, op.frames[0], version)  # zero-copy view
            last = payload.get("last_offset", -1)
            if last >= 0:
                self._queued_upto[(topic, partition)] = (version, last)
            self._appending = (op, batch)  # no call between this and the append: see _finish_interrupted
            self._ready.append(batch)
        elif op.type == cops.CTOPPAR_READY:
            self._on_toppar_ready(payload["topic"], payload["partition"], payload.get("incarnation"))
        elif op.type == ops.TOPIC_PARTITIONS:
            self._on_topic_partitions(payload)
        elif self._handle.handle_op(op) is not None:  # ERR, STATS, CHILD_EXITED (restarts: _actors_down)
            pass
        elif self._group is not None and hasattr(self._group, "handle_op"):
            self._group.handle_op(op)

    def _finish_interrupted(self, op: Op) -> None:
        """Ctrl+C landed between taking ``op`` off the queue and the end of its handling: make sure a fetched
        batch is queued exactly once (else its messages would be skipped) and repeat the idempotent
        handlers; other ops (callbacks of the app) are not run again."""
        if op.type == cops.CONSUMER_BATCH:
            appending = self._appending
            if appending is not None and appending[0] is op and any(b is appending[1] for b in self._ready):
                return
            self._handle_op(op)
        elif op.type in (cops.CTOPPAR_READY, ops.TOPIC_PARTITIONS):
            self._handle_op(op)

    def _stats_fields(self) -> tuple[dict[str, Any], dict[Key, dict[str, Any]]]:
        """What only the app knows (positions, stored and committed offsets, the fetch queue, the group), for
        the handle to complete main's statistics snapshot with."""
        queued: dict[Key, list[int]] = {}
        for batch in self._ready:  # fetched messages waiting for consume(): librdkafka's fetch queue
            counts = queued.setdefault((batch.topic, batch.partition), [0, 0])
            counts[0] += len(batch)
            counts[1] += batch.remaining_bytes
        partitions = {(pos.topic, pos.partition): {
            "desired": True, "app_offset": pos.position, "stored_offset": pos.stored_offset,
            "stored_leader_epoch": pos.stored_leader_epoch, "committed_offset": pos.committed_offset,
            "fetchq_cnt": queued.get((pos.topic, pos.partition), [0, 0])[0],
            "fetchq_size": queued.get((pos.topic, pos.partition), [0, 0])[1],
        } for pos in self._positions.assigned()}  # fmt: skip
        app_fields: dict[str, Any] = {"replyq": len(self._ready), "msg_cnt": 0, "msg_size": 0}
        if self._group is not None:
            app_fields["cgrp"] = self._group.stats()
        return app_fields, partitions

    def _on_topic_partitions(self, payload: dict[str, Any]) -> None:
        """Assigned partitions of a topic that does not exist (or lacks them) surface as consumer errors."""
        topic = payload.get("topic")
        code = int(payload.get("error_code", 0) or 0)
        count = int(payload.get("partition_count", 0) or 0)
        for part in self._positions.assigned():
            if part.topic != topic:
                continue
            if code:
                error_code = KafkaError._UNKNOWN_TOPIC if code == KafkaError.UNKNOWN_TOPIC_OR_PART else code
                reason = f"Subscribed topic not available: {topic}: Broker: Unknown topic or partition" \
                    if error_code == KafkaError._UNKNOWN_TOPIC else f"topic {topic}: error {code}"
            elif count and part.partition >= count:
                error_code, reason = KafkaError._UNKNOWN_PARTITION, f"{topic} [{part.partition}] does not exist"
            else:
                self._topic_errors.pop(topic, None)
                continue
            if self._topic_errors.get(topic) == error_code:
                continue
            self._topic_errors[topic] = error_code
            self._ready.append(_error_batch(part.topic, part.partition, part.version, error_code, reason))

    def _deliver_error(self, error: KafkaError, topic: str | None = None) -> None:
        """A consumer error of the group (the group client's hook): poll()/consume() return it as an error
        event, as librdkafka's consumer queue; a fatal one goes to error_cb."""
        if error.fatal():
            self._handle.report_error(error)
            return
        self._events.append(_error_event(error, topic))

    def _on_toppar_ready(self, topic: str, partition: int, incarnation: str | None) -> None:
        """A ctoppar (re)started; a restarted one (its host died) starts again at the app's position."""
        toppar = self._toppars.get((topic, partition))
        if toppar is None:
            return
        if toppar.held is not None:
            if not self._runs_on_its_host(toppar, incarnation):
                return  # the life before the move, whose notice came late
            self._moved(toppar, incarnation)
            return
        previous, toppar.incarnation = toppar.incarnation, incarnation
        if previous is None or previous == incarnation:
            return  # its first life (started by assign), or a repeated notice
        self._restart_toppar(toppar, topic, partition)

    def _runs_on_its_host(self, toppar: _Toppar, incarnation: str | None) -> bool:
        """Whether a C_READY's ``incarnation`` (``<pid>-<ns>``) is of an actor on the host the toppar was moved to."""
        pid = self._rt.host_pid(toppar.host)
        if pid is None or not incarnation:
            return True  # in-process transport: one process
        return incarnation.split("-", 1)[0] == str(pid)

    def _moved(self, toppar: _Toppar, incarnation: str | None) -> None:
        """A moved ctoppar runs on its new host: what was held for it goes now (FETCH_START first)."""
        held, toppar.held = toppar.held or [], None
        toppar.incarnation = incarnation
        self._moving.pop(toppar.name, None)
        self._send_many([(toppar.name, op) for op in held])
        if not self._moving:
            waited = (time.monotonic() - toppar.moved_at) * 1000
            self.placement_log.append((time.monotonic(), f"moved ctoppars ready ({waited:.0f} ms after the last move)"))

    def _check_moves(self) -> None:
        """A moved ctoppar that never said C_READY (its host could not create it): start it on main's host."""
        now = time.monotonic()
        for (topic, partition), toppar in list(self._toppars.items()):
            if toppar.held is None or now - toppar.moved_at < _MOVE_WAIT_S:
                continue
            self._logger.log(logging.WARNING, f"kqactors consumer: {toppar.name} did not start on {toppar.host} "
                                              f"within {_MOVE_WAIT_S:.0f} s; starting it on the main host")
            self._move_toppar(topic, partition, toppar, 0, force=True, wait=True)

    def _restart_toppar(self, toppar: _Toppar, topic: str, partition: int) -> None:
        part = self._positions.get(topic, partition)
        if part is not None:
            self._positions.seek(topic, partition, part.restart_offset, part.leader_epoch)
            self._restart(part)

    def _actors_down(self, host: str, names: list[str], restarts: int) -> None:
        """A host died (served in poll()'s thread): the group learns first whether its actor went with it
        (on_lost runs, the assignment is dropped), then each ctoppar of that host (the main host too: with
        kqactors.hosts=0 it runs the ctoppars) starts again at the app's position; ops to it that cannot be
        sent while the host restarts are kept and sent once it is back. Main's host takes the broker actors
        that fetched for every ctoppar: all start again at the app's position (the restarted main, which
        knows them from ``_recovery``, tells them their leader, and they fetch from its new broker actor)."""
        if self._group is not None and hasattr(self._group, "on_actors_down"):
            self._group.on_actors_down(host, names, restarts)
        main_died = "main" in names  # with its broker actors: every ctoppar fetches again, at the app's position
        for (topic, partition), toppar in list(self._toppars.items()):
            if toppar.host == host and toppar.restarts != restarts:
                toppar.restarts = restarts
                self._restart_toppar(toppar, topic, partition)
            elif main_died:
                self._restart_toppar(toppar, topic, partition)

    # ---- adaptive placement ------------------------------------------------------------------------------
    def _adapt(self) -> None:
        """Adaptive placement, at each serve of the queue (poll()'s thread): count the records consumed, start a
        toppar host past the scale rate, move ctoppars to one that runs now, retire one after the rate has stayed
        low (kqactors/client/handle/placement.py)."""
        placement = self._placement
        consumed, self._consumed = self._consumed, 0
        if self._moving:
            self._check_moves()
        grow = placement.note(consumed, self._backlog)
        log = self.placement_log
        if self._joining is not None:
            if self._rt.host_ready(self._joining):
                index = self._rt.host_keys.index(self._joining)
                log.append((time.monotonic(), f"ready {self._joining}"))
                self._joining = None
                placement.grew(index)
                self._place_all()
        elif grow:
            try:
                index = self._handle.add_toppar_host([CTOPPAR_FACTORY])
            except (ActorError, OSError, ValueError) as exc:
                self._logger.log(logging.WARNING, f"kqactors consumer could not start a toppar host: {exc}")
                return
            self._joining = self._rt.host_keys[index]
            log.append((time.monotonic(), f"start {self._joining} at {placement.last_rate:.0f} msgs/s"))
        elif placement.retire_due():
            key = self._rt.host_keys[placement.retire()]
            self._place_all(retiring=True)
            self._handle.retire_toppar_host(key)
            log.append((time.monotonic(), f"retired {key}"))

    def _backlog(self) -> int:
        """Records known to be there and not consumed yet: each assigned partition's high watermark (from its
        last Fetch answer) minus the app's position (the log start while that is still a logical offset)."""
        total = 0
        watermarks = self._watermarks
        for part in self._positions.assigned():
            marks = watermarks.get((part.topic, part.partition))
            if marks is None:
                continue
            low, high = marks
            start = part.restart_offset if part.restart_offset >= 0 else max(low, 0)
            total += max(high - start, 0)
        return total

    def _place_all(self, retiring: bool = False) -> None:
        """Move every ctoppar whose place changed (a host joined, or one is ``retiring``: all must leave it)."""
        keys = self._rt.host_keys
        started, before = time.monotonic(), self.moves_done
        for (topic, partition), toppar in list(self._toppars.items()):
            target = self._placement.host_for(topic, partition)
            if keys[target] != toppar.host:
                self._move_toppar(topic, partition, toppar, target, retiring)
        now = time.monotonic()
        self.placement_log.append((now, f"moved {self.moves_done - before} in {(now - started) * 1000:.0f} ms"))

    def _move_toppar(self, topic: str, partition: int, toppar: _Toppar, target: int, force: bool = False,
                     wait: bool = False) -> None:
        """Stop the ctoppar and start it again, same name, on host ``target``, fetching from the next offset not
        yet queued for the app. The partition gets a new version: the old one's fetches still in flight are
        dropped on arrival, while the batches already queued are carried over to the new version (they come
        before what the new one fetches; the prefetch credit they return goes to the new one, which may then
        prefetch at most one queue's worth more, once). Its position (consumed, stored) does not change. A
        partition that has fetched nothing yet from a logical offset waits for a later move unless ``force``d
        (its host retires): it then starts again from the logical offset.

        The app's thread does not wait for the new host's answer (a host just started answers its first SPAWN
        only after importing the decode pipeline: 100-300 ms of a loaded machine per move, with no message
        taken meanwhile); what is queued keeps being consumed. The ops for the moved actor (its FETCH_START,
        credit) are held until its C_READY (``_moved``): sent earlier, they could overtake the SPAWN, which
        travels on the control channel, and the host would route them by the name's old place. ``wait``:
        wait for the answer (the fallback of a move that never became ready)."""
        key = (topic, partition)
        part = self._positions.get(topic, partition)
        resume = OFFSET_INVALID
        if part is not None:
            resume = part.restart_offset
            queued = self._queued_upto.get(key)
            if queued is not None and queued[0] >= part.version:
                resume = max(resume, queued[1] + 1)
            if resume < 0 and not force:
                return  # a logical start offset, nothing fetched yet (END would move on): moved at a later change
        try:
            self._rt.stop(toppar.name)
        except ActorError:
            pass  # its host died: as a restart
        args = {"topic": topic, "partition": partition, **self._toppar_args}
        try:
            host_key = self._rt.spawn(toppar.name, CTOPPAR_FACTORY, args, host=target, wait=wait)
        except (ActorError, ValueError) as exc:
            self._logger.log(logging.WARNING, f"kqactors consumer could not move {toppar.name}: {exc}")
            host_key = self._rt.spawn(toppar.name, CTOPPAR_FACTORY, args, host=0)  # main's host is always there
            wait = True
        toppar.host, toppar.restarts, toppar.incarnation = host_key, self._rt.host_restarts(host_key), None
        toppar.moved_at = time.monotonic()
        if wait:  # it runs: what was held for it goes now, and the FETCH_START below too
            held, toppar.held = toppar.held, None
            self._moving.pop(toppar.name, None)
            if held:
                self._send_many([(toppar.name, op) for op in held])
        elif toppar.held is None:
            toppar.held = []
            self._moving[toppar.name] = toppar
        self._main_state.toppar_spawned(topic, partition, toppar.name)
        self.moves_done += 1
        if part is None:
            return  # not assigned: it idles on its new host
        old_version = part.version
        position, epoch, start = part.position, part.leader_epoch, part.start_offset
        version = self._positions.seek(topic, partition, resume, epoch)
        part.position, part.leader_epoch, part.start_offset = position, epoch, start
        for batch in self._ready:
            if batch.topic == topic and batch.partition == partition and batch.version >= old_version:
                batch.version = version
        self._queued_upto[key] = (version, resume - 1)
        limits = partition_limits(self._settings, len(self._positions.assigned()))
        self._send_many([(toppar.name, Op(cops.FETCH_START, cops.fetch_start_payload(
            topic, partition, resume, version, epoch, *limits, paused=part.paused)))])

    # ---- offsets and metadata ----------------------------------------------------------------------------
    def get_watermark_offsets(self, partition: TopicPartition, timeout: float | None = None,
                              cached: bool = False) -> tuple[int, int]:
        """(low, high) watermark offsets; ``cached`` answers from the last fetch response (OFFSET_INVALID
        if none yet) without asking the broker."""
        self._check_open()
        if not isinstance(partition, TopicPartition):
            raise TypeError("get_watermark_offsets() expects a TopicPartition")
        if cached:
            return self._watermarks.get((partition.topic, partition.partition), (OFFSET_INVALID, OFFSET_INVALID))
        return self._offsets.watermarks(partition.topic, partition.partition,
                                        timeout_seconds(timeout, self._socket_timeout_s))

    def offsets_for_times(self, partitions: list[TopicPartition], timeout: float | None = None
                          ) -> list[TopicPartition]:
        """Per partition, the earliest offset whose timestamp is >= the ``offset`` field (a timestamp in ms);
        -1 (OFFSET_END) when there is none."""
        self._check_open()
        partitions = _check_partitions(partitions, "offsets_for_times")
        results = self._offsets.list_offsets([(tp.topic, tp.partition, tp.offset) for tp in partitions],
                                             timeout_seconds(timeout, self._socket_timeout_s))
        out = []
        for tp in partitions:
            code, offset = results[(tp.topic, tp.partition)]
            result = TopicPartition(tp.topic, tp.partition, offset if not code else OFFSET_INVALID)
            if code:
                result.error = KafkaError(code)
            out.append(result)
        return out

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> ClusterMetadata:
        """Cluster metadata (all topics, or just ``topic``); raises KafkaException on timeout or error."""
        self._check_open()
        return self._handle.list_topics(topic, timeout)

    def set_sasl_credentials(self, username: str, password: str) -> None:
        """Set the SASL username and password (PLAIN, SCRAM) used by every later authentication of every
        broker connection, the group coordinator's included; connections already up keep their session
        (librdkafka). TypeError for non-str."""
        self._check_open()
        group = getattr(self._group, "_name", None)
        self._handle.set_sasl_credentials(username, password, also=(group,) if group else ())

    # ---- group methods (kqactors/client/consumer/group.py) ---------------------------------------------------
    def _require_group(self, what: str) -> Any:
        self._check_open()
        if self._group is None:
            raise KafkaException(KafkaError(KafkaError._INVALID_ARG if not self._conf.get("group.id") else
                                            KafkaError._NOT_IMPLEMENTED,
                                            f"{what}() requires group.id and the group client"))
        return self._group

    def subscribe(self, topics: list[str], **callbacks: Any) -> None:
        self._require_group("subscribe").subscribe(topics, **callbacks)

    def unsubscribe(self) -> None:
        self._require_group("unsubscribe").unsubscribe()

    def commit(self, *args: Any, **kwargs: Any) -> Any:
        return self._require_group("commit").commit(*args, **kwargs)

    def committed(self, partitions: list[TopicPartition], timeout: float | None = None) -> list[TopicPartition]:
        return self._require_group("committed").committed(partitions, timeout)

    def store_offsets(self, *args: Any, **kwargs: Any) -> None:
        self._require_group("store_offsets").store_offsets(*args, **kwargs)

    def memberid(self) -> str | None:
        """The group member id the coordinator gave this consumer, or None before it joined (and after it
        left). Raises RuntimeError on a closed consumer."""
        return self._require_group("memberid").memberid()

    def cluster_id(self, timeout: float | None = -1) -> str:
        """The cluster id (from broker metadata, KIP-78): at once once known, else asked for, waiting up to
        ``timeout`` seconds (None/-1: socket.timeout.ms). Raises KafkaException(_TIMED_OUT) if none came."""
        self._check_open()
        return self._handle.cluster_id(timeout)

    def consumer_group_metadata(self) -> Any:
        return self._require_group("consumer_group_metadata").consumer_group_metadata()

    # ---- lifecycle ---------------------------------------------------------------------------------------
    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("Consumer closed")

    def close(self) -> None:
        """Leave the group (if any), stop fetching and every process. Safe to call twice."""
        if self._closed:
            return
        try:
            if self._group is not None and hasattr(self._group, "close"):
                self._group.close()
        finally:
            self._closed = True
            self._ready.clear()
            self._events.clear()
            self._carried.clear()
            self._handle.close()

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _error_event(error: KafkaError, topic: str | None) -> Message:
    """A client-level consumer error as poll() returns it: partition 0 and no offset, as confluent-kafka's."""
    return Message(topic, 0, OFFSET_INVALID, error=error)


def _error_batch(topic: str, partition: int, version: int, code: int, reason: str) -> MessageBatch:
    from kqactors.core.consumer.packing import MessageBatchWriter

    writer = MessageBatchWriter()
    writer.add_error(OFFSET_INVALID, code, reason)
    return MessageBatch(topic, partition, writer.getvalue(), version)
