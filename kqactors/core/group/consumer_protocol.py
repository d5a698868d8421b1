"""Runs in: the main host (driven by the cgrp actor). Owns the KIP-848 group member (group.protocol=consumer) as
a pure state machine: one ConsumerGroupHeartbeat at a time carries membership (member id, member epoch),
the subscription and the coordinator's target assignment; the member reconciles that target incrementally
(revoke what was removed, then assign what was added, then acknowledge the owned partitions), follows the
heartbeat interval the coordinator sets, rejoins at epoch 0 after being fenced (on_lost first), and leaves with
epoch -1 (-2: a static member closing, which it may come back from).

The coordinator lookup, the rebalance-callback steps, the offset store, commits, OffsetFetch of start offsets
and the close sequence are the classic machine's (this class subclasses GroupStateMachine): only the join
half — JoinGroup/SyncGroup/Heartbeat/LeaveGroup and the client-side assignor — is replaced. The member epoch
lives in ``generation_id`` because OffsetCommit sends it in that field.
"""

from __future__ import annotations

import base64
import uuid
from collections import deque
from collections.abc import Mapping
from typing import Any

from kqactors.core.group.actions import RequestMetadata
from kqactors.core.group.assignors import TopicPartitionKey
from kqactors.core.group.commits import COORDINATOR_ERRORS
from kqactors.core.group.machine import _DEFAULT_REQUEST_TIMEOUT_MS, GroupStateMachine
from kqactors.core.group.requests import offset_commit_errors
from kqactors.core.group.settings import GroupSettings
from kqactors.core.group.states import JoinState
from kqactors.core.group.topic_ids import TargetAssignment, TopicIdMap, target_from_response
from kqactors.errors import KafkaError
from kqactors.ops.group import ASSIGN, LOST, REVOKE

__all__ = ["ConsumerProtocolMachine", "HEARTBEAT_API", "LEAVE_EPOCH", "STATIC_LEAVE_EPOCH", "new_member_id"]

HEARTBEAT_API = "ConsumerGroupHeartbeat"
LEAVE_EPOCH = -1
STATIC_LEAVE_EPOCH = -2
_MIN_HEARTBEAT_TIMEOUT_MS = 5000  # group.consumer.heartbeat.interval.ms's default on Kafka brokers

_FENCED_ERRORS = frozenset({KafkaError.FENCED_MEMBER_EPOCH, KafkaError.UNKNOWN_MEMBER_ID})
# librdkafka raises these as fatal consumer errors: retrying cannot help (or would take over a static member).
_FATAL_ERRORS = frozenset({
    KafkaError.GROUP_MAX_SIZE_REACHED, KafkaError.UNSUPPORTED_ASSIGNOR, KafkaError.UNRELEASED_INSTANCE_ID,
    KafkaError.INVALID_REQUEST, KafkaError.UNSUPPORTED_VERSION, KafkaError._UNSUPPORTED_FEATURE,
    KafkaError.GROUP_AUTHORIZATION_FAILED, KafkaError.GROUP_ID_NOT_FOUND, KafkaError.INVALID_REGULAR_EXPRESSION,
})


def new_member_id() -> str:
    """A random UUID in Kafka's text form (base64, no padding): ConsumerGroupHeartbeat v1 wants the member to
    pick its id and keep it for its whole life."""
    return base64.b64encode(uuid.uuid4().bytes).decode("ascii").rstrip("=")


def _subscription_fields(subscription: list[str]) -> tuple[list[str], str]:
    """(topic names, combined regex): ``^`` entries are sent as one regex ``(^a)|(^b)``, "" when there are none
    (the broker matches the whole topic name, with RE2/J)."""
    names = [t for t in subscription if not t.startswith("^")]
    regexes = [t for t in subscription if t.startswith("^")]
    return names, ("(" + ")|(".join(regexes) + ")") if regexes else ""


class ConsumerProtocolMachine(GroupStateMachine):
    """One KIP-848 member. Same driving contract as GroupStateMachine; ``metadata_update`` also takes the
    topic ids (name -> 16-byte id) the target assignments are resolved with."""

    def __init__(self, settings: GroupSettings, now: float, request_timeout_ms: int = _DEFAULT_REQUEST_TIMEOUT_MS,
                 member_id: str | None = None):
        super().__init__(settings, now, request_timeout_ms)
        self.member_id = member_id or new_member_id()
        self.heartbeat_interval_ms = 0
        self.topic_ids = TopicIdMap()
        self._target: TargetAssignment | None = None
        self._unresolved: set[bytes] = set()
        self._ack_wanted = False
        self._ack_round = 0
        self._send_full = True
        self._subscription_changed = False
        self._in_group = False  # a join was sent and no leave since: the coordinator may hold us as a member
        self._retry_wait = False  # a heartbeat failed: nothing goes out early until the "heartbeat" deadline

    # --- views -----------------------------------------------------------------------------------
    @property
    def cooperative(self) -> bool:
        return True  # KIP-848 rebalances are always incremental

    @property
    def member_epoch(self) -> int:
        return self.generation_id

    # --- metadata --------------------------------------------------------------------------------
    def metadata_update(self, partition_counts: Mapping[str, int], now: float,
                        topic_ids: Mapping[str, bytes | None] | None = None) -> list[Any]:
        """Metadata arrived: remember topic ids and assign target partitions that were waiting for them.
        Partition counts need no action: the coordinator reassigns when they change."""
        self._partition_counts = {t: int(c) for t, c in partition_counts.items()}
        self._metadata_wanted = False
        self.topic_ids.update(topic_ids or {})
        if self._unresolved:
            self._reconcile(now, fresh=False)
        self._advance(now)
        return self._drain()

    # --- deciding to heartbeat (hooks of GroupStateMachine) --------------------------------------
    def _request_rejoin(self, now: float) -> None:
        """New subscription, or back after max.poll.interval.ms: tell the coordinator at the next heartbeat
        (joining first when not a member)."""
        if not self.subscription or self._closing or self._poll_exceeded or self._fatal_error is not None:
            return
        self._subscription_changed = True
        self._join_wanted = True

    def _may_heartbeat(self, now: float) -> bool:
        if (not self.subscription or self._closing or self._fatal_error is not None or self._poll_exceeded
                or self._heartbeat_request is not None):
            return False
        if not self._coordinator_up():
            self._ensure_coordinator_query(now)
            return False
        return True

    def _maybe_join(self, now: float) -> None:
        """Called whenever no rebalance callback is pending: join (epoch 0), or send the acknowledgement /
        new subscription now rather than at the next interval (after a failure: not before the backoff)."""
        if self._retry_wait or not self._may_heartbeat(now):
            return
        if self.generation_id < 0:
            if self._join_wanted:
                self._send_heartbeat(now)
        elif self._ack_wanted or self._subscription_changed:
            self._send_heartbeat(now)

    def _timer_heartbeat(self, now: float) -> None:
        self._retry_wait = False
        if self.generation_id >= 0 and self._may_heartbeat(now):
            self._send_heartbeat(now)
        # not a member: the deadline was a join backoff, _maybe_join sends the join

    def _retry_after(self, now: float, delay_ms: float) -> None:
        self._retry_wait = True
        self._set_deadline("heartbeat", now + delay_ms)

    def _timer_session(self, now: float) -> None:
        """The session is the coordinator's business in KIP-848: it fences us, we never time ourselves out."""

    def _heartbeat_timeout_ms(self) -> int:
        """librdkafka allows one interval (the session timeout before the first response). A request that times
        out in flight costs the whole coordinator connection (fetches included) here, and a short interval
        (tests, tuned brokers) is easily exceeded by process hops, so never less than the brokers' default
        interval."""
        if not self.heartbeat_interval_ms:
            return self.settings.session_timeout_ms
        return max(self.heartbeat_interval_ms, _MIN_HEARTBEAT_TIMEOUT_MS)

    def _send_heartbeat(self, now: float) -> None:
        # epoch 0 in a response (the librdkafka mock cluster, while the partitions we are due are still held
        # elsewhere) means we are still joining: the coordinator rejects an epoch-0 request that is not full
        joining = self.generation_id <= 0
        full = joining or self._send_full
        subscription = full or self._subscription_changed
        ack = not joining and self._ack_wanted and self._awaiting is None and not self._steps
        owned: list[tuple[bytes, list[int]]] | None = None
        if joining:
            owned = []  # the coordinator requires an empty owned list on (re)join
        elif ack or full:
            owned = self.topic_ids.by_id(self._assignment)
        names, regex = _subscription_fields(self.subscription)
        fields = {
            "group_id": self.settings.group_id, "member_id": self.member_id,
            "member_epoch": 0 if joining else self.generation_id,
            "instance_id": self.settings.group_instance_id if full else None,
            "rack_id": self.settings.client_rack if full else None,
            "rebalance_timeout_ms": self.settings.max_poll_interval_ms if full else -1,
            "subscribed_topic_names": names if subscription else None,
            "subscribed_topic_regex": regex if subscription else None,
            "server_assignor": self.settings.remote_assignor if full else None,
            "topic_partitions": owned,
        }
        context = {"full": full, "subscription": subscription, "ack_round": self._ack_round if ack else None}
        self._send_full = False
        self._subscription_changed = False
        if joining:
            self._in_group = True
            if self._awaiting is None and self.generation_id < 0:
                self.join_state = JoinState.WAIT_JOIN
        self._cancel("heartbeat")
        self._heartbeat_request = self._send(HEARTBEAT_API, fields, context, timeout_ms=self._heartbeat_timeout_ms())

    # --- responses -------------------------------------------------------------------------------
    def _on_ConsumerGroupHeartbeat(self, request_id: int, context: dict[str, Any], reply: Any, now: float) -> None:
        if request_id == self._leave_request:
            self._leave_request = None
            self._continue_close(now)
            return
        if request_id != self._heartbeat_request:
            return  # a leave we did not wait for, or a heartbeat from before a leave / coordinator change
        self._heartbeat_request = None
        if isinstance(reply, KafkaError):
            code, message = reply.code(), reply.str()
        else:
            code, message = reply.error_code, reply.error_message or KafkaError(reply.error_code).str()
        if code:
            self._heartbeat_failed(code, message, context, now)
            return
        if reply.member_id:
            self.member_id = reply.member_id
        self.generation_id = reply.member_epoch
        if reply.heartbeat_interval_ms > 0:
            self.heartbeat_interval_ms = reply.heartbeat_interval_ms
        self._join_wanted = False
        self._retry_wait = False
        if self.join_state in (JoinState.INIT, JoinState.WAIT_JOIN):
            self.join_state = JoinState.STEADY
        if context.get("ack_round") == self._ack_round:
            self._ack_wanted = False
        if self.heartbeat_interval_ms > 0:
            self._set_deadline("heartbeat", now + self.heartbeat_interval_ms)
        if reply.assignment is not None and self.subscription and not self._closing:
            # (while unsubscribing or closing only the epoch matters: the revoke commit must carry it)
            self._target = target_from_response(reply.assignment.topic_partitions)
            self._reconcile(now, fresh=True)

    def _heartbeat_failed(self, code: int, message: str, context: dict[str, Any], now: float) -> None:
        if context.get("full"):
            self._send_full = True  # what only a full request carries was not delivered
        if context.get("subscription"):
            self._subscription_changed = True
        if code in COORDINATOR_ERRORS:
            self._coordinator_dead("ConsumerGroupHeartbeat failed", now)
        elif code in _FENCED_ERRORS:
            self._fenced(now)
        elif code in _FATAL_ERRORS:
            self._fatal_heartbeat(code, message)
        elif code == KafkaError.COORDINATOR_LOAD_IN_PROGRESS:
            self._retry_after(now, self.settings.retry_backoff_ms)
        else:  # e.g. TOPIC_AUTHORIZATION_FAILED: tell the app, keep heartbeating
            self._emit_error(KafkaError(code, f"ConsumerGroupHeartbeat failed: {message}"))
            self._retry_after(now, max(self.heartbeat_interval_ms, self.settings.retry_backoff_max_ms))

    def _coordinator_dead(self, reason: str, now: float) -> None:
        self._send_full = True  # a new coordinator (or the same one after a gap) gets everything again
        super()._coordinator_dead(reason, now)

    def _fenced(self, now: float) -> None:
        """FENCED_MEMBER_EPOCH / UNKNOWN_MEMBER_ID: the coordinator dropped us; what we hold is lost
        (on_lost), then we join again at epoch 0 with the same member id."""
        self._drop_pending_reconciliation()
        self._assignment_lost()
        self._reset_member()
        self._join_wanted = bool(self.subscription) and not self._closing

    def _fatal_heartbeat(self, code: int, message: str) -> None:
        error = KafkaError(code, f"ConsumerGroupHeartbeat fatal error: {message}", fatal=True)
        self._fatal_error = error
        self._emit_error(error)
        self._join_wanted = False
        self._drop_pending_reconciliation()
        self._assignment_lost()
        self._reset_member()
        self._cancel("max_poll", "auto_commit", "join_retry")

    def _on_OffsetCommit(self, request_id: int, context: tuple, reply: Any, now: float) -> None:
        super()._on_OffsetCommit(request_id, context, reply, now)
        stale = not isinstance(reply, KafkaError) and KafkaError.STALE_MEMBER_EPOCH in offset_commit_errors(
            reply).values()
        if stale and self.generation_id >= 0 and self._heartbeat_request is None:
            self._set_deadline("heartbeat", now)  # learn the current epoch sooner (librdkafka expedites too)

    # --- reconciliation --------------------------------------------------------------------------
    def _planned_assignment(self) -> set[TopicPartitionKey]:
        """What we will hold once the pending callback and queued steps have run."""
        planned = set(self._assignment)
        pending = ([self._awaiting] if self._awaiting is not None else []) + list(self._steps)
        for kind, keys in pending:
            if kind == ASSIGN:
                planned |= keys
            elif kind in (REVOKE, LOST):
                planned = set() if keys is None else planned - set(keys)
        return planned

    def _reconcile(self, now: float, fresh: bool) -> None:
        """Queue revoke-then-assign steps that turn the planned assignment into the target; the ack follows
        once they have run (``_maybe_join``). ``fresh``: the target just came from the coordinator, so it is
        acknowledged even when nothing changes for us (the coordinator may be waiting for it)."""
        if self._target is None:
            return
        keys, unknown = self.topic_ids.resolve(self._target)
        if unknown and (fresh or unknown != self._unresolved):
            literal = [t for t in self.subscription if not t.startswith("^")]
            # an id outside our literal subscription (or a regex one) needs every topic's metadata
            known = {self.topic_ids.name_of(i) for i in self._target} - {None}
            self._emit(RequestMetadata(None if self._patterns or known >= set(literal) else literal))
            self._metadata_wanted = True
        self._unresolved = unknown
        planned = self._planned_assignment()
        revoked, added = planned - keys, keys - planned
        if revoked:
            self._steps.append((REVOKE, revoked))
        if added:
            self._steps.append((ASSIGN, added))
        if revoked or added or (fresh and not unknown):
            self._ack_wanted = True  # a fresh target waiting only for topic ids is acked once they resolve
            self._ack_round += 1

    def _drop_pending_reconciliation(self) -> None:
        self._steps = deque(step for step in self._steps if step[0] not in (ASSIGN, REVOKE))
        self._target = None
        self._unresolved = set()
        self._ack_wanted = False

    def _reset_member(self) -> None:
        """Not a member any more (left, fenced or failed): the next join starts at epoch 0, sends everything."""
        self.generation_id = -1
        self._in_group = False
        self._heartbeat_request = None
        self._target = None
        self._unresolved = set()
        self._ack_wanted = False
        self._send_full = True
        self._subscription_changed = True
        self._retry_wait = False
        self._cancel("heartbeat")
        if self._awaiting is None:
            self.join_state = JoinState.INIT

    # --- leaving ---------------------------------------------------------------------------------
    def _leave_group(self, now: float, wait: bool) -> None:
        """Heartbeat with epoch -1 (or -2 for a static member that is closing: it keeps its partitions until
        the session times out, so a restarted instance takes them back without a rebalance)."""
        if self._in_group and self._coordinator_up() and self._fatal_error is None:
            epoch = STATIC_LEAVE_EPOCH if self.settings.is_static and self._closing else LEAVE_EPOCH
            fields = {"group_id": self.settings.group_id, "member_id": self.member_id, "member_epoch": epoch,
                      "instance_id": self.settings.group_instance_id, "rack_id": None, "rebalance_timeout_ms": -1,
                      "subscribed_topic_names": None, "subscribed_topic_regex": None, "server_assignor": None,
                      "topic_partitions": None}
            request_id = self._send(HEARTBEAT_API, fields, {"leave": True}, timeout_ms=self._heartbeat_timeout_ms())
            if wait:
                self._leave_request = request_id
        self._drop_pending_reconciliation()
        self._reset_member()
