"""The transactional producer's transaction manager (librdkafka's rdkafka_txnmgr), as a pure state machine.

Runs in: the main host, driven by the main actor of a producer with ``transactional.id``. Owns the transaction
state (librdkafka's states and transitions, named as librdkafka prints them), the transaction coordinator
(FindCoordinator with key type TRANSACTION), the producer id and epoch (InitProducerId with the transactional
id; KIP-360 epoch bumps with the current id/epoch), the partitions registered in the current transaction
(AddPartitionsToTxn, one request outstanding, batching what waits meanwhile), send_offsets_to_transaction
(kqactors.core.producer.txn_offsets), EndTxn, the error classes of every failure (retriable, abortable, fatal) and the answers to the
application's API steps, including the call-order errors ("Operation not valid in state ...").

No sockets, processes or clock: every input carries ``now`` (milliseconds, monotonic) and returns the actions
the actor executes in order. Timers are deadlines the actor honours by calling ``tick(now)`` at
``next_deadline()``. Broker requests are ``SendRequest`` actions answered by ``on_response``.

The application's calls are split into steps, as librdkafka splits them (init_transactions = init + ack_init;
commit = begin_commit, the app's flush, commit, ack_commit; abort = begin_abort, the app's purge and flush,
abort, ack_abort). Each step call is answered by one ``ApiResult`` for that step, at once or later; a step
called again while its work goes on in the background waits for the same result (the API resumes), and a
result reached while nobody waited is kept in the state (ReadyNotAcked, CommitNotAcked, AbortedNotAcked).
"""

from __future__ import annotations

from typing import Any

from kqactors.core.producer.txn_errors import ABORTABLE, BUMP, COORDINATOR, FATAL, FENCING_CODES, classify
from kqactors.core.producer.txn_errors import normalize as _normalize
from kqactors.core.producer.txn_errors import retry_backoff_ms as _retry_backoff_ms
from kqactors.core.producer.txn_offsets import MAYBE_SENT, OffsetsMixin, _OffsetsCall
from kqactors.core.producer.txn_states import (
    ENTERED_FROM,
    STEPS,
    Action,
    ApiResult,
    Fatal,
    Grant,
    PurgeQueued,
    Refuse,
    SendRequest,
    SetPid,
    StateChanged,
    TxnState,
    flagged,
)
from kqactors.errors import KafkaError

__all__ = ["TxnState", "TxnManager", "SendRequest", "ApiResult", "SetPid", "Grant", "Refuse", "PurgeQueued",
           "Fatal", "StateChanged", "STEPS"]

E = KafkaError
S = TxnState
COORDINATOR_QUERY_BACKOFF_MS = 500  # librdkafka's coordinator query timer
# an abortable error raised in these states is not a transition (the abort is already under way)
_ABORTABLE_IGNORED_IN = frozenset({S.BEGIN_ABORT, S.ABORTING, S.FATAL_ERROR})
_SENDING_STATES = frozenset({S.IN_TRANSACTION, S.BEGIN_COMMIT})  # partitions may be added, data sent


class TxnManager(OffsetsMixin):
    """One transactional producer's transaction manager; see the module docstring for the driving contract."""

    def __init__(self, transactional_id: str, transaction_timeout_ms: int = 60000, retry_backoff_ms: int = 100,
                 request_timeout_ms: int = 60000) -> None:
        if not transactional_id:
            raise ValueError("a transaction manager needs a transactional.id")
        self.transactional_id = transactional_id
        self.transaction_timeout_ms = int(transaction_timeout_ms)
        self.retry_backoff_ms = int(retry_backoff_ms)
        self.request_timeout_ms = int(request_timeout_ms)
        self.state = S.INIT
        self.txn_seq = 0                      # begin_transaction count: tags StateChanged for the app
        self.txn_err = 0                      # the error that failed the transaction (or the producer)
        self.txn_errstr = ""
        self.requires_bump = False
        self.init_err = 0                     # the last error acquiring the producer id (init's timeout says it)
        self.producer_id = -1
        self.epoch = -1
        self.coordinator: int | None = None
        self.req_cnt = 0                      # requests that may have opened the transaction on the coordinator
        self.pending: set[tuple[str, int]] = set()    # to register
        self.waitresp: set[tuple[str, int]] = set()   # in the outstanding AddPartitionsToTxn
        self.registered: set[tuple[str, int]] = set()
        self.waiting: set[str] = set()        # API steps whose result comes later
        self.group_coordinators: dict[str, int] = {}
        self._bumping = False                 # InitProducerId with the current id/epoch (KIP-360) wanted
        self._pid_in_flight = False
        self._coord_in_flight = False
        self._add_in_flight = False
        self._offsets: _OffsetsCall | None = None
        self._endtxn_commit: bool | None = None   # the EndTxn this transaction sends (None: none yet)
        self._abort_after_pid: str | None = None  # "endtxn" or "complete": the abort waits for the epoch bump
        self._requests: dict[int, tuple[str, Any]] = {}
        self._next_request_id = 1
        self._timers: dict[str, float] = {}
        self._actions: list[Action] = []

    # ---- queries -------------------------------------------------------------------------------------------

    @property
    def pid_valid(self) -> bool:
        return self.producer_id >= 0 and not self._bumping

    @property
    def may_produce(self) -> bool:
        """librdkafka's txn_may_enq: the app may produce (only inside a transaction)."""
        return self.state is S.IN_TRANSACTION

    def next_deadline(self) -> float | None:
        return min(self._timers.values()) if self._timers else None

    def error(self) -> KafkaError | None:
        """The error the state stands for: fatal, abortable, or None."""
        if self.state is S.FATAL_ERROR:
            return KafkaError(self.txn_err, self.txn_errstr, fatal=True)
        if self.state is S.ABORTABLE_ERROR:
            return KafkaError(self.txn_err, self.txn_errstr, txn_requires_abort=True)
        return None

    # ---- the application's steps ----------------------------------------------------------------------

    def api(self, step: str, now: float, **args: Any) -> list[Action]:
        """One API step of the application (see ``STEPS``); its ApiResult is among the actions now or later."""
        handler = getattr(self, f"_step_{step}", None)
        if handler is None:
            raise ValueError(f"unknown transaction API step {step!r}")
        handler(now, **args)
        return self._take()

    def _step_init(self, now: float) -> None:
        if (err := self._require(S.INIT, S.WAIT_PID, S.READY_NOT_ACKED)) is not None:
            self._result("init", err)
        elif self.state is S.READY_NOT_ACKED:
            self._result("init", None)  # done in the background after an earlier call timed out
        else:
            self._set_state(S.WAIT_PID)
            self.waiting.add("init")
            self._pid_fsm(now)

    def _step_ack_init(self, now: float) -> None:
        err = self._require(S.READY_NOT_ACKED)
        if err is None:
            self._set_state(S.READY)
        self._result("ack_init", err)

    def _step_begin(self, now: float) -> None:
        err = self._require(S.READY)
        if err is None:
            self._set_state(S.IN_TRANSACTION)
            self.txn_seq += 1
            self.txn_err, self.txn_errstr = 0, ""
            self.req_cnt = 0
            self._endtxn_commit = None
        self._result("begin", err)

    def _step_begin_commit(self, now: float) -> None:
        err = self._require(S.IN_TRANSACTION, S.BEGIN_COMMIT, S.COMMITTING, S.COMMIT_NOT_ACKED)
        if err is None and self.state is S.IN_TRANSACTION:
            self._set_state(S.BEGIN_COMMIT)
        self._result("begin_commit", err)

    def _step_commit(self, now: float, dr_fails: int = 0) -> None:
        if (err := self._require(S.BEGIN_COMMIT, S.COMMITTING, S.COMMIT_NOT_ACKED)) is not None:
            self._result("commit", err)
            return
        if self.state is S.COMMIT_NOT_ACKED:
            self._result("commit", None)
            return
        self.waiting.add("commit")
        if self.state is S.COMMITTING:
            return  # EndTxn under way: the same result answers this call
        if dr_fails > 0:
            reason = f"{dr_fails} message(s) failed delivery (see individual delivery reports)"
            self._set_abortable(E._INCONSISTENT, reason)
            self._result("commit", KafkaError(E._INCONSISTENT, reason, txn_requires_abort=True))
            return
        if self.req_cnt == 0:
            self._endtxn_done(now, commit=True)  # nothing reached the coordinator: nothing to end there
            return
        self._set_state(S.COMMITTING)
        self._endtxn_commit = True
        self._send_endtxn(now)

    def _step_ack_commit(self, now: float) -> None:
        err = self._require(S.COMMIT_NOT_ACKED)
        if err is None:
            self._complete()
        self._result("ack_commit", err)

    def _step_begin_abort(self, now: float) -> None:
        err = self._require(S.IN_TRANSACTION, S.BEGIN_ABORT, S.ABORTING, S.ABORTABLE_ERROR, S.ABORT_NOT_ACKED)
        if err is None and self.state in (S.IN_TRANSACTION, S.ABORTABLE_ERROR):
            self._set_state(S.BEGIN_ABORT)
            self._refuse_waiting(E._PURGE_QUEUE, "the transaction is being aborted")
        self._result("begin_abort", err)

    def _step_abort(self, now: float) -> None:
        if (err := self._require(S.BEGIN_ABORT, S.ABORTING, S.ABORT_NOT_ACKED)) is not None:
            self._result("abort", err)
            return
        if self.state is S.ABORT_NOT_ACKED:
            self._result("abort", None)
            return
        self.waiting.add("abort")
        if self.state is S.ABORTING or self._abort_after_pid is not None:
            return
        self._abort_continue(now)

    def _step_ack_abort(self, now: float) -> None:
        err = self._require(S.ABORT_NOT_ACKED)
        if err is None:
            self._complete()
        self._result("ack_abort", err)

    def _abort_continue(self, now: float) -> None:
        if self.req_cnt == 0:
            self._endtxn_done(now, commit=False)
            return
        if not self.pid_valid:
            # An epoch bump is under way (librdkafka: "Waiting for transaction coordinator PID bump to
            # complete before aborting transaction"): the abort goes on once the new epoch is there.
            self._abort_after_pid = "endtxn"
            self._pid_fsm(now)
            return
        self._set_state(S.ABORTING)
        self._endtxn_commit = False
        self._send_endtxn(now)

    # ---- toppars --------------------------------------------------------------------------------------

    def add_partition(self, topic: str, partition: int, now: float) -> list[Action]:
        """A partition has data of the current transaction to send. Granted at once when it is registered
        already; otherwise it waits for ``register_partitions`` (the actor batches one turn's requests)."""
        key = (topic, partition)
        if self.state not in _SENDING_STATES:
            self._actions.append(Refuse((key,), *self._refusal()))
        elif key in self.registered:
            self._actions.append(Grant((key,), self.producer_id, self.epoch))
        else:
            self.pending.add(key)
        return self._take()

    def register_partitions(self, now: float) -> list[Action]:
        """Send one AddPartitionsToTxn for every partition waiting, unless one is outstanding."""
        self._register(now)
        return self._take()

    def on_produce_failed(self, code: int, reason: str, now: float) -> list[Action]:
        """A toppar's batch of the current transaction failed for good (its delivery reports say so)."""
        actions = classify("Produce", code)
        if actions & FATAL:
            self._set_fatal(code, f"{reason}: transactional producer fenced by newer producer instance")
        elif self.state in (S.IN_TRANSACTION, S.BEGIN_COMMIT, S.COMMITTING):
            self._set_abortable(code, f"{reason}: current transaction must be aborted", bool(actions & BUMP))
        return self._take()

    def on_bump_request(self, producer_id: int, epoch: int, reason: str, now: float) -> list[Action]:
        """A toppar lost track of its sequences (KIP-360): the epoch must be bumped. Inside a transaction
        that fails the transaction and the abort bumps; between transactions it bumps now."""
        if (producer_id, epoch) != (self.producer_id, self.epoch) or self._bumping:
            return self._take()
        if self.state in (S.IN_TRANSACTION, S.BEGIN_COMMIT, S.COMMITTING):
            self._set_abortable(E._INCONSISTENT, f"epoch bump needed: {reason}", bump=True)
        elif self.state in (S.BEGIN_ABORT, S.ABORTING, S.ABORTABLE_ERROR):
            self.requires_bump = True
        elif self.state in (S.READY, S.READY_NOT_ACKED, S.COMMIT_NOT_ACKED, S.ABORT_NOT_ACKED):
            self._start_bump(now)
        return self._take()

    def on_fatal(self, code: int, reason: str) -> list[Action]:
        """A fatal error raised elsewhere (an idempotence desync in a toppar)."""
        self._set_fatal(code, reason, announce=False)
        return self._take()

    # ---- broker responses -----------------------------------------------------------------------------

    def on_response(self, request_id: int, error_code: int, result: dict[str, Any] | None, now: float,
                    reason: str = "") -> list[Action]:
        """The answer to a SendRequest: ``error_code`` is a request-level (transport) error, ``result`` the
        decoded response of the request kind."""
        entry = self._requests.pop(request_id, None)
        if entry is None:
            return self._take()
        purpose, context = entry
        getattr(self, f"_on_{purpose}")(context, error_code, result or {}, now, reason)
        return self._take()

    def tick(self, now: float) -> list[Action]:
        due = [name for name, at in self._timers.items() if at <= now]
        for name in due:
            del self._timers[name]
        for name in due:
            if name == "coordinator":
                self._coord_query(now)
            elif name == "pid":
                self._pid_fsm(now)
            elif name == "register":
                self._register(now)
            elif name == "add_offsets":
                self._send_add_offsets(now)
            elif name == "group_coordinator":
                self._offsets_next(now)
            elif name == "endtxn":
                self._send_endtxn(now)
        return self._take()

    # ---- coordinator and producer id --------------------------------------------------------------------

    def _coord_query(self, now: float) -> None:
        if self._coord_in_flight or self.state is S.FATAL_ERROR:
            return
        self._coord_in_flight = True
        self._timers.pop("coordinator", None)
        self._send("coord", None, "txn:FindCoordinator", {"key_type": 1, "key": self.transactional_id}, None)

    def _on_coord(self, _ctx: Any, code: int, result: dict[str, Any], now: float, reason: str) -> None:
        self._coord_in_flight = False
        code = code or result.get("error_code", 0)
        node = result.get("node_id", -1)
        if not code and node < 0:
            code = E.COORDINATOR_NOT_AVAILABLE
        if code:
            if classify("FindCoordinator", code) & FATAL:
                self._set_fatal(code, f"Failed to find transaction coordinator: {self._reason(code, reason)}")
                return
            self.init_err = self.init_err or code
            self._timers["coordinator"] = now + COORDINATOR_QUERY_BACKOFF_MS
            return
        self.coordinator = node
        self._coordinator_ready(now)

    def _coordinator_lost(self, now: float, why: str) -> None:
        self.coordinator = None
        self._timers.setdefault("coordinator", now + min(self.retry_backoff_ms, COORDINATOR_QUERY_BACKOFF_MS))

    def _coordinator_ready(self, now: float) -> None:
        if self.state is S.WAIT_PID or self._bumping:
            self._pid_fsm(now)
        self._register(now)

    def _pid_fsm(self, now: float) -> None:
        """Acquire the producer id (or bump its epoch) from the transaction coordinator."""
        if self.state is S.FATAL_ERROR or self._pid_in_flight:
            return
        if not (self.state is S.WAIT_PID or self._bumping):
            return
        at = self._timers.get("pid")
        if at is not None and at > now:
            return
        self._timers.pop("pid", None)
        if self.coordinator is None:
            self._coord_query(now)
            return
        self._pid_in_flight = True
        current = (self.producer_id, self.epoch) if self._bumping else (-1, -1)
        self._send("pid", current, "txn:InitProducerId", {
            "transactional_id": self.transactional_id, "transaction_timeout_ms": self.transaction_timeout_ms,
            "producer_id": current[0], "producer_epoch": current[1]}, self.coordinator)

    def _on_pid(self, current: tuple[int, int], code: int, result: dict[str, Any], now: float, reason: str) -> None:
        self._pid_in_flight = False
        code = code or result.get("error_code", 0)
        if code:
            actions = classify("InitProducerId", code)
            if actions & FATAL:
                prefix = "Producer fenced by newer instance: " if code in FENCING_CODES else ""
                self._set_fatal(code, f"{prefix}Failed to acquire transactional PID from the coordinator: "
                                      f"{self._reason(code, reason)}")
                return
            self.init_err = code
            if actions & COORDINATOR:
                self._coordinator_lost(now, "InitProducerId failed")
            self._timers["pid"] = now + _retry_backoff_ms("InitProducerId", code, self.retry_backoff_ms)
            return
        self.init_err = 0
        self._bumping = False
        self.producer_id, self.epoch = int(result["producer_id"]), int(result["producer_epoch"])
        self._actions.append(SetPid(self.producer_id, self.epoch))
        after, self._abort_after_pid = self._abort_after_pid, None
        if self.state is S.WAIT_PID:
            self._set_state(S.READY_NOT_ACKED)
            self._result("init", None)
        elif after == "endtxn" and self.state is S.BEGIN_ABORT:
            self._abort_continue(now)  # the bump that held the abort is done: end the transaction now
        elif after == "complete" and self.state in (S.BEGIN_ABORT, S.ABORTING):
            self._set_state(S.ABORT_NOT_ACKED)  # aborted, and bumped as the failure required
            self._result("abort", None)
        self._register(now)

    def _start_bump(self, now: float) -> None:
        if self._bumping or self.producer_id < 0:
            return
        self._bumping = True
        self._actions.append(SetPid(-1, -1))  # toppars hold their data until the new epoch
        self._pid_fsm(now)

    # ---- AddPartitionsToTxn -------------------------------------------------------------------------------

    def _register(self, now: float) -> None:
        if self.state not in _SENDING_STATES or not self.pending or self._add_in_flight:
            return
        if "register" in self._timers and self._timers["register"] > now:
            return
        if self.coordinator is None:
            self._coord_query(now)
            return
        if not self.pid_valid:
            return  # the partitions wait for the producer id (the bump's answer registers them)
        self._timers.pop("register", None)
        self.waitresp, self.pending = self.pending, set()
        topics: dict[str, list[int]] = {}
        for topic, partition in sorted(self.waitresp):
            topics.setdefault(topic, []).append(partition)
        self._add_in_flight = True
        self.req_cnt += 1
        self._send("add_partitions", None, "txn:AddPartitionsToTxn", {
            "transactional_id": self.transactional_id, "producer_id": self.producer_id,
            "producer_epoch": self.epoch, "topics": [[t, ps] for t, ps in topics.items()]}, self.coordinator)

    def _on_add_partitions(self, _ctx: Any, code: int, result: dict[str, Any], now: float, reason: str) -> None:
        self._add_in_flight = False
        asked, self.waitresp = self.waitresp, set()
        failed: dict[tuple[str, int], int] = {}
        answered: set[tuple[str, int]] = set()
        if not code:
            code = result.get("error_code", 0)
            for topic, partition, pcode in result.get("partitions", ()):
                answered.add((topic, partition))
                if pcode:
                    failed[(topic, partition)] = pcode
        if code:
            failed = dict.fromkeys(asked, code)
        granted = tuple(sorted(k for k in asked & answered if k not in failed))
        if failed and not granted and code not in MAYBE_SENT:
            # Nothing was added on the coordinator: this request does not open the transaction there.
            self.req_cnt = max(self.req_cnt - 1, 0)
        if self.state not in _SENDING_STATES:
            return  # outdated: the transaction was aborted meanwhile (its partitions were refused then)
        self.pending.update(asked - answered - set(failed))  # missing from the answer: asked for again
        self.registered.update(granted)
        if granted:
            self._actions.append(Grant(granted, self.producer_id, self.epoch))
        if not failed:
            self._register(now)
            return
        actions = 0
        for pcode in failed.values():
            actions |= classify("AddPartitionsToTxn", pcode)
        codes = list(failed.values())
        first = next((c for c in codes if classify("AddPartitionsToTxn", c) & FATAL), None) \
            or next((c for c in codes if c != E.OPERATION_NOT_ATTEMPTED), codes[0])
        text = f"Failed to add partition(s) to transaction: {self._reason(first, reason)}"
        self.pending.update(failed)  # refused below if the transaction or the producer failed
        if actions & FATAL:
            self._set_fatal(first, text)
        elif actions & ABORTABLE:
            self._set_abortable(first, text, bool(actions & BUMP))
        else:
            if actions & COORDINATOR:
                self._coordinator_lost(now, text)
            self._timers["register"] = now + _retry_backoff_ms("AddPartitionsToTxn", first, self.retry_backoff_ms)

    # ---- EndTxn -----------------------------------------------------------------------------------------

    def _send_endtxn(self, now: float) -> None:
        if self._endtxn_commit is None or self.state not in (S.COMMITTING, S.ABORTING):
            return
        if self.coordinator is None:
            self._timers["endtxn"] = now + self.retry_backoff_ms
            self._coord_query(now)
            return
        self._send("endtxn", self._endtxn_commit, "txn:EndTxn", {
            "transactional_id": self.transactional_id, "producer_id": self.producer_id,
            "producer_epoch": self.epoch, "committed": self._endtxn_commit}, self.coordinator)

    def _on_endtxn(self, commit: bool, code: int, result: dict[str, Any], now: float, reason: str) -> None:
        code = code or result.get("error_code", 0)
        step = "commit" if commit else "abort"
        what = "commit" if commit else "abort"
        if self.state is S.ABORTABLE_ERROR:
            # The transaction failed locally while EndTxn(commit) was on its way.
            if code:
                self._result(step, KafkaError(self.txn_err, f"EndTxn failed with {E(code).name()} but the "
                                              f"transaction had already failed due to: {self.txn_errstr}",
                                              txn_requires_abort=True))
            elif commit:
                self._result(step, KafkaError(self.txn_err, "Transaction commit succeeded on the broker but the "
                                              f"transaction had already failed locally due to: {self.txn_errstr}",
                                              fatal=True))
            else:
                self._result(step, KafkaError(self.txn_err, "Transaction abort succeeded on the broker but the "
                                              f"transaction had already failed locally due to: {self.txn_errstr}",
                                              txn_requires_abort=True))
            return
        if self.state is not (S.COMMITTING if commit else S.ABORTING):
            return  # outdated
        if not code:
            self._adopt_endtxn_pid(result)
            self._endtxn_done(now, commit)
            return
        actions = classify("EndTxn", code)
        text = f"EndTxn {what} failed: {self._reason(code, reason)}"
        if actions & FATAL:
            self._set_fatal(code, f"Failed to end transaction: {self._reason(code, reason)}")
            return
        if actions & ABORTABLE:
            if actions & BUMP and not commit:
                # KIP-360: the abort bumps the epoch, then completes (the coordinator forgot this producer id)
                self.requires_bump = True
                self._endtxn_done(now, commit=False)
                return
            if self.state is S.ABORTING:
                self._set_state(S.BEGIN_ABORT)  # the abort can be called again from the start
            self._set_abortable(code, text, bool(actions & BUMP))
            self._result(step, flagged(_normalize(code), text, ABORTABLE))
            return
        if actions & COORDINATOR:
            self._coordinator_lost(now, text)
        self._timers["endtxn"] = now + _retry_backoff_ms("EndTxn", code, self.retry_backoff_ms)

    def _adopt_endtxn_pid(self, result: dict[str, Any]) -> None:
        """EndTxn v5+ (KIP-890 part 2) returns the producer id/epoch for the next transaction."""
        producer_id, epoch = int(result.get("producer_id", -1)), int(result.get("producer_epoch", -1))
        if producer_id >= 0 and epoch >= 0 and (producer_id, epoch) != (self.producer_id, self.epoch):
            self.producer_id, self.epoch = producer_id, epoch
            self._actions.append(SetPid(producer_id, epoch))

    def _endtxn_done(self, now: float, commit: bool) -> None:
        self._timers.pop("endtxn", None)
        if not commit and self.requires_bump:
            self._abort_after_pid = "complete"
            self.requires_bump = False
            self._start_bump(now)
            return
        self._set_state(S.COMMIT_NOT_ACKED if commit else S.ABORT_NOT_ACKED)
        self._result("commit" if commit else "abort", None)

    def _complete(self) -> None:
        self.pending.clear()
        self.waitresp.clear()
        self.registered.clear()
        self.requires_bump = False
        self.req_cnt = 0
        self._endtxn_commit = None
        self._set_state(S.READY)

    # ---- errors -----------------------------------------------------------------------------------------

    def _require(self, *states: TxnState) -> KafkaError | None:
        if self.state in states:
            return None
        if self.state is S.FATAL_ERROR or self.state is S.ABORTABLE_ERROR:
            return self.error()
        return KafkaError(E._STATE, f"Operation not valid in state {self.state.value}")

    def _set_abortable(self, code: int, reason: str, bump: bool = False) -> None:
        if self.state is S.FATAL_ERROR:
            return
        if bump:
            self.requires_bump = True
        if self.txn_err or self.state in _ABORTABLE_IGNORED_IN:
            return  # the first error of the transaction is the one reported
        self.txn_err, self.txn_errstr = _normalize(code), reason
        if self.state not in ENTERED_FROM[S.ABORTABLE_ERROR]:
            return
        self._set_state(S.ABORTABLE_ERROR)
        self._refuse_waiting(E._PURGE_QUEUE, reason)
        self._actions.append(PurgeQueued(reason))
        self._actions.append(StateChanged(self.state, self.txn_seq, self.error()))

    def _set_fatal(self, code: int, reason: str, announce: bool = True) -> None:
        if self.state is S.FATAL_ERROR:
            return
        self.txn_err, self.txn_errstr = _normalize(code), reason
        self.state = S.FATAL_ERROR
        self._timers.clear()
        error = self.error()
        assert error is not None
        if announce:
            self._actions.append(Fatal(error))
        self._refuse_waiting(error.code(), reason)
        self._actions.append(StateChanged(self.state, self.txn_seq, error))
        for step in sorted(self.waiting):
            self._result(step, error)
        self._offsets = None

    def _refusal(self) -> tuple[int, str]:
        if self.state is S.FATAL_ERROR:
            return self.txn_err, self.txn_errstr
        if self.state in (S.ABORTABLE_ERROR, S.BEGIN_ABORT, S.ABORTING, S.ABORT_NOT_ACKED):
            return E._PURGE_QUEUE, "the transaction is being aborted"
        return E._STATE, f"Producing not allowed in transactional state {self.state.value}"

    def _refuse_waiting(self, code: int, reason: str) -> None:
        waiting = tuple(sorted(self.pending | self.waitresp))
        self.pending.clear()
        if waiting:
            self._actions.append(Refuse(waiting, code, reason))

    # ---- plumbing ---------------------------------------------------------------------------------------

    def _set_state(self, new: TxnState) -> None:
        if new is self.state:
            return
        if new is not S.FATAL_ERROR and self.state not in ENTERED_FROM[new]:
            raise AssertionError(f"invalid transaction state transition {self.state.value} -> {new.value}")
        self.state = new

    def _result(self, step: str, error: KafkaError | None) -> None:
        self.waiting.discard(step)
        self._actions.append(ApiResult(step, error))

    def _send(self, purpose: str, context: Any, kind: str, args: dict[str, Any], broker: int | None) -> None:
        request_id = self._next_request_id
        self._next_request_id += 1
        self._requests[request_id] = (purpose, context)
        self._actions.append(SendRequest(request_id, kind, args, broker, self.request_timeout_ms))

    @staticmethod
    def _reason(code: int, reason: str) -> str:
        text = KafkaError(code).str()
        return f"{text} ({reason})" if reason and reason != text else text

    def _take(self) -> list[Action]:
        actions, self._actions = self._actions, []
        return actions

