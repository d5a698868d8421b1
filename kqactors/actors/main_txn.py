"""Runs in: the main host, as part of the ``main`` actor of a producer with ``transactional.id`` (a mixin of
``kqactors.actors.main.MainActor``). Owns the wiring of the pure transaction manager
(``kqactors.core.producer.txn``) to ops: the application's API steps (TXN_API requests, answered when the step
is done or its timeout passed), the toppars' partition registrations (TXN_ADD_PARTITION requests, answered
once the partition is in the transaction) and failures (TXN_PRODUCE_FAILED), the manager's broker requests
(REQUEST to broker/N: the transaction coordinator's, the group coordinator's or any broker's connection), its
timers, and what it asks of the others: the producer id to every toppar (PID), PURGE of queued messages when
the transaction fails, TXN_STATE and fatal ERR to the app.

Ops in:  TXN_API (app), TXN_ADD_PARTITION, TXN_PRODUCE_FAILED (toppar); main routes PID_BUMP and fatal ERR here.
Ops out: REQUEST (broker/N), PID, PURGE (toppars), TXN_STATE, ERR (app), replies to the requests above.
"""

from __future__ import annotations

import logging
import math
import time
from collections import deque
from typing import TYPE_CHECKING, Any

from kqactors.errors import KafkaError
from kqactors.ops import client as ops
from kqactors.ops import producer as pops
from kqactors.runtime.actor import on
from kqactors.runtime.op import Op

if TYPE_CHECKING:
    from kqactors.core.producer.txn import SendRequest, TxnManager

log = logging.getLogger(__name__)

_TXN_TICK = "MAIN_TXN_TICK"
_TXN_REGISTER = "MAIN_TXN_REGISTER"
# how long past its deadline an API step's reply may come (the app waits this much longer than the timeout)
_MIN_TIMER_S = 0.001


def _now_ms() -> float:
    return time.monotonic() * 1000.0


class TxnWiring:
    """The transactional part of the main actor. Uses main's ``ctx``, ``config``, ``app``, ``brokers``,
    ``toppars``, ``scheduler``, ``_pick_broker`` and ``_set_pid``."""

    ctx: Any
    config: dict[str, Any]
    app: str
    brokers: dict[int, Any]
    toppars: dict[tuple[str, int], str]
    scheduler: Any
    socket_timeout_ms: int

    def _txn_setup(self) -> None:
        transactional_id = self.config.get("transactional.id") or ""
        self.txn: TxnManager | None = None
        if transactional_id:  # the transaction manager is loaded by transactional producers only
            from kqactors.core.producer.txn import TxnManager

            self.txn = TxnManager(str(transactional_id), int(self.config.get("transaction.timeout.ms", 60000)),
                                  int(self.config.get("retry.backoff.ms", 100)), self.socket_timeout_ms)
        self._txn_api_waiting: dict[str, list[tuple[Op, float]]] = {}
        self._txn_add_waiting: dict[tuple[str, int], list[Op]] = {}
        self._txn_register_posted = False
        self._txn_timer: int | None = None
        self._txn_timer_at: float | None = None

    # ---- ops in ---------------------------------------------------------------------------------------

    @on(pops.TXN_API)
    def _on_txn_api(self, op: Op) -> None:
        payload = dict(op.payload or {})
        step = payload.pop("step", "")
        timeout_ms = payload.pop("timeout_ms", None)
        if self.txn is None:
            error = KafkaError(KafkaError._NOT_CONFIGURED,
                               "The Transactional API requires transactional.id to be configured")
            self.ctx.reply(op, Op(pops.TXN_API, {"error": pops.txn_error_to_wire(error), "state": "",
                                                 "txn_seq": 0}))
            return
        now = _now_ms()
        deadline = math.inf if timeout_ms is None else now + float(timeout_ms)
        if step == "send_offsets":
            payload["deadline"] = deadline if timeout_ms is not None else now + self.txn.transaction_timeout_ms
            deadline = math.inf  # the manager answers at its deadline itself (its retries stop there)
        self._txn_api_waiting.setdefault(step, []).append((op, deadline))
        try:
            actions = self.txn.api(step, now, **payload)
        except (TypeError, ValueError) as exc:
            self._txn_api_waiting[step].pop()
            error = KafkaError(KafkaError._INVALID_ARG, f"invalid transaction API step {step!r}: {exc}")
            self.ctx.reply(op, Op(pops.TXN_API, {"error": pops.txn_error_to_wire(error),
                                                 "state": self.txn.state.value, "txn_seq": self.txn.txn_seq}))
            return
        self._txn_run(actions, now)

    @on(pops.TXN_ADD_PARTITION)
    def _on_txn_add_partition(self, op: Op) -> None:
        payload = op.payload or {}
        key = (payload["topic"], int(payload["partition"]))
        if self.txn is None:
            self.ctx.reply(op, Op(pops.TXN_ADD_PARTITION, {"error_code": KafkaError._NOT_CONFIGURED,
                                                           "reason": "not a transactional producer"}))
            return
        self._txn_add_waiting.setdefault(key, []).append(op)
        now = _now_ms()
        self._txn_run(self.txn.add_partition(key[0], key[1], now), now)
        if self._txn_add_waiting.get(key) and not self._txn_register_posted:
            # Register everything that asks during this turn in one AddPartitionsToTxn.
            self._txn_register_posted = True
            self.ctx.continue_later(Op(_TXN_REGISTER))

    @on(_TXN_REGISTER)
    def _on_txn_register(self, _op: Op) -> None:
        self._txn_register_posted = False
        if self.txn is not None:
            now = _now_ms()
            self._txn_run(self.txn.register_partitions(now), now)

    @on(pops.TXN_PRODUCE_FAILED)
    def _on_txn_produce_failed(self, op: Op) -> None:
        payload = op.payload or {}
        if self.txn is not None:
            where = f"{payload.get('topic')} [{payload.get('partition')}]"
            now = _now_ms()
            self._txn_run(self.txn.on_produce_failed(int(payload.get("code", KafkaError._FAIL)),
                                                     f"Produce to {where} failed: {payload.get('reason', '')}",
                                                     now), now)
        if op.is_request:  # the toppar holds its delivery reports until the manager knows
            self.ctx.reply(op, Op(pops.TXN_PRODUCE_FAILED, {}))

    def _txn_on_bump(self, payload: dict[str, Any]) -> None:
        """main's PID_BUMP handler hands a transactional producer's bump requests here."""
        assert self.txn is not None
        now = _now_ms()
        txn = self.txn
        if payload.get("current"):  # the app lost toppars (their host died): whatever epoch is in force now
            producer_id, epoch = txn.producer_id, txn.epoch
        else:
            producer_id, epoch = int(payload.get("producer_id", -1)), int(payload.get("epoch", -1))
        self._txn_run(txn.on_bump_request(producer_id, epoch, str(payload.get("reason", "")), now), now)

    def _txn_on_fatal(self, code: int, reason: str) -> None:
        """A fatal error raised by a toppar (idempotence) fails the transaction manager too."""
        assert self.txn is not None
        self._txn_run(self.txn.on_fatal(code, reason), _now_ms())

    @on(_TXN_TICK)
    def _on_txn_tick(self, _op: Op) -> None:
        self._txn_timer = None
        self._txn_timer_at = None
        self._txn_tick(_now_ms())

    def _txn_tick(self, now: float) -> None:
        """Timers of the manager, and API steps whose timeout passed (main's tick calls this too)."""
        if self.txn is None:
            return
        actions = self.txn.tick(now) if (at := self.txn.next_deadline()) is not None and at <= now else []
        self._txn_run(actions, now)
        for step, waiting in list(self._txn_api_waiting.items()):
            expired = [entry for entry in waiting if entry[1] <= now]
            if not expired:
                continue
            self._txn_api_waiting[step] = [entry for entry in waiting if entry[1] > now]
            error = self._txn_timeout_error(step)
            for op, _deadline in expired:
                self._txn_reply(op, error)

    def _txn_timeout_error(self, step: str) -> KafkaError:
        assert self.txn is not None
        from kqactors.core.producer.txn_errors import normalize

        if step == "init" and self.txn.init_err and normalize(self.txn.init_err) != KafkaError._TIMED_OUT:
            code = normalize(self.txn.init_err)
            return KafkaError(code, f"Failed to initialize Producer ID: {KafkaError(code).str()}", retriable=True)
        return KafkaError(KafkaError._TIMED_OUT, "Timed out waiting for operation to finish, retry call to resume",
                          retriable=True)

    # ---- actions out ----------------------------------------------------------------------------------

    def _txn_run(self, actions: list[Any], now: float) -> None:
        from kqactors.core.producer.txn import (
            ApiResult,
            Fatal,
            Grant,
            PurgeQueued,
            Refuse,
            SendRequest,
            SetPid,
            StateChanged,
        )

        txn = self.txn
        assert txn is not None
        queue = deque(actions)
        while queue:
            action = queue.popleft()
            if isinstance(action, SendRequest):
                queue.extend(self._txn_send(action, now))
            elif isinstance(action, ApiResult):
                for op, _deadline in self._txn_api_waiting.pop(action.step, []):
                    self._txn_reply(op, action.error)
            elif isinstance(action, SetPid):
                self._set_pid(action.producer_id, action.epoch)  # type: ignore[attr-defined]
            elif isinstance(action, Grant):
                reply = {"error_code": 0, "producer_id": action.producer_id, "epoch": action.epoch}
                for key in action.partitions:
                    for op in self._txn_add_waiting.pop(key, []):
                        self.ctx.reply(op, Op(pops.TXN_ADD_PARTITION, dict(reply)))
            elif isinstance(action, Refuse):
                reply = {"error_code": action.code, "reason": action.reason}
                for key in action.partitions:
                    for op in self._txn_add_waiting.pop(key, []):
                        self.ctx.reply(op, Op(pops.TXN_ADD_PARTITION, dict(reply)))
            elif isinstance(action, PurgeQueued):
                log.warning("transaction failed, purging queued messages: %s", action.reason)
                for name in set(self.toppars.values()):
                    self.ctx.send(name, Op(pops.PURGE, {"in_queue": True, "in_flight": False}))
            elif isinstance(action, Fatal):
                error = action.error
                self.ctx.send(self.app, Op(ops.ERR, ops.err_payload(error.code(), error.str(), fatal=True)))
                failed = {**pops.pid_payload(-1, -1, error.code()), "fatal": True}
                for name in set(self.toppars.values()):
                    self.ctx.send(name, Op(pops.PID, failed))
            elif isinstance(action, StateChanged):
                self.ctx.send(self.app, Op(pops.TXN_STATE, {"state": action.state.value, "txn_seq": action.txn_seq,
                                                            "error": pops.txn_error_to_wire(action.error)}))
        self._txn_arm(now)

    def _txn_send(self, action: SendRequest, now: float) -> list[Any]:
        """Send a manager's request; an unknown broker answers at once (and the broker list is refreshed)."""
        txn = self.txn
        assert txn is not None
        if action.broker is None:
            handle = self._pick_broker()  # type: ignore[attr-defined]
            name = handle.name if handle is not None else None
        else:
            name = ops.broker_name(action.broker) if action.broker in self.brokers else None
        if name is None:
            self.scheduler.request(None, time.monotonic())  # the coordinator is not a known broker yet
            return txn.on_response(action.request_id, KafkaError._UNKNOWN_BROKER, None, now,
                                   f"broker {action.broker} is not known")
        request_id = action.request_id
        payload = {"kind": action.kind, "args": action.args, "timeout_ms": action.timeout_ms}
        self.ctx.request(name, Op(ops.REQUEST, payload), lambda reply: self._txn_on_reply(request_id, reply),
                         action.timeout_ms / 1000 + 1.0)
        return []

    def _txn_on_reply(self, request_id: int, reply: Op) -> None:
        if self.txn is None:
            return
        code, reason, result = ops.unpack_response(reply)
        now = _now_ms()
        self._txn_run(self.txn.on_response(request_id, code, result, now, reason), now)

    def _txn_reply(self, op: Op, error: KafkaError | None) -> None:
        txn = self.txn
        assert txn is not None
        self.ctx.reply(op, Op(pops.TXN_API, {"error": pops.txn_error_to_wire(error), "state": txn.state.value,
                                             "txn_seq": txn.txn_seq}))

    def _txn_arm(self, now: float) -> None:
        txn = self.txn
        at = txn.next_deadline() if txn is not None else None
        if at is None or (self._txn_timer_at is not None and self._txn_timer_at <= at):
            return
        if self._txn_timer is not None:
            self.ctx.cancel_timer(self._txn_timer)
        self._txn_timer_at = at
        self._txn_timer = self.ctx.timer(max((at - now) / 1000.0, _MIN_TIMER_S), Op(_TXN_TICK))

    def _txn_stats(self) -> dict[str, Any]:
        """librdkafka's eos.txn_state / eos.txn_may_enq statistics."""
        txn = self.txn
        if txn is None:
            return {}
        return {"txn_state": txn.state.value, "txn_may_enq": txn.may_produce}
