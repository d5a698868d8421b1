"""send_offsets_to_transaction: AddOffsetsToTxn to the transaction coordinator, then TxnOffsetCommit to the
group coordinator with the consumer group's generation and member id (KIP-447).

Runs in: the main host; a mixin of ``kqactors.core.producer.txn.TxnManager`` (pure, no clock: ``now`` comes in).
Owns the two-stage offsets call, its group-coordinator lookup, its retries within the API call's deadline,
and what each failure means (librdkafka's rd_kafka_txn_handle_AddOffsetsToTxn / _TxnOffsetCommit).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kqactors.core.producer.txn_errors import ABORTABLE, COORDINATOR, FATAL, RETRY, classify
from kqactors.core.producer.txn_errors import normalize as _normalize
from kqactors.core.producer.txn_errors import retry_backoff_ms as _retry_backoff_ms
from kqactors.core.producer.txn_states import TxnState, flagged
from kqactors.errors import KafkaError

if TYPE_CHECKING:
    from kqactors.core.producer.txn import TxnManager

    _Base = TxnManager
else:
    _Base = object

__all__ = ["OffsetsMixin"]

E = KafkaError
S = TxnState
# a request failing with these may still have reached the coordinator (and opened the transaction there)
MAYBE_SENT = frozenset({E._TRANSPORT, E._TIMED_OUT, E._TIMED_OUT_QUEUE})


@dataclass
class _OffsetsCall:
    offsets: list[list[Any]]  # [[topic, partition, offset, leader_epoch, metadata], ...] sorted
    group: dict[str, Any]     # group_id, generation_id, member_id, group_instance_id
    deadline: float
    group_coordinator: int | None = None


class OffsetsMixin(_Base):
    """The send_offsets part of the transaction manager."""

    def _step_send_offsets(self, now: float, offsets: list[list[Any]], group: dict[str, Any],
                           deadline: float) -> None:
        if (err := self._require(S.IN_TRANSACTION)) is not None:
            self._result("send_offsets", err)
            return
        if not self.pid_valid:
            self._result("send_offsets", KafkaError(E._STATE, "No PID available (producer id being acquired)",
                                                    retriable=True))
            return
        if not offsets:
            self._result("send_offsets", None)
            return
        self._offsets = _OffsetsCall(sorted([list(o) for o in offsets], key=lambda o: (o[0], o[1])), dict(group),
                                     deadline)
        self.waiting.add("send_offsets")
        self._send_add_offsets(now)

    # ---- send_offsets_to_transaction ----------------------------------------------------------------------

    def _send_add_offsets(self, now: float) -> None:
        call = self._offsets
        if call is None:
            return
        if (err := self._require(S.IN_TRANSACTION)) is not None:
            self._offsets_done(err)
            return
        if now >= call.deadline:
            self._offsets_done(KafkaError(E._TIMED_OUT, "Failed to add offsets to transaction: timed out",
                                          retriable=True))
            return
        if self.coordinator is None:
            self._timers["add_offsets"] = now + self.retry_backoff_ms
            self._coord_query(now)
            return
        self.req_cnt += 1
        self._send("add_offsets", call, "txn:AddOffsetsToTxn", {
            "transactional_id": self.transactional_id, "producer_id": self.producer_id,
            "producer_epoch": self.epoch, "group_id": call.group["group_id"]}, self.coordinator)

    def _on_add_offsets(self, call: _OffsetsCall, code: int, result: dict[str, Any], now: float,
                        reason: str) -> None:
        if call is not self._offsets:
            return
        code = code or result.get("error_code", 0)
        if code and code not in MAYBE_SENT:
            self.req_cnt = max(self.req_cnt - 1, 0)  # definitely not added
        if not code and now >= call.deadline:
            code = E._TIMED_OUT
        if not code:
            self._offsets_next(now)
            return
        actions = classify("AddOffsetsToTxn", code)
        text = f"Failed to add offsets to transaction: {self._reason(code, reason)}"
        if actions & FATAL:
            self._set_fatal(code, text)
            return
        if actions & RETRY:
            if actions & COORDINATOR:
                self._coordinator_lost(now, text)
            if now < call.deadline:
                self._timers["add_offsets"] = now + _retry_backoff_ms("AddOffsetsToTxn", code,
                                                                      self.retry_backoff_ms)
                return
            self._offsets_done(flagged(_normalize(code), text, RETRY))
            return
        self._set_abortable(code, text)
        self._offsets_done(flagged(_normalize(code), text, ABORTABLE))

    def _offsets_next(self, now: float) -> None:
        """Step 2: TxnOffsetCommit to the group coordinator (found first)."""
        call = self._offsets
        if call is None:
            return
        if (err := self._require(S.IN_TRANSACTION)) is not None:
            self._offsets_done(err)
            return
        group_id = call.group["group_id"]
        node = self.group_coordinators.get(group_id)
        if node is None:
            self._send("group_coord", call, "txn:FindCoordinator", {"key_type": 0, "key": group_id}, None)
            return
        call.group_coordinator = node
        topics: dict[str, list[list[Any]]] = {}
        for topic, partition, offset, leader_epoch, metadata in call.offsets:
            topics.setdefault(topic, []).append([partition, offset, leader_epoch, metadata])
        group = call.group
        self._send("offset_commit", call, "txn:TxnOffsetCommit", {
            "transactional_id": self.transactional_id, "group_id": group_id, "producer_id": self.producer_id,
            "producer_epoch": self.epoch, "generation_id": group.get("generation_id", -1),
            "member_id": group.get("member_id") or "", "group_instance_id": group.get("group_instance_id"),
            "topics": [[t, ps] for t, ps in topics.items()]}, node)

    def _on_group_coord(self, call: _OffsetsCall, code: int, result: dict[str, Any], now: float,
                        reason: str) -> None:
        if call is not self._offsets:
            return
        code = code or result.get("error_code", 0)
        node = result.get("node_id", -1)
        if not code and node >= 0:
            self.group_coordinators[call.group["group_id"]] = node
            self._offsets_next(now)
            return
        self._offset_commit_failed(call, code or E.COORDINATOR_NOT_AVAILABLE, reason, now)

    def _on_offset_commit(self, call: _OffsetsCall, code: int, result: dict[str, Any], now: float,
                          reason: str) -> None:
        if call is not self._offsets:
            return
        if not code:
            for _topic, _partition, pcode in result.get("partitions", ()):
                if pcode:
                    code = pcode
                    break
        if not code:
            self._offsets_done(None)
            return
        self._offset_commit_failed(call, code, reason, now)

    def _offset_commit_failed(self, call: _OffsetsCall, code: int, reason: str, now: float) -> None:
        actions = classify("TxnOffsetCommit", code)
        text = f"Failed to commit offsets to transaction: {self._reason(code, reason)}"
        if actions & FATAL:
            self._set_fatal(code, text)
            return
        if actions & RETRY:
            if actions & COORDINATOR:
                self.group_coordinators.pop(call.group["group_id"], None)
            if now < call.deadline:
                self._timers["group_coordinator"] = now + _retry_backoff_ms("TxnOffsetCommit", code,
                                                                            self.retry_backoff_ms)
                return
        # Out of time, or a permanent error: the group's offsets are in the transaction (AddOffsetsToTxn
        # succeeded) but not committed in it, so the transaction cannot be committed any more.
        self._set_abortable(code, text)
        self._offsets_done(flagged(_normalize(code), text, ABORTABLE))

    def _offsets_done(self, error: KafkaError | None) -> None:
        self._offsets = None
        self._timers.pop("add_offsets", None)
        self._timers.pop("group_coordinator", None)
        self._result("send_offsets", error)
