"""The broker side of fetching: which partitions go into the next Fetch request, and what its response means.

Runs in: broker actors (one FetchPlanner per broker connection, pure and process-free). Owns, per partition
this broker leads: the fetch position and toppar version it fetches at, flow control (prefetch credit open
or closed), pause, error backoff (fetch.error.backoff.ms), the partition fetch size, and partition EOF
bookkeeping. It builds Fetch requests (fetch.wait.max.ms, fetch.min.bytes, fetch.max.bytes,
max.partition.fetch.bytes, client.rack) and, on the response, scans batch headers to advance the position
without decoding, classifies errors, and emits ``FetchedSlice``s for toppar actors to decode.

Fetch sessions (KIP-227, Fetch v7+; ``FetchSession``): the first request is a full one with session id 0 and
epoch 0, which asks the broker for a session; once it answers with a session id, each request carries that id
and the next epoch, lists only the partitions that are new or whose fetch position, size or leader epoch
changed, and names in ``forgotten_topics_data`` the session's partitions that are not to be fetched now
(stopped, paused, flow-closed, backing off); the broker then answers only for partitions with news. A broker
that answers session id 0 keeps every request full. FETCH_SESSION_ID_NOT_FOUND, INVALID_FETCH_SESSION_EPOCH,
any other failed request or a lost connection start over with a full request. An incremental request is built
without walking every partition: the planner keeps the fetchable partitions' parameters from the last build and
looks again only at partitions changed since (every mutator marks them) or waiting out a backoff.

Closest replica (KIP-392, Fetch v11+): ``preferred_read_replica`` in an answer is reported as a
``PreferredReplica`` (the toppar moves its fetching there); on a partition fetched from a follower
(``follower=True``), leadership errors and an OFFSET_OUT_OF_RANGE beyond the follower's high watermark are
reported as ``revert`` (the toppar goes back to the leader) instead of resetting the offset, as librdkafka does.

Version stamping: every planned partition remembers the version and offset it was requested at; a response
for a partition that was seeked, re-assigned or stopped since is dropped, never delivered. One Fetch request
is in flight per broker at a time, as in librdkafka.

Partition EOF (enable.partition.eof), as librdkafka: once per reaching, when the position after a response
is at the end the response reports, the high watermark (the last stable offset under read_committed). An
empty answer alone is no end: brokers leave a partition's records empty once the response reached
fetch.max.bytes, below its high watermark.

Tansu quirk handled here: a partition answer may be far larger than partition_max_bytes (it is scanned like
any other).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from kqactors.errors import KafkaError
from kqactors.protocol.generated.fetch import (
    FetchPartition,
    FetchRequest,
    FetchResponse,
    FetchTopic,
    ForgottenTopic,
    PartitionData,
)
from kqactors.records import CorruptRecordError, scan_record_set

from .classify import classify_fetch_error
from .decoder import FetchedSlice
from .settings import ERROR, FetchSettings

__all__ = ["FetchPlanner", "FetchPlan", "FetchOutcome", "FetchTarget", "FetchSession", "OffsetReset",
           "PartitionError", "PreferredReplica", "FETCH_SESSION_MIN_VERSION", "HELD_WAIT_MS", "RESTART_WINDOW_S",
           "ACTIVE", "AWAITING_RESET", "STOPPED", "REVERTED"]

ACTIVE = "active"
AWAITING_RESET = "awaiting-reset"
"""Offset out of range: waiting for the actor to resolve auto.offset.reset and call ``seek``."""
STOPPED = "stopped"
"""Fetching stopped by an error the application must act on (auto.offset.reset=error)."""
REVERTED = "reverted"
"""Handed over: a follower that cannot serve it any more (back to the leader), or the broker named a preferred
read replica; not fetched here until the toppar moves or restarts it."""

_AUTO_OFFSET_RESET = KafkaError._AUTO_OFFSET_RESET
_OFFSET_OUT_OF_RANGE = KafkaError.OFFSET_OUT_OF_RANGE
_SESSION_ERRORS = frozenset({KafkaError.FETCH_SESSION_ID_NOT_FOUND, KafkaError.INVALID_FETCH_SESSION_EPOCH})
FETCH_SESSION_MIN_VERSION = 7
"""Fetch versions from this one on have SessionId/SessionEpoch (KIP-227)."""
_INT32_MAX = 2_147_483_647
_MSG_SIZE_TOO_LARGE = KafkaError.MSG_SIZE_TOO_LARGE
_BAD_MSG = KafkaError._BAD_MSG
_MAX_PARTITION_BYTES = 1_000_000_000
_ZERO_UUID = bytes(16)
HELD_WAIT_MS = 20
"""max_wait_ms of a Fetch while a flow-closed partition has data waiting on the broker (see _scan):
the partitions in the request may be at their end, and the held one must not wait behind their long-poll."""
RESTART_WINDOW_S = 1.0
"""After an active partition stops here, Fetches wait HELD_WAIT_MS at most for this long, or until it starts
again: a stop is mostly the first half of a restart (a ctoppar moving to another host, a seek, a leader
change), and the restart's offset may be well before its end (what the stopped ctoppar had fetched but not
yet handed to the app is fetched again), so it must not wait behind the others' long-poll at their end —
that wait was the 0.3–0.5 s stall after every adaptive-placement move."""

Key = tuple[str, int]


class FetchTarget:
    """Fetch state of one partition led by this broker."""

    __slots__ = ("topic", "partition", "topic_id", "version", "offset", "current_leader_epoch",
                 "last_fetched_epoch", "paused", "flow_open", "state", "backoff_until", "max_bytes",
                 "eof_offset", "last_error", "high_watermark", "last_stable_offset", "log_start_offset",
                 "follower", "key")

    def __init__(self, topic: str, partition: int, offset: int, version: int, max_bytes: int) -> None:
        self.topic = topic
        self.partition = partition
        self.key = (topic, partition)
        self.topic_id: bytes | None = None
        self.version = version
        self.offset = offset
        self.current_leader_epoch = -1
        self.last_fetched_epoch = -1
        self.paused = False
        self.flow_open = True
        self.state = ACTIVE
        self.backoff_until = 0.0
        self.max_bytes = max_bytes
        self.eof_offset = -1
        self.last_error = 0
        self.high_watermark = -1
        self.last_stable_offset = -1
        self.log_start_offset = -1
        #: fetched from a preferred read replica, not the leader (KIP-392)
        self.follower = False

    def is_fetchable(self, now: float) -> bool:
        return self.state == ACTIVE and self.flow_open and not self.paused and self.backoff_until <= now

    def __repr__(self) -> str:
        return (f"FetchTarget({self.topic}[{self.partition}] v{self.version} @{self.offset} {self.state}"
                f"{' paused' if self.paused else ''}{'' if self.flow_open else ' flow-closed'})")


class FetchPlan:
    """A built Fetch request and, per partition, the (version, offset, max_bytes) it was requested at."""

    __slots__ = ("request", "partitions", "timeout_ms", "topic_ids_known", "session_parts", "incremental",
                 "revisited")

    def __init__(self, request: FetchRequest, partitions: dict[Key, tuple[int, int, int]], timeout_ms: int,
                 topic_ids_known: bool, session_parts: dict[Key, tuple[int, int, int]] | None = None,
                 incremental: bool = False) -> None:
        self.request = request
        #: every partition this round fetches (in an incremental request, also those it does not list)
        self.partitions = partitions
        #: the fetch session's partitions once this request succeeds (None: no session)
        self.session_parts = session_parts
        self.incremental = incremental
        #: incremental: the partitions looked at again for this request (changed since the last one)
        self.revisited: list[Key] = []
        #: Local timeout for this request: fetch.wait.max.ms + socket.timeout.ms.
        self.timeout_ms = timeout_ms
        #: False when some topic id is unknown: the broker actor must then use Fetch v12 or older.
        self.topic_ids_known = topic_ids_known


class OffsetReset:
    """OFFSET_OUT_OF_RANGE: resolve ``policy`` (earliest/latest) with ListOffsets, then ``seek`` the planner."""

    __slots__ = ("topic", "partition", "version", "offset", "policy", "code")

    def __init__(self, topic: str, partition: int, version: int, offset: int, policy: str, code: int) -> None:
        self.topic = topic
        self.partition = partition
        self.version = version
        self.offset = offset
        self.policy = policy
        self.code = code

    def __repr__(self) -> str:
        return f"OffsetReset({self.topic}[{self.partition}] v{self.version} @{self.offset} → {self.policy})"


class PartitionError:
    """An error for the application, at a partition's fetch position, stamped with the toppar version."""

    __slots__ = ("topic", "partition", "version", "offset", "code", "reason")

    def __init__(self, topic: str, partition: int, version: int, offset: int, code: int, reason: str) -> None:
        self.topic = topic
        self.partition = partition
        self.version = version
        self.offset = offset
        self.code = code
        self.reason = reason

    def payload(self) -> dict[str, Any]:
        return {"topic": self.topic, "partition": self.partition, "version": self.version,
                "offset": self.offset, "code": self.code, "reason": self.reason}

    def __repr__(self) -> str:
        return f"PartitionError({self.topic}[{self.partition}] v{self.version} @{self.offset} code={self.code})"


class PreferredReplica:
    """KIP-392: the broker names another replica (``broker_id``) to fetch the partition from."""

    __slots__ = ("topic", "partition", "version", "broker_id")

    def __init__(self, topic: str, partition: int, version: int, broker_id: int) -> None:
        self.topic = topic
        self.partition = partition
        self.version = version
        self.broker_id = broker_id

    def __repr__(self) -> str:
        return f"PreferredReplica({self.topic}[{self.partition}] v{self.version} → {self.broker_id})"


class FetchSession:
    """KIP-227 client side of one broker connection: session id, next epoch and the partitions the broker
    holds for the session, each with the (offset, max_bytes, leader epoch) it was last sent with."""

    __slots__ = ("session_id", "epoch", "partitions", "full_requests", "incremental_requests", "resets")

    def __init__(self) -> None:
        self.session_id = 0
        self.epoch = 0
        self.partitions: dict[Key, tuple[int, int, int]] = {}
        self.full_requests = 0
        self.incremental_requests = 0
        self.resets = 0

    @property
    def established(self) -> bool:
        return self.session_id != 0

    def reset(self) -> None:
        """Start over: the next request is a full one asking for a new session."""
        if self.session_id:
            self.resets += 1
        self.session_id = 0
        self.epoch = 0
        self.partitions = {}

    def __repr__(self) -> str:
        return f"FetchSession(id={self.session_id} epoch={self.epoch} {len(self.partitions)} partitions)"


class FetchOutcome:
    """What a Fetch response (or failure) asks the broker actor to do."""

    __slots__ = ("slices", "resets", "errors", "refresh_topics", "leader_errors", "dropped", "received_bytes",
                 "preferred", "reverts")

    def __init__(self) -> None:
        #: Hand each to its toppar actor (records as a raw frame).
        self.slices: list[FetchedSlice] = []
        #: Resolve auto.offset.reset for these.
        self.resets: list[OffsetReset] = []
        #: Deliver to the application through the partition's toppar (ordered with its messages).
        self.errors: list[PartitionError] = []
        #: Ask main for a metadata refresh of these topics.
        self.refresh_topics: set[str] = set()
        #: (topic, partition, error code) whose leadership looks stale: main may move them.
        self.leader_errors: list[tuple[str, int, int]] = []
        #: Partition answers ignored because the partition changed (seek, re-assign, stop) meanwhile.
        self.dropped = 0
        self.received_bytes = 0
        #: KIP-392: partitions the broker sends to another replica
        self.preferred: list[PreferredReplica] = []
        #: (topic, partition, version, code): fetched from a follower that cannot serve them; back to the leader
        self.reverts: list[tuple[str, int, int, int]] = []


class FetchPlanner:
    """Per-broker fetch loop logic; the broker actor feeds it ops and responses and sends what it builds."""

    def __init__(self, settings: FetchSettings, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.settings = settings
        self._clock = clock
        self._targets: dict[Key, FetchTarget] = {}
        self._names_by_id: dict[bytes, str] = {}
        self._rotation = 0
        #: partitions stopped while active, not started since: when (see RESTART_WINDOW_S)
        self._departed: dict[Key, float] = {}
        self.in_flight: FetchPlan | None = None
        self.session = FetchSession()
        # What an incremental request needs without walking every partition (see _incremental_view): the
        # fetchable partitions' planned (version, offset, max_bytes) and session parameters as of the last
        # build, the partitions changed since, and those waiting out a backoff or a closed flow.
        self._live_valid = False
        self._live_ids_known = True
        self._live_planned: dict[Key, tuple[int, int, int]] = {}
        self._live_params: dict[Key, tuple[int, int, int]] = {}
        self._dirty: set[Key] = set()
        self._backing_off: set[Key] = set()
        self._closed: set[Key] = set()

    # -- partitions joining, leaving and changing -----------------------------------------------------
    def start(self, topic: str, partition: int, offset: int, version: int, *, leader_epoch: int = -1,
              topic_id: bytes | None = None, follower: bool = False) -> FetchTarget:
        """Begin (or restart) fetching a partition at an absolute ``offset`` for toppar ``version``."""
        _check_offset(offset)
        key = (topic, partition)
        self._departed.pop(key, None)
        target = self._targets.get(key)
        if target is None:
            target = FetchTarget(topic, partition, offset, version, self.settings.max_partition_fetch_bytes)
            self._targets[key] = target
        else:
            self._restart(target, offset, version)
        self._dirty.add(key)
        target.current_leader_epoch = leader_epoch
        target.follower = follower
        if topic_id is not None and topic_id != _ZERO_UUID:
            target.topic_id = topic_id
            self._names_by_id[topic_id] = topic
        return target

    def stop(self, topic: str, partition: int) -> bool:
        """Stop fetching (partition left this broker or was unassigned); late answers for it are dropped."""
        key = (topic, partition)
        self._dirty.add(key)
        target = self._targets.pop(key, None)
        if target is not None and target.state == ACTIVE and not target.paused:
            self._departed[key] = self._clock()
        return target is not None

    def seek(self, topic: str, partition: int, offset: int, version: int, *, leader_epoch: int | None = None
             ) -> bool:
        """Move the fetch position (seek, resumed app position, or a resolved offset reset).

        ``version`` must not be older than the partition's; returns False (and changes nothing) if it is or
        the partition is unknown here.
        """
        _check_offset(offset)
        target = self._targets.get((topic, partition))
        if target is None or version < target.version:
            return False
        self._restart(target, offset, version)
        if leader_epoch is not None:
            target.current_leader_epoch = leader_epoch
        return True

    def _restart(self, target: FetchTarget, offset: int, version: int) -> None:
        self._dirty.add(target.key)
        target.offset = offset
        target.version = version
        target.state = ACTIVE
        target.backoff_until = 0.0
        target.eof_offset = -1
        target.last_error = 0
        target.last_fetched_epoch = -1
        target.max_bytes = self.settings.max_partition_fetch_bytes

    def set_flow(self, topic: str, partition: int, open_: bool) -> None:
        """Prefetch credit opened or closed for the partition (see prefetch.PrefetchCredit)."""
        target = self._targets.get((topic, partition))
        if target is not None:
            target.flow_open = open_
            self._dirty.add(target.key)

    def set_paused(self, topic: str, partition: int, paused: bool) -> None:
        target = self._targets.get((topic, partition))
        if target is not None:
            target.paused = paused
            self._dirty.add(target.key)

    def set_leader_epoch(self, topic: str, partition: int, leader_epoch: int) -> None:
        target = self._targets.get((topic, partition))
        if target is not None:
            target.current_leader_epoch = leader_epoch
            self._dirty.add(target.key)

    def target(self, topic: str, partition: int) -> FetchTarget | None:
        return self._targets.get((topic, partition))

    def targets(self) -> list[FetchTarget]:
        return list(self._targets.values())

    # -- building requests ----------------------------------------------------------------------------
    def fetchable(self, now: float | None = None) -> list[FetchTarget]:
        """Partitions that would go into a request now, in this round's (rotated) order."""
        return self._scan(self._clock() if now is None else now)[0]

    def _scan(self, now: float) -> tuple[list[FetchTarget], bool]:
        """One pass over the partitions (thousands on one broker are the case this is written for): the
        fetchable ones, rotated, and whether a flow-closed one has data waiting on the broker. Then a long-poll
        would keep it from being fetched for up to fetch.wait.max.ms after its flow opens again (a Fetch in
        flight cannot be cut short, and brokers hold one for the partitions already at their end), so the
        request waits HELD_WAIT_MS at most."""
        ready = []
        held = False
        append = ready.append
        for t in self._targets.values():
            if t.state != ACTIVE or t.paused:
                continue
            if t.flow_open:
                if t.backoff_until <= now:
                    append(t)
            elif 0 <= t.offset < t.high_watermark:
                held = True
        if len(ready) > 1:
            # Rotate so that a response cut short by fetch.max.bytes does not always favour the same ones.
            start = self._rotation % len(ready)
            ready = ready[start:] + ready[:start]
        return ready, held

    def build(self, now: float | None = None, *, sessions: bool = False) -> FetchPlan | None:
        """The next Fetch request, or None when one is in flight or no partition may be fetched now.

        ``sessions``: the connection's Fetch version has fetch sessions (v7+); without, every request is full
        and sessionless (epoch -1)."""
        if self.in_flight is not None:
            return None
        now = self._clock() if now is None else now
        session = self.session
        if not sessions:
            session.reset()
        incremental = sessions and session.established and self._live_valid
        if incremental:
            ready, held, planned, session_parts = self._incremental_view(now)
        else:
            ready, held = self._scan(now)
            planned, session_parts = {}, {}
        if not ready and not planned:
            return None
        self._rotation += 1
        settings = self.settings
        known = session.partitions if incremental else {}
        topics: dict[str, FetchTopic] = {}
        ids_known = self._live_ids_known if incremental else True
        known_get = known.get
        for target in ready:
            key = target.key
            offset, max_bytes = target.offset, target.max_bytes
            planned[key] = (target.version, offset, max_bytes)
            params = session_parts[key] = (offset, max_bytes, target.current_leader_epoch)
            if target.topic_id is None:
                ids_known = False
            if known_get(key) == params:
                continue  # in the session unchanged: the broker fetches it without being told
            topic = topics.get(target.topic)
            if topic is None:
                topic = topics[target.topic] = FetchTopic(topic=target.topic, topic_id=target.topic_id or _ZERO_UUID,
                                                          partitions=[])
            topic.partitions.append(FetchPartition(
                partition=target.partition, current_leader_epoch=target.current_leader_epoch,
                fetch_offset=target.offset, last_fetched_epoch=-1, log_start_offset=-1,
                partition_max_bytes=target.max_bytes,
            ))  # fmt: skip
        forgotten: dict[str, ForgottenTopic] = {}
        for topic_name, partition in sorted(known.keys() - session_parts.keys()) if known else ():
            entry = forgotten.get(topic_name)
            if entry is None:
                topic_id = next((t.topic_id for t in self._targets.values() if t.topic == topic_name and t.topic_id),
                                None)
                entry = forgotten[topic_name] = ForgottenTopic(topic=topic_name, topic_id=topic_id or _ZERO_UUID,
                                                               partitions=[])
            entry.partitions.append(partition)
        max_wait_ms = settings.fetch_wait_max_ms
        if max_wait_ms > HELD_WAIT_MS and (held or (self._departed and self._restart_expected(now))):
            max_wait_ms = HELD_WAIT_MS
        if incremental:
            session_id, epoch = session.session_id, session.epoch
            session.incremental_requests += 1
        else:
            session_id, epoch = 0, (0 if sessions else -1)
            session.full_requests += 1
        request = FetchRequest(
            replica_id=-1, max_wait_ms=max_wait_ms, min_bytes=settings.fetch_min_bytes,
            max_bytes=settings.fetch_max_bytes, isolation_level=settings.isolation_level, session_id=session_id,
            session_epoch=epoch, topics=list(topics.values()), forgotten_topics_data=list(forgotten.values()),
            rack_id=settings.client_rack,
        )  # fmt: skip
        if sessions and not incremental:
            self._live_reset(planned, session_parts)
        elif not sessions:
            self._live_valid = False
        self._live_ids_known = ids_known
        self.in_flight = FetchPlan(request, planned, settings.request_timeout_ms, ids_known,
                                   session_parts if sessions else None, incremental)
        if incremental:
            self.in_flight.revisited = [t.key for t in ready]
        return self.in_flight

    def _live_reset(self, planned: dict[Key, tuple[int, int, int]],
                    session_parts: dict[Key, tuple[int, int, int]]) -> None:
        """A full scan just ran: the live view is what it found."""
        self._live_planned = dict(planned)
        self._live_params = dict(session_parts)
        self._dirty.clear()
        self._backing_off = set()
        self._closed = set()
        for t in self._targets.values():
            if t.state == ACTIVE and not t.paused and t.key not in planned:
                (self._backing_off if t.flow_open else self._closed).add(t.key)
        self._live_valid = True

    def _restart_expected(self, now: float) -> bool:
        """A partition stopped here within RESTART_WINDOW_S and not started since (older ones are forgotten)."""
        departed = self._departed
        for key, when in list(departed.items()):
            if now - when >= RESTART_WINDOW_S:
                del departed[key]
        return bool(departed)

    def _incremental_view(self, now: float) -> tuple[list[FetchTarget], bool, dict[Key, tuple[int, int, int]],
                                                     dict[Key, tuple[int, int, int]]]:
        """For an incremental request, without walking every partition: the partitions to look at again
        (changed since the last build, or whose backoff may be over) as ``ready`` targets for the caller to
        list if their parameters differ from the session's, and copies of the live planned / session maps
        for everything else that is fetchable. Partitions that stopped being fetchable are left out of the
        maps, so the caller's forgotten list (session minus maps) names them."""
        live_planned, live_params = self._live_planned, self._live_params
        backing_off, closed, targets = self._backing_off, self._closed, self._targets
        look = self._dirty | backing_off
        self._dirty = set()
        ready: list[FetchTarget] = []
        for key in look:
            live_planned.pop(key, None)
            live_params.pop(key, None)
            backing_off.discard(key)
            closed.discard(key)
            t = targets.get(key)
            if t is None or t.state != ACTIVE or t.paused:
                continue
            if not t.flow_open:
                closed.add(key)
            elif t.backoff_until > now:
                backing_off.add(key)
            else:
                ready.append(t)
        held = False
        for key in closed:
            t = targets.get(key)
            if t is not None and 0 <= t.offset < t.high_watermark:
                held = True
                break
        planned = dict(live_planned)
        session_parts = dict(live_params)
        for t in ready:  # the caller adds them to the copies; the live maps get them here
            live_planned[t.key] = (t.version, t.offset, t.max_bytes)
            live_params[t.key] = (t.offset, t.max_bytes, t.current_leader_epoch)
        return ready, held, planned, session_parts

    def next_wakeup(self, now: float | None = None) -> float | None:
        """Clock time at which a backed-off partition becomes fetchable (None: nothing is waiting on time)."""
        now = self._clock() if now is None else now
        times = [t.backoff_until for t in self._targets.values()
                 if t.state == ACTIVE and t.flow_open and not t.paused and t.backoff_until > now]
        return min(times) if times else None

    # -- handling responses ---------------------------------------------------------------------------
    def handle_failure(self, plan: FetchPlan, code: int, now: float | None = None) -> FetchOutcome:
        """The whole request failed (connection lost, timeout, request-level error): back every partition off."""
        now = self._clock() if now is None else now
        self._finish(plan)
        if plan.session_parts is not None:
            self.session.reset()  # the broker may or may not have moved the session on: start over
        until = now + self.settings.fetch_error_backoff_ms / 1000.0
        for key, (version, offset, _max_bytes) in plan.partitions.items():
            target = self._targets.get(key)
            if target is not None and target.version == version and target.offset == offset:
                target.backoff_until = until
                self._dirty.add(key)
        return FetchOutcome()

    def handle_response(self, plan: FetchPlan, response: FetchResponse, now: float | None = None) -> FetchOutcome:
        """Interpret a Fetch response for the partitions of ``plan``."""
        now = self._clock() if now is None else now
        self._finish(plan)
        outcome = FetchOutcome()
        top_error = response.error_code
        if top_error in _SESSION_ERRORS and plan.session_parts is not None:
            self.session.reset()  # the partitions did nothing wrong: a full request goes out at once
            return outcome
        if top_error and not response.responses:
            self.handle_failure(plan, top_error, now)
            return outcome
        session = self.session
        if plan.session_parts is not None and top_error:
            session.reset()  # the request failed as a whole: the next one starts a session afresh
        elif plan.session_parts is not None:
            if plan.incremental:
                session.epoch = session.epoch + 1 if session.epoch < _INT32_MAX else 1
                session.partitions = plan.session_parts
            elif response.session_id:
                session.session_id, session.epoch = response.session_id, 1
                session.partitions = plan.session_parts
        for topic_response in response.responses:
            topic = topic_response.topic or self._names_by_id.get(topic_response.topic_id, "")
            for data in topic_response.partitions:
                key = (topic, data.partition_index)
                self._dirty.add(key)  # whatever the answer changes is looked at again by the next build
                planned = plan.partitions.get(key)
                if planned is None:
                    continue  # not asked for (or unknown topic id): nothing to hand anywhere
                target = self._targets.get(key)
                version, offset, max_bytes = planned
                if (target is None or target.version != version or target.offset != offset
                        or target.state != ACTIVE):
                    outcome.dropped += 1
                    continue
                target.high_watermark = data.high_watermark
                target.last_stable_offset = data.last_stable_offset
                target.log_start_offset = data.log_start_offset
                code = top_error or data.error_code
                replica = data.preferred_read_replica
                if replica is not None and replica >= 0 and not code:
                    # KIP-392: no records come with it; the toppar moves the partition's fetching there.
                    outcome.preferred.append(PreferredReplica(target.topic, target.partition, version, replica))
                    target.state = REVERTED  # not fetched here again until the toppar moves or restarts it
                    continue
                if code:
                    self._partition_error(target, code, now, outcome, data.high_watermark)
                else:
                    target.last_error = 0
                    self._partition_data(target, data, max_bytes, now, outcome)
        if plan.incremental and self.settings.enable_partition_eof and not top_error:
            self._eof_of_unanswered(plan, response, now, outcome)
        return outcome

    def _eof_of_unanswered(self, plan: FetchPlan, response: FetchResponse, now: float,
                           outcome: FetchOutcome) -> None:
        """A partition that changed since the last request (restarted or seeked, perhaps to where it already
        was, so not even listed) and that the broker left out of its answer has nothing new: its watermarks are
        the ones last seen. Sessionless, the broker would have answered it empty, and that answer is where a
        partition EOF comes from; so it does here too."""
        if not plan.revisited:
            return
        answered = {(t.topic, p.partition_index) for t in response.responses for p in t.partitions}
        for key in plan.revisited:
            planned = plan.partitions.get(key)
            target = self._targets.get(key)
            if (key in answered or planned is None or target is None or target.version != planned[0]
                    or target.offset != planned[1] or target.state != ACTIVE or target.high_watermark < 0):
                continue
            unchanged = PartitionData(partition_index=key[1], high_watermark=target.high_watermark,
                                      last_stable_offset=target.last_stable_offset,
                                      log_start_offset=target.log_start_offset)
            self._partition_data(target, unchanged, planned[2], now, outcome)

    def _finish(self, plan: FetchPlan) -> None:
        if self.in_flight is plan:
            self.in_flight = None

    def _partition_data(self, target: FetchTarget, data: Any, max_bytes: int, now: float,
                        outcome: FetchOutcome) -> None:
        records = data.records if data.records is not None else b""
        offset = target.offset
        raw: bytes | memoryview = b""
        next_offset = offset
        if len(records):
            outcome.received_bytes += len(records)
            try:
                scan = scan_record_set(records)
            except CorruptRecordError as exc:
                self._report(target, _BAD_MSG, f"Fetch response has a malformed record set: {exc}", outcome)
                target.backoff_until = now + self.settings.fetch_error_backoff_ms / 1000.0
                return
            if not scan.batches:
                self._grow(target, scan.partial_size, max_bytes, now, outcome)
                return
            last = scan.batches[-1]
            next_offset = max(offset, last.next_offset)
            raw = records[: scan.consumed]
            if last.partition_leader_epoch >= 0:
                target.last_fetched_epoch = last.partition_leader_epoch
            target.max_bytes = self.settings.max_partition_fetch_bytes
        end_offset = data.high_watermark
        if self.settings.read_committed and data.last_stable_offset >= 0:
            end_offset = data.last_stable_offset
        at_end = next_offset >= end_offset
        eof_offset = -1
        if self.settings.enable_partition_eof and at_end and target.eof_offset != next_offset:
            eof_offset = target.eof_offset = next_offset
        if len(raw) or eof_offset >= 0:
            aborted = ([(a.producer_id, a.first_offset) for a in data.aborted_transactions or ()]
                       if self.settings.read_committed else [])
            outcome.slices.append(FetchedSlice(
                target.topic, target.partition, target.version, offset, next_offset, raw,
                high_watermark=data.high_watermark, last_stable_offset=data.last_stable_offset,
                log_start_offset=data.log_start_offset, aborted=aborted, eof_offset=eof_offset,
            ))  # fmt: skip
        target.offset = next_offset

    def _grow(self, target: FetchTarget, needed: int, max_bytes: int, now: float, outcome: FetchOutcome) -> None:
        """Only a truncated entry came back (pre-KIP-74 brokers): ask for more, or give up if we already did."""
        if needed > max_bytes and max_bytes < _MAX_PARTITION_BYTES:
            target.max_bytes = min(max(needed, 2 * max_bytes), _MAX_PARTITION_BYTES)
            return
        self._report(target, _MSG_SIZE_TOO_LARGE,
                     f"Message batch of {needed} bytes at offset {target.offset} cannot be fetched with "
                     f"a partition fetch size of {max_bytes} bytes", outcome)
        target.backoff_until = now + self.settings.fetch_error_backoff_ms / 1000.0

    def _partition_error(self, target: FetchTarget, code: int, now: float, outcome: FetchOutcome,
                         high_watermark: int = -1) -> None:
        action = classify_fetch_error(code)
        if target.follower and (action.refresh or (code == _OFFSET_OUT_OF_RANGE and target.offset > high_watermark)):
            # A follower that lost the partition or lags behind the position: back to the leader (librdkafka
            # does the same instead of resetting the offset), which then answers for itself.
            target.state = REVERTED
            target.last_error = code
            outcome.reverts.append((target.topic, target.partition, target.version, code))
            return
        if action.refresh:
            outcome.refresh_topics.add(target.topic)
            outcome.leader_errors.append((target.topic, target.partition, code))
        if action.reset:
            policy = self.settings.auto_offset_reset
            if policy == ERROR:
                target.state = STOPPED
                self._report(target, _AUTO_OFFSET_RESET,
                             f"Fetch failed due to requested offset {target.offset} not available on the "
                             f"broker (Offset out of range) and auto.offset.reset is error", outcome)
            else:
                target.state = AWAITING_RESET
                outcome.resets.append(OffsetReset(target.topic, target.partition, target.version,
                                                  target.offset, policy, code))
        if action.report and not (action.report_once and target.last_error == code):
            self._report(target, code, f"Fetch failed at offset {target.offset}", outcome)
        target.last_error = code
        if action.backoff:
            target.backoff_until = now + self.settings.fetch_error_backoff_ms / 1000.0

    @staticmethod
    def _report(target: FetchTarget, code: int, reason: str, outcome: FetchOutcome) -> None:
        outcome.errors.append(PartitionError(target.topic, target.partition, target.version, target.offset,
                                             code, reason))


def _check_offset(offset: int) -> None:
    if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
        raise ValueError(f"fetch offset must be an absolute offset >= 0 (resolve logical offsets first), "
                         f"not {offset!r}")

