"""Runs in: a toppar host (one ``TopparActor`` per ``toppar/<topic>/<partition>``). Owns the wiring of the
pure partition core (``kqactors.core.producer.partition``) to ops: PRODUCE frames in, record batches encoded
and compressed here (the multi-core part), XMIT to the leader's broker actor, XMIT_RESULT back, DR rows to
the app, METADATA_REFRESH / PID_BUMP / pops.DRAINED / ERR to main, and one timer for linger, backoff and timeouts.

Ops in:  PRODUCE, pops.FLUSH, pops.PURGE, RESTARTED, RECOVER, BROKERS_DOWN (app); LEADER, PID, pops.FATAL (main); XMIT_RESULT (broker/N); pops.TOPPAR_WAKE (timer).
Ops out: DR, TOPPAR_SEQ (app), XMIT (broker/N), TOPPAR_JOIN, METADATA_REFRESH, PID_BUMP, pops.DRAINED, ERR (main).
Transactional (transactional.id): before its first batch after running empty, a toppar asks main to add the
partition to the transaction (TXN_ADD_PARTITION) and sends nothing until main answers; it reports batches that
fail for good to main (TXN_PRODUCE_FAILED). Running empty ends what a registration covers: the next data may
belong to the next transaction (a transaction ends only once its partitions delivered or purged everything).
"""

from __future__ import annotations

import logging
import time
from typing import Any

from kqactors.core.producer.batch import Batch
from kqactors.core.producer.partition import Effects, PartitionProducer
from kqactors.core.producer.settings import ProducerSettings
from kqactors.errors import KafkaError
from kqactors.ops import client as ops
from kqactors.ops import producer as pops
from kqactors.records.batch_v2 import RecordBatchBuilder, restamp
from kqactors.records.compression import codec_id
from kqactors.records.packed import ENTRY as _PACKED_ENTRY
from kqactors.runtime.actor import Actor, ActorContext, on
from kqactors.runtime.op import ErrorCode, Op

log = logging.getLogger(__name__)

_RESUME = "TOPPAR_RESUME"
_TXN_ASK_AGAIN = "TOPPAR_TXN_ASK_AGAIN"
# codes that fail a transactional partition's data without failing the transaction (it is being aborted, or
# the data was refused before it could join a transaction)
_TXN_QUIET_CODES = frozenset({KafkaError._PURGE_QUEUE, KafkaError._PURGE_INFLIGHT, KafkaError._STATE,
                              KafkaError._FATAL, KafkaError._FENCED, KafkaError._DESTROY})

_PACKED_ENTRY_SIZE = _PACKED_ENTRY.size
_MIN_TIMER_S = 0.0005
_INFLIGHT_SLACK_S = 5.0
#: Message bytes a toppar encodes (compresses) before it lets the host send what it has so far and resumes
#: in the next turn: without it, a backlog of batches was all compressed in one turn and reached the broker
#: actor in one burst hundreds of milliseconds later, the broker idle meanwhile.
ENCODE_STEP_BYTES = 1 << 20


class TopparActor(Actor):
    """Producer side of one partition.

    Spawn args: ``topic``, ``partition``, ``settings`` (``ProducerSettings.to_dict()``), optionally
    ``app`` (DR destination name, default ``"app"``), ``app_qid`` (its queue id) and ``main`` (default
    ``"main"``).
    """

    def __init__(self, ctx: ActorContext, **args: Any) -> None:
        super().__init__(ctx, **args)
        self.topic: str = args["topic"]
        self.partition: int = int(args["partition"])
        self.settings = ProducerSettings.from_dict(args.get("settings") or {})
        self.app_name: str = args.get("app", "app")
        self.app_qid: int = int(args.get("app_qid", 0))  # the app's events queue
        self.seq_qid: int = int(args.get("seq_qid", self.app_qid))  # where TOPPAR_SEQ notes go
        self.main_name: str = args.get("main", "main")
        self.core = PartitionProducer(self.topic, self.partition, self.settings)
        self.codec = codec_id(self.settings.compression_type)
        self.level = self.settings.compression_level
        self.version = 1
        #: batch id → the runtime request of its XMIT in flight (cancelled when the XMIT_RESULT comes)
        self._xmit_requests: dict[int, int] = {}
        self.timer_id: int | None = None
        self.timer_at: float | None = None
        self.drain_wanted = False
        self.bump_reason: str | None = None
        self.bump_sent = False
        self.restart_bump = False
        # crash recovery: the sequences of batches sent this turn, told to the app (pops.SEQ) so that a restarted
        # toppar can resend them unchanged (idempotent, not transactional)
        self.seq_notes = self.settings.idempotence and not self.settings.transactional
        self.seq_rows: list[list[int]] = []
        self.encoded_since_resume = 0  # message bytes encoded since the last _RESUME (ENCODE_STEP_BYTES)
        self.resume_posted = False
        # transactions: is the partition registered for what it holds, the token of the outstanding ask (0:
        # none), and whether a failure was reported to main since the partition last ran empty
        self.txn = self.settings.transactional
        self.txn_added = False
        self.txn_ask = 0
        self.txn_asks = 0
        self.txn_failure_reported = False
        self.txn_held_reports: list | None = None  # delivery reports waiting for main to learn of a failure

    # ---- lifecycle ------------------------------------------------------------------------------------
    def on_start(self) -> None:
        self._join()

    def _join(self) -> None:
        """Announce this toppar to main, once: the runtime publishes a spawned actor's name before it
        starts, and hosts hold ops to names not yet published, so main's LEADER answer cannot be lost."""
        self.ctx.send(self.main_name, Op(pops.TOPPAR_JOIN, {"topic": self.topic, "partition": self.partition,
                                                           "idempotent": self.settings.idempotence}))

    def on_stop(self) -> None:
        # Whatever is left gets a delivery report: nothing is silently lost.
        self.core.purge(in_queue=True, in_flight=True)
        self._after(self.core.take_effects(), send=False)

    # ---- app ------------------------------------------------------------------------------------------
    @on(pops.PRODUCE)
    def _on_produce(self, op: Op) -> None:
        payload = op.payload
        try:
            first_msgid = int(payload["first_msgid"])
            count = int(payload["count"])
            frame = op.frames[0]  # bytes, or a zero-copy memoryview of what the transport received: kept as is
            if len(frame) < _PACKED_ENTRY_SIZE * count:
                raise ValueError(f"frame of {len(frame)} bytes cannot hold {count} messages")
            enq_time = float(payload["enq_time"])
        except (KeyError, IndexError, TypeError, ValueError) as exc:
            log.error("%s: malformed PRODUCE op dropped: %r", self.ctx.name, exc)
            first = int(payload.get("first_msgid", 0)) if isinstance(payload, dict) else 0
            count = int(payload.get("count", 0)) if isinstance(payload, dict) else 0
            if count:
                self._send_dr([(first, count, KafkaError._BAD_MSG, -1, -1)])
            return
        # The frame is queued whole and only walked once, by the record encoder; a frame that turns out
        # malformed there fails its batch with _BAD_MSG (one delivery report per message still).
        self.core.enqueue_frame(first_msgid, count, frame, int(payload.get("headers", 0)), enq_time,
                                payload.get("cuts"))
        if payload.get("flush"):
            self.core.request_flush()
        self._pump()

    @on(ops.STATS)
    def _on_stats(self, op: Op) -> None:
        self.ctx.reply(op, Op(ops.STATS, {"topic": self.topic, "partition": self.partition,
                                          **self.core.stats()}))

    @on(pops.FLUSH)
    def _on_flush(self, op: Op) -> None:
        self.core.request_flush()
        self._pump()

    @on(pops.RESTARTED)
    def _on_restarted(self, op: Op) -> None:
        """This actor replaces one whose host died. The broker may hold sequences of batches the old one
        sent, so an idempotent toppar moves to a new epoch (sequences restart at 0) before sending. A
        transactional one does not ask: the app told main of the loss when the host died (the transaction fails
        and its abort bumps), and a toppar back only after that abort already has the new epoch."""
        if self.settings.idempotence and not self.txn:
            self.restart_bump = True
            self._pump()

    @on(pops.RECOVER)
    def _on_recover(self, op: Op) -> None:
        """This actor replaces one whose host died, and the app knows the sequences its predecessor used: resend
        those batches with the same producer id, epoch and sequences (the broker deduplicates any it already
        wrote) instead of moving to a new epoch. The re-handed messages follow this op."""
        payload = op.payload or {}
        if not self.settings.idempotence:
            return
        if not self.core.recover(int(payload.get("producer_id", -1)), int(payload.get("epoch", -1)),
                                 int(payload.get("next_seq", 0)), payload.get("batches") or []):
            log.info("%s: sequences could not be recovered; bumping the epoch", self.ctx.name)
            self.restart_bump = True
        self._pump()

    @on(pops.BROKERS_DOWN)
    def _on_brokers_down(self, op: Op) -> None:
        """Main's host died with these broker actors: what they had accepted gets no XMIT_RESULT any more."""
        lost = {int(node) for node in (op.payload or {}).get("brokers") or ()}
        core = self.core
        for batch_id in [b for b, batch in core.inflight.items() if batch.broker_id in lost]:
            core.on_result(batch_id, KafkaError._TRANSPORT, request_sent=True)
        self._pump()

    @on(pops.PURGE)
    def _on_purge(self, op: Op) -> None:
        payload = op.payload or {}
        self.core.purge(bool(payload.get("in_queue", True)), bool(payload.get("in_flight", True)))
        self._pump()
        if op.is_request:
            self.ctx.reply(op, Op(pops.PURGE, {"topic": self.topic, "partition": self.partition}))

    # ---- main -----------------------------------------------------------------------------------------
    @on(pops.LEADER)
    def _on_leader(self, op: Op) -> None:
        payload = op.payload
        log.debug("%s: LEADER %s", self.ctx.name, payload)
        self.core.set_leader(int(payload.get("broker_id", -1)))
        if "producer_id" in payload and int(payload["producer_id"]) >= 0:
            self.core.set_pid(int(payload["producer_id"]), int(payload.get("epoch", -1)))
        self._pump()

    @on(pops.PID)
    def _on_pid(self, op: Op) -> None:
        payload = op.payload
        producer_id = int(payload.get("producer_id", -1))
        error_code = int(payload.get("error_code", 0) or 0)
        if error_code and producer_id < 0 and payload.get("fatal"):
            self.core.set_fatal(error_code, "could not acquire a producer id")
        self.core.set_pid(producer_id, int(payload.get("epoch", -1)))
        if producer_id >= 0:
            self.bump_reason = None
            self.bump_sent = False
        elif payload.get("drain") and self.settings.idempotence:
            self.drain_wanted = True
        self._pump()

    @on(pops.FATAL)
    def _on_fatal(self, op: Op) -> None:
        payload = op.payload or {}
        self.core.set_fatal(int(payload.get("code", KafkaError._FATAL)), str(payload.get("reason", "")))
        self._pump()

    # ---- broker ---------------------------------------------------------------------------------------
    @on(pops.XMIT_RESULT)
    def _on_xmit_result(self, op: Op) -> None:
        payload = op.payload
        log.debug("%s: XMIT_RESULT %s", self.ctx.name, payload)
        if int(payload.get("toppar_version", self.version)) != self.version:
            return
        request = self._xmit_requests.pop(int(payload["batch_id"]), None)
        if request is not None:  # answered: the request's pending entry and its timeout go now, not in a minute
            self.ctx.cancel_request(request)
        self.core.on_result(int(payload["batch_id"]), int(payload.get("error_code", 0)),
                            int(payload.get("base_offset", -1)), int(payload.get("log_append_time", -1)),
                            request_sent=bool(payload.get("sent", True)))
        self._pump()

    # ---- timer ----------------------------------------------------------------------------------------
    @on(pops.TOPPAR_WAKE)
    def _on_wake(self, op: Op) -> None:
        self.timer_id = None
        self.timer_at = None
        self._pump()

    @on(_RESUME)
    def _on_resume(self, op: Op) -> None:
        self.resume_posted = False
        self.encoded_since_resume = 0
        self._pump()

    # ---- the one place where work happens -----------------------------------------------------------
    def _pump(self) -> None:
        core = self.core
        now = time.monotonic()
        if self.txn:
            self._txn_gate(core)
        if self.restart_bump and core.idemp is not None and core.idemp.valid:
            self.restart_bump = False
            core.request_bump("toppar restarted after its host died")
        core.expire(now)
        while self.encoded_since_resume < ENCODE_STEP_BYTES and (batch := core.next_batch(now)) is not None:
            if batch.payload is None:
                self.encoded_since_resume += batch.size
            self._transmit(batch, now)
        if self.seq_rows:
            rows, self.seq_rows = self.seq_rows, []
            self.ctx.send(self.app_name, Op(pops.SEQ, {"topic": self.topic, "partition": self.partition,
                                                      "rows": rows}), qid=self.seq_qid)
        if self.encoded_since_resume >= ENCODE_STEP_BYTES and not self.resume_posted:
            self.resume_posted = True
            self.ctx.continue_later(Op(_RESUME))  # the rest after this turn's batches are on their way
        self._after(core.take_effects())
        if self.bump_reason is not None and core.in_flight_count == 0 and not self.bump_sent:
            # Ask for the epoch bump only once this partition's requests are all answered.
            self.bump_sent = True
            idemp = core.idemp
            self.ctx.send(self.main_name, Op(pops.PID_BUMP, {
                "topic": self.topic, "partition": self.partition, "reason": self.bump_reason,
                "producer_id": idemp.producer_id if idemp else -1, "epoch": idemp.epoch if idemp else -1}))
        if self.drain_wanted and core.in_flight_count == 0:
            self.drain_wanted = False
            self.ctx.send(self.main_name, Op(pops.DRAINED, {"topic": self.topic, "partition": self.partition}))
        self._arm_timer(now)

    # ---- transactions ---------------------------------------------------------------------------------
    def _txn_gate(self, core: PartitionProducer) -> None:
        """Ask main to add the partition to the transaction before its data is sent; forget the registration
        once the partition runs empty."""
        if core.idle:
            if self.txn_added or self.txn_ask:
                self.txn_added = False
                self.txn_ask = 0  # a late answer to it is ignored
                core.txn_hold = True
            self.txn_failure_reported = False
            return
        if self.txn_added or self.txn_ask or core.fatal_error is not None:
            return
        self.txn_asks += 1
        token = self.txn_ask = self.txn_asks
        timeout_s = max(self.settings.message_timeout_ms, self.settings.socket_timeout_ms) / 1000.0 + _INFLIGHT_SLACK_S
        self.ctx.request(self.main_name, Op(pops.TXN_ADD_PARTITION, {"topic": self.topic, "partition": self.partition}),
                         lambda reply: self._on_txn_added(token, reply), timeout_s)

    def _on_txn_added(self, token: int, reply: Op) -> None:
        if token != self.txn_ask:
            return  # the data it was asked for is gone (delivered, purged or timed out)
        self.txn_ask = 0
        core = self.core
        if reply.error is not None:
            # No answer (main restarting, or the request timed out): ask again after a backoff.
            self.txn_ask = -1
            self.ctx.timer(self.settings.retry_backoff_ms / 1000.0, Op(_TXN_ASK_AGAIN))
            return
        payload = reply.payload or {}
        code = int(payload.get("error_code", 0) or 0)
        if code:
            log.debug("%s: not added to the transaction: %s", self.ctx.name, payload.get("reason"))
            core.fail_queued(code)
        else:
            producer_id, epoch = int(payload.get("producer_id", -1)), int(payload.get("epoch", -1))
            idemp = core.idemp
            if producer_id >= 0 and idemp is not None and (producer_id, epoch) != (idemp.producer_id, idemp.epoch):
                core.set_pid(producer_id, epoch)
            self.txn_added = True
            core.txn_hold = False
        self._pump()

    @on(_TXN_ASK_AGAIN)
    def _on_txn_ask_again(self, _op: Op) -> None:
        if self.txn_ask == -1:
            self.txn_ask = 0
            self._pump()

    def _txn_send_reports(self, rows: list) -> None:
        """Delivery reports of a transactional partition. The first failure that fails the transaction is told
        to main first, and the reports go to the app once main has it: the app's next transactional call then
        meets the transaction's real state (fenced, or the produce error to abort for)."""
        if self.txn_held_reports is not None:
            self.txn_held_reports.extend(rows)
            return
        if not self.txn_failure_reported:
            for row in rows:
                code = row[2]
                if code and code not in _TXN_QUIET_CODES:
                    self.txn_failure_reported = True
                    self.txn_held_reports = list(rows)
                    self.ctx.request(self.main_name, Op(pops.TXN_PRODUCE_FAILED, {
                        "topic": self.topic, "partition": self.partition, "code": code,
                        "reason": f"{row[1]} message(s) failed: {KafkaError(code).str()}"}),
                        self._on_txn_failure_noted, max(self.settings.socket_timeout_ms / 1000.0, 1.0))
                    return
        self._send_dr(rows)

    def _on_txn_failure_noted(self, _reply: Op) -> None:
        rows, self.txn_held_reports = self.txn_held_reports, None
        if rows:
            self._send_dr(rows)

    def _transmit(self, batch: Batch, now: float) -> None:
        if self.seq_notes and (batch.payload is None or batch.needs_restamp):
            self.seq_rows.append([batch.first_msgid, batch.count, batch.producer_id, batch.epoch, batch.base_seq])
        if batch.payload is None:
            try:
                batch.payload = self._encode(batch)
            except Exception:  # an encoding failure must become delivery reports, not a dead actor
                log.exception("%s: failed to encode batch", self.ctx.name)
                self.core.on_result(batch.batch_id, KafkaError._BAD_MSG, request_sent=False)
                return
        elif batch.needs_restamp:
            batch.payload = restamp(batch.payload, batch.producer_id, batch.epoch, batch.base_seq)
            batch.needs_restamp = False
        deadline_ms = None
        if batch.deadline != float("inf"):
            deadline_ms = int(time.time() * 1000 + (batch.deadline - now) * 1000)
        payload = pops.xmit_payload(self.topic, self.partition, batch.batch_id, self.version, batch.count,
                                   self.settings.acks, self.settings.request_timeout_ms, deadline_ms)
        # Sent as a request only so that an undeliverable XMIT (broker actor unknown on this host, or
        # restarting) comes straight back as an error; the real answer is the broker's XMIT_RESULT op.
        batch_id = batch.batch_id
        broker = ops.broker_name(batch.broker_id)
        log.debug("%s: XMIT batch %d (%d msgs) to broker %d", self.ctx.name, batch_id, batch.count,
                  batch.broker_id)
        earlier = self._xmit_requests.pop(batch_id, None)
        if earlier is not None:  # a retry of a batch whose last XMIT is still waiting: only the newest counts
            self.ctx.cancel_request(earlier)
        self._xmit_requests[batch_id] = self.ctx.request(
            broker, Op(pops.XMIT, payload, [batch.payload]), lambda reply: self._on_xmit_undeliverable(batch_id, reply),
            max(self.settings.socket_timeout_ms / 1000.0, 1.0) + _INFLIGHT_SLACK_S)

    def _on_xmit_undeliverable(self, batch_id: int, reply: Op) -> None:
        self._xmit_requests.pop(batch_id, None)
        if reply.error is None or reply.error.code not in (ErrorCode.UNKNOWN_ACTOR, ErrorCode.DEAD_ACTOR):
            return  # TIMED_OUT here only means "no runtime reply": the broker answers with XMIT_RESULT
        if self.core.on_result(batch_id, KafkaError._TRANSPORT, request_sent=False):
            self._pump()

    def _encode(self, batch: Batch) -> bytearray:
        builder = RecordBatchBuilder(codec=self.codec, level=self.level, producer_id=batch.producer_id,
                                     producer_epoch=batch.epoch, base_sequence=batch.base_seq,
                                     transactional=self.settings.transactional)
        slices = batch.slices
        appended = 0
        for frame, start, end in slices or ():
            appended += builder.append_packed(frame, start, end)
        if appended != batch.count:
            raise ValueError(f"batch {batch.batch_id} holds {appended} packed messages, expected {batch.count}")
        batch.slices = None  # the encoded payload is what a retry sends; free the frames
        return builder.build()

    def _after(self, effects: Effects, send: bool = True) -> None:
        if not effects:
            return
        if effects.reports:
            if self.txn and send:
                self._txn_send_reports(effects.reports)
            else:
                self._send_dr(effects.reports)
        if not send:
            return
        if effects.refresh_reason is not None:
            self.ctx.send(self.main_name, Op(ops.METADATA_REFRESH,
                                             {**ops.metadata_refresh_payload(self.topic, effects.refresh_reason),
                                              "partition": self.partition}))
        if effects.bump_reason is not None:
            self.bump_reason = effects.bump_reason
            self.bump_sent = False
        if effects.fatal is not None:
            code, reason = effects.fatal
            self.ctx.send(self.main_name, Op(ops.ERR, ops.err_payload(code, reason, fatal=True)))

    def _send_dr(self, rows: list) -> None:
        self.ctx.send(self.app_name, Op(pops.DR, {"topic": self.topic, "partition": self.partition,
                                                 "rows": rows}), qid=self.app_qid)

    def _arm_timer(self, now: float) -> None:
        wake = self.core.next_wakeup(now)
        if wake is None:
            return
        if self.timer_at is not None and self.timer_at <= wake:
            return
        if self.timer_id is not None:
            self.ctx.cancel_timer(self.timer_id)
        self.timer_at = wake
        self.timer_id = self.ctx.timer(max(wake - now, _MIN_TIMER_S), Op(pops.TOPPAR_WAKE))
