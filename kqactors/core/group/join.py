"""Runs in: the main host (part of the cgrp state machine). Owns the join half of the classic group
protocol: when to (re)join, the JoinGroup request with this member's subscription for every configured
assignor, the JoinGroup/SyncGroup responses and their errors (KIP-394 MEMBER_ID_REQUIRED, unknown member,
illegal generation, fencing of static members), the leader's assignment and the eager/cooperative
translation of a new assignment into revoke/assign steps.

A mixin of GroupStateMachine: it uses the machine's request, timer and step plumbing.
"""

from __future__ import annotations

from typing import Any

from kqactors.core.group.actions import RequestMetadata
from kqactors.core.group.assignors import assignor_for
from kqactors.core.group.commits import COORDINATOR_ERRORS
from kqactors.core.group.member_metadata import (
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)
from kqactors.core.group.states import JOINING_STATES, JoinState
from kqactors.errors import KafkaError, KafkaException
from kqactors.ops.group import ASSIGN, REVOKE

_JOIN_TIMEOUT_GRACE_MS = 5000  # JoinGroup is parked by the broker for up to the rebalance timeout
_RESET_ERRORS = (KafkaError.UNKNOWN_MEMBER_ID, KafkaError.ILLEGAL_GENERATION)
_RETRY_LATER_ERRORS = (KafkaError.COORDINATOR_LOAD_IN_PROGRESS,)


class JoinMixin:
    """JoinGroup / SyncGroup handling (state lives on GroupStateMachine)."""

    # --- subscription view -----------------------------------------------------------------------
    def _subscribed_topics(self) -> list[str]:
        topics = {t for t in self.subscription if not t.startswith("^")}
        if self._patterns and self._partition_counts:
            topics.update(t for t in self._partition_counts if any(p.search(t) for p in self._patterns))
        return sorted(topics)

    def _own_snapshot(self) -> dict[str, int]:
        counts = self._partition_counts or {}
        return {t: counts.get(t, 0) for t in self._subscribed_topics()}

    # --- deciding to join ------------------------------------------------------------------------
    def _request_rejoin(self, now: float) -> None:
        """Start a rebalance from our side; eager members first revoke everything they hold."""
        if not self.subscription or self._closing or self._poll_exceeded or self._fatal_error is not None:
            return
        if not self.cooperative and (REVOKE, None) not in self._steps:
            self._queue_revoke_all()
        self._join_wanted = True

    def _maybe_join(self, now: float) -> None:
        if (not self._join_wanted or not self.subscription or self._closing or self._poll_exceeded
                or self._fatal_error is not None or self._awaiting is not None or self._steps
                or self._join_request is not None or self._sync_request is not None
                or self._leader_members is not None or "join_retry" in self._deadlines):
            return
        if not self._coordinator_up():
            self._ensure_coordinator_query(now)
            return
        if self._metadata_wanted:
            return
        if not self.cooperative and self._assignment:
            self._queue_revoke_all()
            self._advance(now)
            return
        self._send_join(now)

    def _send_join(self, now: float) -> None:
        topics = self._subscribed_topics()
        self._joined_snapshot = self._own_snapshot()
        owned = sorted(self._assignment) if self.cooperative else []
        protocols = [(a.name, encode_subscription(topics, owned, self.generation_id,
                                                  a.subscription_user_data(self.generation_id),
                                                  self.settings.client_rack))
                     for a in self.settings.assignors()]
        fields = {"group_id": self.settings.group_id, "session_timeout_ms": self.settings.session_timeout_ms,
                  "rebalance_timeout_ms": self.settings.max_poll_interval_ms, "member_id": self.member_id,
                  "group_instance_id": self.settings.group_instance_id, "protocol_type": "consumer",
                  "protocols": protocols, "reason": None}
        self._join_wanted = False
        self._heartbeat_request = None
        self._cancel("heartbeat", "session")
        self.join_state = JoinState.WAIT_JOIN
        self._join_request = self._send("JoinGroup", fields, None,
                                        timeout_ms=self.settings.max_poll_interval_ms + _JOIN_TIMEOUT_GRACE_MS)

    def _retry_join_later(self, now: float, delay_ms: float) -> None:
        self._abandon_join()
        self.join_state = JoinState.INIT if self.generation_id < 0 else self.join_state
        self._join_wanted = False
        self._set_deadline("join_retry", now + delay_ms)

    def _abandon_join(self) -> None:
        self._join_request = None
        self._sync_request = None
        self._leader_members = None
        if self.join_state in JOINING_STATES:
            self.join_state = JoinState.INIT

    def _reset_membership(self, keep_member_id: bool) -> None:
        self.generation_id = -1
        if not keep_member_id:
            self.member_id = ""
        self.leader_id = ""
        self._group_snapshot = {}
        self._abandon_join()
        if self._awaiting is None:
            self.join_state = JoinState.INIT
        self._heartbeat_request = None
        self._cancel("heartbeat", "session")

    def _member_reset_and_rejoin(self, code: int, now: float) -> None:
        """UNKNOWN_MEMBER_ID / ILLEGAL_GENERATION: our membership is gone, so is our assignment."""
        self._assignment_lost()
        self._reset_membership(keep_member_id=code == KafkaError.ILLEGAL_GENERATION)
        self._request_rejoin(now)

    def _fatal(self, code: int) -> None:
        error = KafkaError(code, "this static member (group.instance.id) was fenced by a newer instance",
                           fatal=True)
        self._fatal_error = error
        self._emit_error(error)
        self._join_wanted = False
        self._assignment_lost()
        self._reset_membership(keep_member_id=False)
        for name in ("max_poll", "auto_commit", "join_retry"):
            self._cancel(name)

    def _handle_join_error(self, code: int, what: str, now: float) -> None:
        if code in _RESET_ERRORS:
            self._member_reset_and_rejoin(code, now)
        elif code == KafkaError.FENCED_INSTANCE_ID:
            self._fatal(code)
        elif code in COORDINATOR_ERRORS:
            self._abandon_join()
            self._coordinator_dead(f"{what} failed", now)
            self._request_rejoin(now)
        elif code == KafkaError.REBALANCE_IN_PROGRESS:  # a newer round started: join it now
            self._abandon_join()
            self._request_rejoin(now)
        elif code in _RETRY_LATER_ERRORS:
            self._retry_join_later(now, self.settings.retry_backoff_ms)
        else:
            self._emit_error(KafkaError(code, f"{what} failed: {KafkaError(code).str()}"))
            self._retry_join_later(now, self.settings.retry_backoff_max_ms)

    # --- JoinGroup -------------------------------------------------------------------------------
    def _on_JoinGroup(self, request_id: int, _context: Any, reply: Any, now: float) -> None:
        if request_id != self._join_request:
            return
        self._join_request = None
        code = reply.code() if isinstance(reply, KafkaError) else reply.error_code
        if code == KafkaError.MEMBER_ID_REQUIRED:
            self.member_id = reply.member_id  # KIP-394: rejoin at once with the id the broker gave us
            self.join_state = JoinState.INIT
            self._join_wanted = True
            return
        if code:
            self._handle_join_error(code, "JoinGroup", now)
            return
        self.member_id = reply.member_id
        self.generation_id = reply.generation_id
        self.leader_id = reply.leader
        self.protocol_name = reply.protocol_name
        if self.protocol_name not in self.settings.assignment_strategies:
            self._handle_join_error(KafkaError.INCONSISTENT_GROUP_PROTOCOL, "JoinGroup", now)
            return
        if self.is_leader and not reply.skip_assignment:
            try:
                members = [decode_subscription(m.member_id, m.group_instance_id, m.metadata) for m in reply.members]
            except KafkaException as exc:
                self._emit_error(exc.error)
                self._retry_join_later(now, self.settings.retry_backoff_max_ms)
                return
            self._leader_members = members
            self.join_state = JoinState.WAIT_METADATA
            self._emit(RequestMetadata(sorted({t for m in members for t in m.topics})))
        else:
            self._send_sync(now, [])

    def _leader_assign(self, now: float) -> None:
        members = self._leader_members or []
        self._leader_members = None
        counts = self._partition_counts or {}
        try:
            result = assignor_for(self.protocol_name).assign(counts, members)
        except ValueError as exc:
            self._emit_error(KafkaError(KafkaError._FAIL, f"assignor {self.protocol_name} failed: {exc}"))
            self._retry_join_later(now, self.settings.retry_backoff_max_ms)
            return
        self._group_snapshot = {t: counts.get(t, 0) for m in members for t in m.topics}
        self._send_sync(now, [(member_id, encode_assignment(parts)) for member_id, parts in sorted(result.items())])

    def _send_sync(self, now: float, assignments: list[tuple[str, bytes]]) -> None:
        fields = {"group_id": self.settings.group_id, "generation_id": self.generation_id,
                  "member_id": self.member_id, "group_instance_id": self.settings.group_instance_id,
                  "protocol_type": "consumer", "protocol_name": self.protocol_name, "assignments": assignments}
        self.join_state = JoinState.WAIT_SYNC
        self._sync_request = self._send("SyncGroup", fields, None)

    # --- SyncGroup -------------------------------------------------------------------------------
    def _on_SyncGroup(self, request_id: int, _context: Any, reply: Any, now: float) -> None:
        if request_id != self._sync_request:
            return
        self._sync_request = None
        code = reply.code() if isinstance(reply, KafkaError) else reply.error_code
        if code:
            self._handle_join_error(code, "SyncGroup", now)
            return
        try:
            assigned = set(decode_assignment(reply.assignment))
        except KafkaException as exc:
            self._emit_error(exc.error)
            self._retry_join_later(now, self.settings.retry_backoff_max_ms)
            return
        self.join_state = JoinState.STEADY
        self._set_deadline("session", now + self.settings.session_timeout_ms)
        self._set_deadline("heartbeat", now + self.settings.heartbeat_interval_ms)
        if self.cooperative:
            revoked = self._assignment - assigned
            if revoked:
                self._steps.append((REVOKE, revoked))
            self._steps.append((ASSIGN, assigned - self._assignment))
            if revoked:
                self._steps.append(("rejoin", None))  # KIP-429: follow-up round hands the revoked ones over
        else:
            if self._assignment:
                self._queue_revoke_all()
            self._steps.append((ASSIGN, assigned))
