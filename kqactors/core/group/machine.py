"""Runs in: the main host (driven by the cgrp actor). Owns the classic consumer-group protocol as a pure
state machine: coordinator discovery, JoinGroup/SyncGroup (the leader runs the assignor), heartbeats,
session and max.poll.interval timers, eager and cooperative rebalances with the app's callbacks, static
membership, LeaveGroup and close.

No sockets, no processes, no clock: every input carries ``now`` (milliseconds) and every method returns the
actions (kqactors.core.group.actions) the actor must execute, in order. Timers are deadlines the actor honours by
calling ``tick(now)`` at ``next_deadline()``.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Mapping
from typing import Any

from kqactors.core.group.actions import (
    Action,
    Closed,
    CoordinatorChanged,
    RebalanceCallback,
    RequestMetadata,
    SendRequest,
    StartFetching,
    StopFetching,
    SurfaceError,
)
from kqactors.core.group.assignors import COOPERATIVE, TopicPartitionKey
from kqactors.core.group.commits import COORDINATOR_ERRORS, OffsetsMixin
from kqactors.core.group.join import JoinMixin
from kqactors.core.group.offsets import OffsetBook
from kqactors.core.group.requests import coordinator_from_response
from kqactors.core.group.settings import GroupSettings
from kqactors.core.group.states import JOINING_STATES, CoordState, JoinState
from kqactors.errors import KafkaError, KafkaException
from kqactors.message import OFFSET_INVALID, OFFSET_STORED, TopicPartition
from kqactors.ops.group import ASSIGN, LOST, REVOKE

__all__ = ["GroupStateMachine", "CoordState", "JoinState"]

_DEFAULT_REQUEST_TIMEOUT_MS = 60000
_TIMER_ORDER = ("session", "max_poll", "coord_query", "join_retry", "heartbeat", "offset_fetch", "auto_commit")


def _tps(keys) -> list[TopicPartition]:
    return [TopicPartition(t, p) for t, p in sorted(keys)]


class GroupStateMachine(JoinMixin, OffsetsMixin):
    """One consumer's view of its group. See the module docstring for the driving contract."""

    def __init__(self, settings: GroupSettings, now: float, request_timeout_ms: int = _DEFAULT_REQUEST_TIMEOUT_MS):
        self.settings = settings
        self.request_timeout_ms = request_timeout_ms
        self.coord_state = CoordState.INIT
        self.join_state = JoinState.INIT
        self.coordinator: tuple[int, str, int] | None = None
        self.member_id = ""
        self.generation_id = -1
        self.leader_id = ""
        self.protocol_name: str | None = None
        self.subscription: list[str] = []
        self._patterns: list[re.Pattern[str]] = []
        self._assignment: set[TopicPartitionKey] = set()
        self._partition_counts: dict[str, int] | None = None
        self._metadata_wanted = False
        self._joined_snapshot: dict[str, int] = {}
        self._group_snapshot: dict[str, int] = {}
        self._leader_members: list[Any] | None = None
        self._pending: dict[int, tuple[str, Any]] = {}
        self._next_request_id = 1
        self._actions: list[Action] = []
        self._deadlines: dict[str, float] = {}
        self._steps: deque[tuple[str, Any]] = deque()
        self._awaiting: tuple[str, Any] | None = None
        self._join_wanted = False
        self._join_request: int | None = None
        self._sync_request: int | None = None
        self._heartbeat_request: int | None = None
        self._coord_request: int | None = None
        self._coord_backoff_ms = settings.retry_backoff_ms
        self._last_poll = now
        self._poll_exceeded = False
        self._fatal_error: KafkaError | None = None
        self._closing = False
        self._closed = False
        self._leave_request: int | None = None
        self._close_phase: str | None = None
        self._offsets = OffsetBook()
        self._offsets_wanted: set[TopicPartitionKey] = set()
        self._offsets_in_flight: set[TopicPartitionKey] = set()
        self._queued_commits: list[tuple[list, Any]] = []
        self._resumed = False  # resume(): the first metadata is the joined snapshot, not a change

    # --- read-only views -------------------------------------------------------------------------
    @property
    def assignment(self) -> list[TopicPartition]:
        return _tps(self._assignment)

    @property
    def is_leader(self) -> bool:
        return bool(self.member_id) and self.member_id == self.leader_id

    @property
    def is_steady(self) -> bool:
        return self.join_state is JoinState.STEADY

    @property
    def cooperative(self) -> bool:
        return self.settings.rebalance_protocol == COOPERATIVE

    @property
    def closed(self) -> bool:
        return self._closed

    def next_deadline(self) -> float | None:
        """When the actor must call ``tick`` next (None: no timer armed)."""
        return min(self._deadlines.values()) if self._deadlines else None

    # --- plumbing --------------------------------------------------------------------------------
    def _emit(self, action: Action) -> None:
        self._actions.append(action)

    def _emit_error(self, error: KafkaError) -> None:
        self._emit(SurfaceError(error))

    def _drain(self) -> list[Action]:
        actions, self._actions = self._actions, []
        return actions

    def _set_deadline(self, name: str, at: float) -> None:
        self._deadlines[name] = at

    def _cancel(self, *names: str) -> None:
        for name in names:
            self._deadlines.pop(name, None)

    def _coordinator_up(self) -> bool:
        return self.coord_state is CoordState.UP

    def _send(self, api: str, fields: dict[str, Any], context: Any, to_coordinator: bool = True,
              timeout_ms: int | None = None) -> int:
        request_id = self._next_request_id
        self._next_request_id += 1
        self._pending[request_id] = (api, context)
        broker = self.coordinator[0] if to_coordinator and self.coordinator else None
        self._emit(SendRequest(request_id, api, fields, broker, timeout_ms or self.request_timeout_ms))
        return request_id

    def _check_usable(self) -> None:
        if self._fatal_error is not None:
            raise KafkaException(self._fatal_error)
        if self._closing or self._closed:
            raise KafkaException(KafkaError(KafkaError._STATE, "consumer is closing or closed"))

    # --- app inputs ------------------------------------------------------------------------------
    def subscribe(self, topics: list[str], now: float) -> list[Action]:
        """Replace the subscription; names starting with ``^`` are regular expressions (librdkafka's rule)."""
        self._check_usable()
        if isinstance(topics, str) or not topics:
            raise KafkaException(KafkaError(KafkaError._INVALID_ARG, "subscribe() needs a non-empty list of topics"))
        for topic in topics:
            if not isinstance(topic, str) or not topic:
                raise KafkaException(KafkaError(KafkaError._INVALID_ARG, f"invalid topic {topic!r}"))
        try:
            patterns = [re.compile(t) for t in topics if t.startswith("^")]
        except re.error as exc:
            raise KafkaException(KafkaError(KafkaError._INVALID_ARG, f"bad topic pattern: {exc}")) from None
        self.subscription = sorted(set(topics))
        self._patterns = patterns
        self._metadata_wanted = True
        literal = [t for t in self.subscription if not t.startswith("^")]
        self._emit(RequestMetadata(None if patterns else literal))
        self._note_poll(now)
        if self.settings.enable_auto_commit and "auto_commit" not in self._deadlines:
            self._set_deadline("auto_commit", now + self.settings.auto_commit_interval_ms)
        self._request_rejoin(now)
        self._ensure_coordinator_query(now)
        self._advance(now)
        return self._drain()

    def resume(self, topics: list[str], member_id: str, generation_id: int, protocol_name: str | None,
               assignment: list[TopicPartitionKey], now: float) -> list[Action]:
        """Carry on as the member a predecessor machine was (its actor died with its host; the app kept this):
        same member id, generation and assignment, steady, heartbeating once the coordinator is found. The
        coordinator still counts the member in (its session has not expired), so nothing is revoked or
        fetched again; a rebalance or an unknown member is then handled as for any member."""
        self._check_usable()
        self.subscription = sorted(set(topics))
        self._patterns = [re.compile(t) for t in self.subscription if t.startswith("^")]
        self.member_id = member_id
        self.generation_id = int(generation_id)
        self.protocol_name = protocol_name
        self._assignment = {(str(t), int(p)) for t, p in assignment}
        self.join_state = JoinState.STEADY
        self._resumed = True
        self._metadata_wanted = True
        literal = [t for t in self.subscription if not t.startswith("^")]
        self._emit(RequestMetadata(None if self._patterns else literal))
        self._note_poll(now)
        if self.settings.enable_auto_commit and "auto_commit" not in self._deadlines:
            self._set_deadline("auto_commit", now + self.settings.auto_commit_interval_ms)
        self._set_deadline("session", now + self.settings.session_timeout_ms)
        self._ensure_coordinator_query(now)
        self._advance(now)
        return self._drain()

    def unsubscribe(self, now: float) -> list[Action]:
        """Revoke everything (committing if enable.auto.commit), leave the group, stay usable."""
        self._check_usable()
        self.subscription = []
        self._patterns = []
        self._join_wanted = False
        self._cancel("max_poll", "auto_commit", "join_retry")
        self._abandon_join()
        self._queue_revoke_all()
        self._steps.append(("leave", None))
        self._advance(now)
        return self._drain()

    def poll_called(self, now: float) -> list[Action]:
        """The app called poll()/consume(): restart max.poll.interval; rejoin if it had expired."""
        self._note_poll(now)
        return self._drain()

    def _note_poll(self, now: float) -> None:
        self._last_poll = now
        if self.subscription and not self._closing:
            self._set_deadline("max_poll", now + self.settings.max_poll_interval_ms)
            if self._poll_exceeded:
                self._poll_exceeded = False
                self._request_rejoin(now)
                self._advance(now)

    def rebalance_done(self, now: float, partitions: list[TopicPartition] | None = None) -> list[Action]:
        """The app's rebalance callback returned. For an assign, ``partitions`` may carry explicit start
        offsets (what the app passed to assign()); others start from the committed offset."""
        step = self._awaiting
        if step is None:
            raise KafkaException(KafkaError(KafkaError._STATE, "no rebalance callback is pending"))
        self._awaiting = None
        kind, keys = step
        if kind == ASSIGN:
            self._finish_assign(keys, partitions, now)
        else:
            self._finish_revoke(kind, keys, now)
        self._advance(now)
        return self._drain()

    def close(self, now: float) -> list[Action]:
        """Revoke (commit if enable.auto.commit), wait for commits, LeaveGroup (dynamic members), Closed."""
        if self._closing or self._closed:
            return self._drain()
        self._closing = True
        self._join_wanted = False
        self._cancel("max_poll", "auto_commit", "join_retry")
        self._abandon_join()
        if self._fatal_error is None:
            self._queue_revoke_all()
        self._steps.append(("close", None))
        self._advance(now)
        return self._drain()

    def metadata_scope(self) -> list[str] | None:
        """Topics the periodic metadata refresh must cover (None: all of them, for a pattern subscription, so
        a topic created later that matches is seen); else the subscribed names, plus, for the leader, every
        topic the group subscribes to (its partition counts decide the assignment)."""
        if self._patterns:
            return None
        topics = {t for t in self.subscription if not t.startswith("^")}
        if self.is_leader and self._group_snapshot:
            topics.update(self._group_snapshot)
        return sorted(topics)

    def metadata_update(self, partition_counts: Mapping[str, int], now: float) -> list[Action]:
        """Current topic → partition count (all topics the client knows; absent topics do not exist)."""
        self._partition_counts = {t: int(c) for t, c in partition_counts.items()}
        self._metadata_wanted = False
        if self.join_state is JoinState.WAIT_METADATA:
            self._leader_assign(now)
        elif self._resumed and self.generation_id >= 0:
            self._resumed = False
            self._joined_snapshot = self._own_snapshot()
        elif self.generation_id >= 0 and self.join_state is not JoinState.WAIT_SYNC:
            changed = self._own_snapshot() != self._joined_snapshot
            if self.is_leader and self._group_snapshot:
                changed |= any(self._partition_counts.get(t, 0) != c for t, c in self._group_snapshot.items())
            if changed:
                self._request_rejoin(now)
        self._advance(now)
        return self._drain()

    def tick(self, now: float) -> list[Action]:
        """Fire every timer due at ``now``."""
        for name in _TIMER_ORDER:
            due = self._deadlines.get(name)
            if due is not None and due <= now:
                del self._deadlines[name]
                getattr(self, f"_timer_{name}")(now)
        self._advance(now)
        return self._drain()

    def handle_response(self, request_id: int, reply: Any, now: float) -> list[Action]:
        """A SendRequest's reply: the decoded response, or a KafkaError (transport failure, timeout).
        Replies to requests the machine no longer waits for are dropped."""
        entry = self._pending.pop(request_id, None)
        if entry is not None:
            api, context = entry
            getattr(self, f"_on_{api}")(request_id, context, reply, now)
            self._advance(now)
        return self._drain()

    # --- coordinator -----------------------------------------------------------------------------
    def _ensure_coordinator_query(self, now: float) -> None:
        if self.coord_state in (CoordState.INIT,) and not self._closed:
            self.coord_state = CoordState.WAIT_COORD
            self._query_coordinator(now)

    def _query_coordinator(self, now: float) -> None:
        if self._coord_request is not None or self._closed:
            return
        fields = {"key": self.settings.group_id, "key_type": 0}
        self._coord_request = self._send("FindCoordinator", fields, None, to_coordinator=False)

    def _timer_coord_query(self, now: float) -> None:
        self._query_coordinator(now)

    def _on_FindCoordinator(self, request_id: int, _context: Any, reply: Any, now: float) -> None:
        self._coord_request = None
        if isinstance(reply, KafkaError):
            code, message = reply.code(), reply.str()
        else:
            code, node_id, host, port, message = coordinator_from_response(reply)
        if code:
            if code in (KafkaError.GROUP_AUTHORIZATION_FAILED, KafkaError.INVALID_GROUP_ID):
                self._emit_error(KafkaError(code, f"FindCoordinator failed: {message or KafkaError(code).str()}"))
            self._schedule_coord_retry(now)
            return
        self._coord_backoff_ms = self.settings.retry_backoff_ms
        # coordinator.query.interval.ms: ask again now and then, in case the group moved to another broker
        self._set_deadline("coord_query", now + self.settings.coordinator_query_interval_ms)
        if self.coord_state is CoordState.UP and self.coordinator == (node_id, host, port):
            return  # a periodic query: nothing changed
        self.coord_state = CoordState.UP
        if self.coordinator != (node_id, host, port):
            self.coordinator = (node_id, host, port)
            self._emit(CoordinatorChanged(node_id, host, port))
        if self.generation_id >= 0 and "heartbeat" not in self._deadlines:
            self._set_deadline("heartbeat", now)
        self._flush_queued_commits(now)
        self._fetch_committed(now)
        self._continue_close(now)

    def _schedule_coord_retry(self, now: float) -> None:
        if self._closed:
            return
        self._set_deadline("coord_query", now + self._coord_backoff_ms)
        self._coord_backoff_ms = min(self._coord_backoff_ms * 2, self.settings.retry_backoff_max_ms)

    def _coordinator_dead(self, reason: str, now: float) -> None:
        """Forget the coordinator and look it up again; an unfinished join starts over once it is back."""
        if self.coord_state is not CoordState.UP:
            return
        self.coord_state = CoordState.WAIT_COORD
        self.coordinator = None
        self._emit(CoordinatorChanged(-1, "", 0))
        self._heartbeat_request = None
        self._cancel("heartbeat")
        if self.join_state in JOINING_STATES:
            self._abandon_join()
            if self.subscription and not self._closing:
                self._join_wanted = True
        self._offsets_in_flight.clear()
        self._schedule_coord_retry(now)

    # --- assignment steps (callbacks, fetch start/stop) ------------------------------------------
    def _queue_revoke_all(self) -> None:
        """Revoke whatever is assigned when the step runs (includes partitions of a pending assign)."""
        if self._assignment or any(kind == ASSIGN for kind, _ in self._steps) or (
                self._awaiting is not None and self._awaiting[0] == ASSIGN):
            self._steps.append((REVOKE, None))

    def _assignment_lost(self) -> None:
        if self._assignment or any(kind == ASSIGN for kind, _ in self._steps) or self._awaiting is not None:
            self._steps.append((LOST, None))

    def _advance(self, now: float) -> None:
        while self._awaiting is None and self._steps:
            kind, keys = self._steps.popleft()
            if kind in (REVOKE, LOST):
                keys = set(self._assignment) if keys is None else set(keys) & self._assignment
                if keys:
                    self._awaiting = (kind, keys)
                    self.join_state = JoinState.WAIT_UNASSIGN_CALL
                    self._emit(RebalanceCallback(kind, _tps(keys), self.cooperative,
                                                 KafkaError(KafkaError._REVOKE_PARTITIONS)))
            elif kind == ASSIGN:
                self._awaiting = (kind, keys)
                self.join_state = JoinState.WAIT_ASSIGN_CALL
                self._emit(RebalanceCallback(ASSIGN, _tps(keys), self.cooperative,
                                             KafkaError(KafkaError._ASSIGN_PARTITIONS)))
            elif kind == "rejoin":
                self._request_rejoin(now)
            elif kind == "leave":
                self._leave_group(now, wait=False)
            elif kind == "close":
                self._close_phase = "commits"
        if self._awaiting is None and self.join_state in (JoinState.WAIT_ASSIGN_CALL, JoinState.WAIT_UNASSIGN_CALL):
            self.join_state = JoinState.STEADY if self.generation_id >= 0 else JoinState.INIT
        if self._awaiting is None and not self._steps:
            self._maybe_join(now)
            self._continue_close(now)

    def _finish_revoke(self, kind: str, keys: set[TopicPartitionKey], now: float) -> None:
        keys &= self._assignment
        self._emit(StopFetching(_tps(keys)))
        if kind == REVOKE:
            self._commit_revoked(sorted(keys), now)
        self._offsets.forget(keys)
        self._offsets_wanted -= keys
        self._assignment -= keys

    def _finish_assign(self, keys: set[TopicPartitionKey], given: list[TopicPartition] | None,
                       now: float) -> None:
        self._assignment |= keys
        explicit = {}
        for tp in given or ():
            key = (tp.topic, tp.partition)
            if key in keys and tp.offset not in (OFFSET_INVALID, OFFSET_STORED):
                explicit[key] = tp
        if explicit:
            self._emit(StartFetching([explicit[k] for k in sorted(explicit)]))
        self._offsets_wanted |= keys - set(explicit)
        self._fetch_committed(now)

    def _timer_offset_fetch(self, now: float) -> None:
        self._fetch_committed(now)

    # --- leave / close ---------------------------------------------------------------------------
    def _leave_group(self, now: float, wait: bool) -> None:
        """LeaveGroup for dynamic members (static ones stay until session.timeout.ms, as Java and
        librdkafka do); membership is reset either way."""
        if not self.settings.is_static and self.member_id and self._coordinator_up():
            fields = {"group_id": self.settings.group_id, "member_id": self.member_id,
                      "group_instance_id": None, "reason": "the consumer is leaving the group"}
            request_id = self._send("LeaveGroup", fields, None)
            if wait:
                self._leave_request = request_id
        self._reset_membership(keep_member_id=False)

    def _on_LeaveGroup(self, request_id: int, _context: Any, _reply: Any, now: float) -> None:
        if request_id == self._leave_request:
            self._leave_request = None
            self._continue_close(now)

    def _continue_close(self, now: float) -> None:
        phase = self._close_phase
        if phase is None or self._awaiting is not None or self._steps:
            return
        if phase == "commits":
            if self._queued_commits and (not self._coordinator_up() or self._fatal_error is not None):
                self._fail_queued_commits(KafkaError(KafkaError._DESTROY, "closed before the coordinator was found"))
            if any(api == "OffsetCommit" for api, _ in self._pending.values()):
                return
            self._close_phase = "leave"
            if self._fatal_error is None:
                self._leave_group(now, wait=True)
        if self._close_phase == "leave" and self._leave_request is None:
            self._close_phase = "done"
            self._closed = True
            self.coord_state = CoordState.TERM
            self._deadlines.clear()
            self._emit(Closed())

    # --- timers ----------------------------------------------------------------------------------
    def _timer_max_poll(self, now: float) -> None:
        if not self.subscription or self._closing or self._poll_exceeded:
            return
        self._poll_exceeded = True
        late = now - self._last_poll - self.settings.max_poll_interval_ms
        self._emit_error(KafkaError(
            KafkaError._MAX_POLL_EXCEEDED,
            f"Application maximum poll interval ({self.settings.max_poll_interval_ms}ms) exceeded by "
            f"{int(late)}ms: leaving the group; it rejoins on the next poll"))
        self._join_wanted = False
        self._leave_group(now, wait=False)  # at once: the app may not serve the lost callback for a while
        self._assignment_lost()

    def _timer_session(self, now: float) -> None:
        if self.generation_id < 0 and self.join_state is JoinState.INIT:
            return
        self._assignment_lost()
        self._reset_membership(keep_member_id=False)
        self._coordinator_dead("session timed out", now)
        self._request_rejoin(now)

    def _timer_auto_commit(self, now: float) -> None:
        self._auto_commit_due(now)

    def _timer_join_retry(self, now: float) -> None:
        if self.subscription and not self._closing and not self._poll_exceeded:
            self._join_wanted = True

    def _timer_heartbeat(self, now: float) -> None:
        if (self.generation_id < 0 or not self.member_id or not self._coordinator_up() or self._closing
                or self.join_state in JOINING_STATES):
            return
        self._set_deadline("heartbeat", now + self.settings.heartbeat_interval_ms)
        if self._heartbeat_request is not None:
            return
        fields = {"group_id": self.settings.group_id, "generation_id": self.generation_id,
                  "member_id": self.member_id, "group_instance_id": self.settings.group_instance_id}
        self._heartbeat_request = self._send("Heartbeat", fields, None)

    def _on_Heartbeat(self, request_id: int, _context: Any, reply: Any, now: float) -> None:
        if request_id != self._heartbeat_request:
            return
        self._heartbeat_request = None
        code = reply.code() if isinstance(reply, KafkaError) else reply.error_code
        if code == 0 or code == KafkaError.REBALANCE_IN_PROGRESS:
            self._set_deadline("session", now + self.settings.session_timeout_ms)
        if code == KafkaError.REBALANCE_IN_PROGRESS:
            self._request_rejoin(now)
        elif code in (KafkaError.UNKNOWN_MEMBER_ID, KafkaError.ILLEGAL_GENERATION):
            self._member_reset_and_rejoin(code, now)
        elif code == KafkaError.FENCED_INSTANCE_ID:
            self._fatal(code)
        elif code in COORDINATOR_ERRORS:
            self._coordinator_dead("Heartbeat failed", now)
        elif code:
            self._emit_error(KafkaError(code, "Heartbeat failed"))
