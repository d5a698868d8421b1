"""Runs in: the main host (part of the cgrp state machine). Owns the offset side of the group: storing
offsets (by the app or enable.auto.offset.store), OffsetCommit (app commits, auto-commit on
auto.commit.interval.ms, the commit on revoke and on close) and OffsetFetch of committed offsets for newly
assigned partitions, which is what starts their fetchers.

A mixin of GroupStateMachine: it uses the machine's request, timer and action plumbing.
"""

from __future__ import annotations

from typing import Any

from kqactors.core.group.actions import CommitResult, StartFetching
from kqactors.core.group.assignors import TopicPartitionKey
from kqactors.core.group.offsets import CommitEntry
from kqactors.core.group.requests import offset_commit_errors, offset_fetch_partitions
from kqactors.errors import KafkaError, KafkaException
from kqactors.message import OFFSET_INVALID, TopicPartition

COORDINATOR_ERRORS = frozenset({
    KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_NOT_AVAILABLE, KafkaError._TRANSPORT,
    KafkaError._TIMED_OUT, KafkaError.NETWORK_EXCEPTION, KafkaError.REQUEST_TIMED_OUT,
})
_RETRY_FETCH_ERRORS = frozenset({KafkaError.UNSTABLE_OFFSET_COMMIT, KafkaError.COORDINATOR_LOAD_IN_PROGRESS})


def _commit_partitions(entries: list[CommitEntry], errors: dict[TopicPartitionKey, int]) -> list[TopicPartition]:
    result = []
    for topic, partition, offset, epoch, metadata in entries:
        tp = TopicPartition(topic, partition, offset, metadata, epoch)
        code = errors.get((topic, partition), 0)
        if code:
            tp.error = KafkaError(code)
        result.append(tp)
    return result


class OffsetsMixin:
    """Offset store, commits and committed-offset lookup (state lives on GroupStateMachine)."""

    # --- offset store ------------------------------------------------------------------------------
    def store_offsets(self, partitions: list[TopicPartition]) -> list[TopicPartition]:
        """Store next-offsets to commit (confluent-kafka's store_offsets). Partitions not assigned get a
        per-partition _STATE error; using it with enable.auto.offset.store=true is _INVALID_ARG."""
        if self.settings.enable_auto_offset_store:
            raise KafkaException(KafkaError(
                KafkaError._INVALID_ARG, "store_offsets() requires enable.auto.offset.store=false"))
        result = []
        for tp in partitions:
            if not isinstance(tp, TopicPartition):
                raise TypeError(f"expected TopicPartition, not {type(tp).__name__}")
            out = TopicPartition(tp.topic, tp.partition, tp.offset, tp.metadata, tp.leader_epoch)
            if (tp.topic, tp.partition) not in self._assignment:
                out.error = KafkaError(KafkaError._STATE, "partition is not assigned to this consumer")
            elif tp.offset < 0:
                out.error = KafkaError(KafkaError._INVALID_ARG, f"cannot store logical offset {tp.offset}")
            else:
                self._offsets.store((tp.topic, tp.partition), tp.offset, tp.leader_epoch, tp.metadata)
            result.append(out)
        return result

    def auto_store(self, topic: str, partition: int, next_offset: int, leader_epoch: int | None = None) -> None:
        """The app was handed messages up to ``next_offset - 1``: store it if enable.auto.offset.store."""
        if self.settings.enable_auto_offset_store and (topic, partition) in self._assignment and next_offset >= 0:
            self._offsets.store((topic, partition), next_offset, leader_epoch)

    def stored_offset(self, topic: str, partition: int) -> int | None:
        stored = self._offsets.stored((topic, partition))
        return stored.offset if stored is not None else None

    # --- commits -----------------------------------------------------------------------------------
    def commit(self, now: float, offsets: list[TopicPartition] | None = None, tag: Any = None) -> list[Any]:
        """Commit ``offsets`` (or every stored, uncommitted offset of the assignment); the outcome comes
        back as a CommitResult carrying ``tag``."""
        self._check_usable()
        if offsets is None:
            entries = self._offsets.uncommitted(self._assignment)
        else:
            entries = []
            for tp in offsets:
                if not isinstance(tp, TopicPartition):
                    raise TypeError(f"expected TopicPartition, not {type(tp).__name__}")
                if tp.offset < 0:
                    raise KafkaException(KafkaError(KafkaError._INVALID_ARG,
                                                    f"cannot commit logical offset {tp.offset} for {tp.topic}"))
                entries.append((tp.topic, tp.partition, tp.offset, tp.leader_epoch, tp.metadata))
        if not entries:
            self._emit(CommitResult(tag, [], KafkaError(KafkaError._NO_OFFSET)))
        else:
            self._send_commit(entries, tag, now)
        return self._drain()

    def _send_commit(self, entries: list[CommitEntry], tag: Any, now: float) -> None:
        if not self._coordinator_up():
            self._queued_commits.append((entries, tag))
            self._ensure_coordinator_query(now)
            return
        fields = {"group_id": self.settings.group_id, "generation_id": self.generation_id,
                  "member_id": self.member_id, "group_instance_id": self.settings.group_instance_id,
                  "offsets": entries}
        self._send("OffsetCommit", fields, ("commit", entries, tag))

    def _flush_queued_commits(self, now: float) -> None:
        queued, self._queued_commits = self._queued_commits, []
        for entries, tag in queued:
            self._send_commit(entries, tag, now)

    def _fail_queued_commits(self, error: KafkaError) -> None:
        queued, self._queued_commits = self._queued_commits, []
        for entries, tag in queued:
            failed = {(t, p): error.code() for t, p, *_ in entries}
            self._emit(CommitResult(tag, _commit_partitions(entries, failed), error))

    def _on_OffsetCommit(self, _request_id: int, context: tuple, reply: Any, now: float) -> None:
        _kind, entries, tag = context
        if isinstance(reply, KafkaError):
            errors = {(t, p): reply.code() for t, p, *_ in entries}
        else:
            errors = offset_commit_errors(reply)
        codes = {code for code in errors.values() if code}
        self._offsets.mark_committed(e for e in entries if not errors.get((e[0], e[1]), 0)
                                     and (e[0], e[1]) in self._assignment)
        first_error = next((errors[(e[0], e[1])] for e in entries if errors.get((e[0], e[1]), 0)), 0)
        self._emit(CommitResult(tag, _commit_partitions(entries, errors),
                                KafkaError(first_error) if first_error else None))
        if codes & COORDINATOR_ERRORS:
            self._coordinator_dead("OffsetCommit failed", now)
        self._continue_close(now)

    def _auto_commit_due(self, now: float) -> None:
        if not self.settings.enable_auto_commit or not self.subscription or self._closing:
            return
        self._set_deadline("auto_commit", now + self.settings.auto_commit_interval_ms)
        if self.is_steady and self._coordinator_up():
            entries = self._offsets.uncommitted(self._assignment)
            if entries:
                self._send_commit(entries, None, now)

    def _commit_revoked(self, partitions: list[TopicPartitionKey], now: float) -> None:
        """enable.auto.commit: commit what was stored for partitions we give up (before forgetting them)."""
        if self.settings.enable_auto_commit and self.member_id:
            entries = self._offsets.uncommitted(partitions)
            if entries:
                self._send_commit(entries, None, now)

    # --- committed offsets for new assignments ------------------------------------------------------
    def _fetch_committed(self, now: float) -> None:
        wanted = sorted(self._offsets_wanted - self._offsets_in_flight)
        if not wanted or not self._coordinator_up():
            if wanted:
                self._ensure_coordinator_query(now)
            return
        self._offsets_in_flight.update(wanted)
        fields = {"group_id": self.settings.group_id, "partitions": wanted, "require_stable": True}
        self._send("OffsetFetch", fields, ("fetch", wanted))

    def _on_OffsetFetch(self, _request_id: int, context: tuple, reply: Any, now: float) -> None:
        _kind, asked = context
        self._offsets_in_flight.difference_update(asked)
        if isinstance(reply, KafkaError):
            group_error, partitions = reply.code(), {}
        else:
            group_error, partitions = offset_fetch_partitions(reply)
        if group_error:
            if group_error in COORDINATOR_ERRORS:
                self._coordinator_dead("OffsetFetch failed", now)
            elif group_error not in _RETRY_FETCH_ERRORS:
                self._emit_error(KafkaError(group_error, "failed to fetch committed offsets"))
            self._set_deadline("offset_fetch", now + self.settings.retry_backoff_ms)
            return
        start = []
        for key in asked:
            if key not in self._offsets_wanted:
                continue  # revoked meanwhile
            offset, epoch, metadata, code = partitions.get(key, (-1, -1, None, 0))
            if code in _RETRY_FETCH_ERRORS:
                continue  # stays wanted, retried below
            self._offsets_wanted.discard(key)
            if code:
                tp = TopicPartition(key[0], key[1], OFFSET_INVALID)
                tp.error = KafkaError(code)
                self._emit_error(KafkaError(code, f"committed offset of {key[0]}[{key[1]}] unavailable"))
            else:
                tp = TopicPartition(key[0], key[1], offset if offset >= 0 else OFFSET_INVALID, metadata or None,
                                    epoch)
                if offset >= 0:
                    self._offsets.set_committed(key, offset)
            start.append(tp)
        if start:
            self._emit(StartFetching(start))
        if self._offsets_wanted - self._offsets_in_flight:
            self._set_deadline("offset_fetch", now + self.settings.retry_backoff_ms)
