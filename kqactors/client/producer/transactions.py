"""The transactional API of the Producer facade: confluent-kafka's init_transactions, begin_transaction,
send_offsets_to_transaction, commit_transaction and abort_transaction.

Runs in: the app process (the calling thread). Owns the app's side of librdkafka's transactional API: one API
call at a time (another one in progress is _CONFLICT, the same one from another thread _PREV_IN_PROGRESS, a
timed-out call is resumed by calling it again), the steps each call sends to ``main`` (TXN_API requests, see
kqactors.core.producer.txn) with the app's own part between them (commit flushes; abort purges what is queued
and waits for what is in flight), the produce() gate (only inside a transaction), and the count of messages
whose delivery failed in the current transaction (a commit with failures is refused, abortable).
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from kqactors.errors import KafkaError, KafkaException
from kqactors.message import TopicPartition
from kqactors.ops import producer as pops
from kqactors.runtime.op import ActorError, ErrorCode, Op

if TYPE_CHECKING:
    from kqactors.client.producer.producer import Producer

__all__ = ["TransactionalApi"]

_STEP_WAIT_CHUNK_S = 30.0   # an unbounded step is waited for in chunks (it is asked again: steps resume)
_REPLY_SLACK_S = 2.0        # main answers a step at its deadline; the app waits this much longer
_MAIN_BACK_POLL_S = 0.05   # how often a step asks again while main's host restarts
_ABORTABLE_STATES = frozenset({"AbortableError", "FatalError"})


def _timeout_s(timeout: Any) -> float:
    """confluent-kafka's timeouts: seconds, None or negative for infinite."""
    if timeout is None:
        return math.inf
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
        raise TypeError(f"timeout must be a number of seconds, not {type(timeout).__name__}")
    return math.inf if timeout < 0 else float(timeout)


def _raise(error: KafkaError | None) -> None:
    if error is not None:
        raise KafkaException(error)


class TransactionalApi:
    """The transactional producer's app-side state; the Producer's transaction methods delegate here."""

    def __init__(self, producer: Producer, transaction_timeout_ms: int) -> None:
        self._producer = producer
        self.transaction_timeout_s = transaction_timeout_ms / 1000.0
        self._lock = threading.Lock()
        self._curr_api: str | None = None   # the call in progress (kept while a timed-out call may resume)
        self._calling = False
        #: librdkafka's txn_may_enq: produce() is allowed (inside a transaction, while it has not failed)
        self.may_enq = False
        self.state = "Init"     # main's transaction state as last heard
        self.txn_seq = 0        # which transaction (main counts begin_transaction calls)
        self.dr_fails = 0       # messages of the current transaction whose delivery failed
        #: main's host died after init_transactions: the restarted main knows no transaction (the coordinator
        #: state, the partitions in the transaction); the one in progress is lost (abortable) and the next
        #: abort or begin initializes the restarted main again (InitProducerId fences the dead one's epoch)
        self.main_lost = False

    # ---- the API -----------------------------------------------------------------------------------------
    def init_transactions(self, timeout: Any = None) -> None:
        timeout_s = _timeout_s(timeout)
        if math.isinf(timeout_s):
            timeout_s = 2 * self.transaction_timeout_s  # never block for ever without a coordinator
        self._begin_api("init_transactions")
        deadline = time.monotonic() + timeout_s
        if (error := self._step("init", deadline)) is not None:
            self._return_api(True, error)
        self._return_api(False, self._step("ack_init", math.inf))

    def begin_transaction(self) -> None:
        self._begin_api("begin_transaction")
        error = self._reinit(time.monotonic() + 2 * self.transaction_timeout_s)
        if error is None:
            error = self._step("begin", math.inf)
        if error is None:
            self.dr_fails = 0
        self._return_api(False, error)

    def send_offsets_to_transaction(self, positions: Any, group_metadata: Any, timeout: Any = None) -> None:
        if positions is None or group_metadata is None:
            raise KafkaException(KafkaError(KafkaError._INVALID_ARG,
                                            "cgmetadata and offsets are required parameters"))
        offsets = self._offsets(positions)
        group = self._group(group_metadata)
        timeout_s = min(_timeout_s(timeout), self.transaction_timeout_s)  # capped at the transaction's time
        self._begin_api("send_offsets_to_transaction")
        if not offsets:  # nothing consumed: nothing to commit, not an error
            self._return_api(False, None)
            return
        deadline = time.monotonic() + timeout_s
        self._return_api(False, self._step("send_offsets", deadline, offsets=offsets, group=group))

    def commit_transaction(self, timeout: Any = None) -> None:
        deadline = time.monotonic() + _timeout_s(timeout)
        self._begin_api("commit_transaction")
        if self.main_lost:
            self._return_api(False, self._lost_error())
        if (error := self._step("begin_commit", deadline)) is not None:
            self._return_api(False, error)
        self.may_enq = False
        if (error := self._flush(deadline, "commit")) is not None:
            self._return_api(True, error)
        if (error := self._step("commit", deadline, dr_fails=self.dr_fails)) is not None:
            self._return_api(True, error)
        self._return_api(False, self._step("ack_commit", math.inf))

    def abort_transaction(self, timeout: Any = None) -> None:
        deadline = time.monotonic() + _timeout_s(timeout)
        self._begin_api("abort_transaction")
        if self.main_lost:
            # Nothing of the transaction can be committed any more, nor its sequences kept: everything goes
            # (reported _PURGE_QUEUE / _PURGE_INFLIGHT), then the restarted main is initialized again.
            self.may_enq = False
            self._producer.purge(in_queue=True, in_flight=True, blocking=True)
            self._producer._fail_rebuilding()
            if (error := self._flush(deadline, "abort")) is not None:
                self._return_api(True, error)
            error = self._reinit(deadline)
            self._return_api(error is not None, error)
            return
        if (error := self._step("begin_abort", deadline)) is not None:
            self._return_api(False, error)
        self.may_enq = False
        # What is queued goes (delivery reports _PURGE_QUEUE); what is in flight is waited for, as its loss
        # would leave a gap in the partitions' sequences.
        self._producer.purge(in_queue=True, in_flight=False, blocking=True)
        self._producer._fail_rebuilding()
        if (error := self._flush(deadline, "abort")) is not None:
            self._return_api(True, error)
        if (error := self._step("abort", deadline)) is not None:
            self._return_api(True, error)
        self._return_api(False, self._step("ack_abort", math.inf))

    # ---- main's host died ------------------------------------------------------------------------------------
    def on_main_lost(self) -> None:
        """Main's host died (the client handle's notice). Before init_transactions there is nothing to lose."""
        if self.state in ("Init", "WaitPid") or self.main_lost:
            return
        self.main_lost = True
        self.may_enq = False
        if self.state != "Ready":
            self.state = "AbortableError"

    def _lost_error(self) -> KafkaError:
        return KafkaError(KafkaError._TRANSPORT, "the transaction was lost with the producer's main host (it died "
                                                 "and was restarted): abort it", txn_requires_abort=True)

    def _reinit(self, deadline: float) -> KafkaError | None:
        """After main_lost: init the restarted main's transaction manager (as init_transactions does)."""
        if not self.main_lost:
            return None
        if (error := self._step("init", deadline)) is not None:
            return error
        if (error := self._step("ack_init", math.inf)) is not None:
            return error
        self.main_lost = False
        return None

    # ---- what the Producer tells us ------------------------------------------------------------------------
    def produce_refused(self) -> KafkaException:
        return KafkaException(KafkaError(KafkaError._STATE,
                                         f"Producing not allowed in transactional state {self.state}"))

    def note_reports(self, rows: Iterable[Any]) -> None:
        """Delivery-report rows (first_msgid, count, error_code, ...): count the failed messages."""
        for row in rows:
            if row[2]:
                self.dr_fails += int(row[1])

    def note_failed(self, count: int) -> None:
        self.dr_fails += count

    def on_state(self, payload: dict[str, Any]) -> None:
        """TXN_STATE from main: the current transaction failed in the background (or the producer is fatal)."""
        state = payload.get("state", "")
        if state == "FatalError" or (state in _ABORTABLE_STATES and payload.get("txn_seq") == self.txn_seq):
            self.may_enq = False
            self.state = state

    # ---- plumbing --------------------------------------------------------------------------------------------
    def _begin_api(self, name: str) -> None:
        with self._lock:
            if self._curr_api is not None and self._curr_api != name:
                raise KafkaException(KafkaError(KafkaError._CONFLICT,
                                                f"Conflicting {self._curr_api} API call is already in progress",
                                                retriable=True))
            if self._calling:
                raise KafkaException(KafkaError(KafkaError._PREV_IN_PROGRESS,
                                                f"Simultaneous {name} API calls not allowed", retriable=True))
            self._curr_api = name
            self._calling = True

    def _return_api(self, resumable: bool, error: KafkaError | None) -> None:
        """End the call (raising ``error``); a resumable call that failed retriably stays the current one, so
        calling it again resumes what goes on in the background."""
        with self._lock:
            self._calling = False
            if not resumable or (error is not None and not error.retriable()):
                self._curr_api = None
        _raise(error)

    def _step(self, step: str, deadline: float, **args: Any) -> KafkaError | None:
        """Ask main for one step and wait for its answer (main answers at the deadline at the latest)."""
        rt = self._producer._rt
        while True:
            remaining = deadline - time.monotonic()
            if math.isinf(remaining):
                timeout_ms, wait_s = None, _STEP_WAIT_CHUNK_S
            else:
                timeout_ms = max(int(remaining * 1000), 0)
                wait_s = max(remaining, 0.0) + _REPLY_SLACK_S
            try:
                reply = rt.request("main", Op(pops.TXN_API, pops.txn_api_payload(step, timeout_ms, **args)),
                                   timeout=wait_s)
            except ActorError as exc:
                if exc.code == ErrorCode.TIMED_OUT and timeout_ms is None:
                    continue  # unbounded: ask again (the step resumes where main is)
                if exc.code in (ErrorCode.DEAD_ACTOR, ErrorCode.UNKNOWN_ACTOR):
                    self.on_main_lost()  # its host died: the notice may not have been served yet
                    if self.main_lost and step not in ("init", "ack_init"):
                        return self._lost_error()
                    if self.main_lost and time.monotonic() < deadline:
                        time.sleep(_MAIN_BACK_POLL_S)  # main's host is restarting: ask the new main
                        continue
                code = KafkaError._TIMED_OUT if exc.code == ErrorCode.TIMED_OUT else KafkaError._TRANSPORT
                return KafkaError(code, f"no answer from the producer's main actor: {exc}", retriable=True)
            payload = reply.payload or {}
            self.state = payload.get("state") or self.state
            self.txn_seq = int(payload.get("txn_seq", self.txn_seq))
            self.may_enq = self.state == "InTransaction"  # as librdkafka's txn_may_enq follows its state
            return pops.txn_error_from_wire(payload.get("error"))

    def _flush(self, deadline: float, what: str) -> KafkaError | None:
        remaining = deadline - time.monotonic()
        left = self._producer.flush(max(remaining, 0.0) if not math.isinf(remaining) else None)
        if left:
            return KafkaError(KafkaError._TIMED_OUT, "Failed to flush all outstanding messages within the API "
                                                     f"timeout: {left} message(s) remaining", retriable=True)
        return None

    @staticmethod
    def _offsets(positions: Any) -> list[list[Any]]:
        if not isinstance(positions, (list, tuple)):
            raise TypeError("positions must be a list of TopicPartition")
        rows = []
        for tp in positions:
            if not isinstance(tp, TopicPartition):
                raise TypeError(f"positions must be a list of TopicPartition, not {type(tp).__name__}")
            if tp.offset is None or tp.offset < 0:
                continue  # librdkafka skips invalid offsets (nothing consumed there)
            epoch = tp.leader_epoch if tp.leader_epoch is not None else -1
            rows.append([tp.topic, int(tp.partition), int(tp.offset), int(epoch), tp.metadata])
        return rows

    @staticmethod
    def _group(metadata: Any) -> dict[str, Any]:
        """The consumer's consumer_group_metadata(): group id, generation and member id (KIP-447 fencing)."""
        group_id = getattr(metadata, "group_id", None)
        if not isinstance(group_id, str) or not group_id:
            raise TypeError("group_metadata must be the consumer's consumer_group_metadata()")
        generation = getattr(metadata, "generation_id", -1)
        return {"group_id": group_id, "generation_id": -1 if generation is None else int(generation),
                "member_id": getattr(metadata, "member_id", "") or "",
                "group_instance_id": getattr(metadata, "group_instance_id", None)}
