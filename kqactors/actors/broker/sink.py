"""Runs in: the main host, as a part of each broker/N actor. Owns the produce side of one broker connection:
XMITs from toppar actors wait here until the connection is UP, are collated into Produce requests (their
pre-encoded batches spliced by reference, never copied or re-encoded) and every one gets exactly one
XMIT_RESULT back to its sender — on the response, a failure, a timeout, or when never sent.

Backpressure (queue.buffering.backpressure.threshold, librdkafka's): while that many requests are queued on
the connection but not yet written to the socket, no new Produce request is made; the XMITs wait here and
are collated into fewer, larger requests once the socket takes the earlier ones.

Ops in:  XMIT (toppar), BROKER_FLUSH (itself, once per host turn with new XMITs).
Ops out: XMIT_RESULT (to the XMIT's sender).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kqactors.core.connection import Completion, ConnState, Request
from kqactors.errors import KafkaError
from kqactors.ops import producer as pops
from kqactors.protocol.requests import MAX_PRODUCE_REQUEST_BYTES, PRODUCE, decode_produce, encode_produce
from kqactors.runtime.op import Op

if TYPE_CHECKING:
    from kqactors.actors.broker.actor import BrokerActor

_FLUSH = "BROKER_FLUSH"


@dataclass(eq=False)
class XmitEntry:
    """One XMIT waiting for its one XMIT_RESULT: a pre-encoded batch for one partition."""

    sender: str
    topic: str
    partition: int
    batch_id: int
    toppar_version: int
    acks: int
    timeout_ms: int
    batch: Any
    received_at: float
    deadline_ms: int | None = None  # wall clock (ms) of the first message's message.timeout.ms
    record_count: int = -1


def collate_produce(entries: list[XmitEntry], max_bytes: int = MAX_PRODUCE_REQUEST_BYTES
                    ) -> tuple[list[XmitEntry], list[XmitEntry]]:
    """Take the entries for one Produce request: same acks/timeout as the first, one batch per partition
    (brokers accept a single v2 batch per partition), bounded size. Returns (taken, left over), both in
    the original order so a partition's batches keep their order across requests."""
    if not entries:
        return [], []
    first = entries[0]
    taken: list[XmitEntry] = []
    rest: list[XmitEntry] = []
    seen: set[tuple[str, int]] = set()
    size = 0
    for entry in entries:
        key = (entry.topic, entry.partition)
        fits = not taken or size + len(entry.batch) <= max_bytes
        if (entry.acks, entry.timeout_ms) == (first.acks, first.timeout_ms) and key not in seen and fits:
            taken.append(entry)
            seen.add(key)
            size += len(entry.batch)
        else:
            seen.add(key)  # a later batch of this partition must not overtake this one
            rest.append(entry)
    return taken, rest


def _timeout_code(entry: XmitEntry, wall_ms: float) -> int:
    if entry.deadline_ms is not None and wall_ms >= entry.deadline_ms:
        return KafkaError._MSG_TIMED_OUT
    return KafkaError._TIMED_OUT


class ProduceSink:
    """The broker actor's produce part; it reaches the connection and the context through ``broker``."""

    def __init__(self, broker: BrokerActor, backpressure: int = 1) -> None:
        self.broker = broker
        self.unsent: list[XmitEntry] = []
        self.flush_scheduled = False
        #: a transactional producer's transactional.id: Produce requests carry it (the broker authorizes and,
        #: with KIP-890, verifies transactional batches by it)
        self.transactional_id: str | None = None
        #: queue.buffering.backpressure.threshold: untransmitted requests that hold back new ones
        self.backpressure = max(1, int(backpressure))
        #: True when XMITs wait because of the backpressure threshold (``on_output_progress`` resumes them)
        self.held = False
        self._in_flush = False

    def handlers(self) -> dict[str, Any]:
        return {pops.XMIT: self._on_xmit, _FLUSH: self._on_flush}

    # ---- ops -------------------------------------------------------------------------------------------

    def _on_xmit(self, op: Op) -> None:
        broker = self.broker
        payload = op.payload or {}
        try:
            entry = XmitEntry(op.sender or "", payload["topic"], int(payload["partition"]),
                              payload["batch_id"], int(payload.get("toppar_version", 0)),
                              int(payload.get("acks", -1)), int(payload.get("timeout_ms", 30000)),
                              op.frames[0], time.monotonic(), payload.get("deadline_ms"),
                              int(payload.get("record_count", -1)))
        except (KeyError, IndexError, TypeError, ValueError) as exc:
            self._send_xmit_error(op, KafkaError._INVALID_ARG, f"malformed XMIT: {exc!r}")
            if op.is_request:
                broker.ctx.reply(op, Op(pops.XMIT, {"accepted": False}))
            return
        if op.is_request:  # the sender only wants to learn about undeliverable XMITs: free its slot now
            broker.ctx.reply(op, Op(pops.XMIT, {"accepted": True}))
        self.unsent.append(entry)
        if not self.flush_scheduled:
            self.flush_scheduled = True
            broker.ctx.send(broker.ctx.name, Op(_FLUSH))

    def _on_flush(self, _op: Op) -> None:
        self.flush_scheduled = False
        self.flush(time.monotonic())

    # ---- sending ---------------------------------------------------------------------------------------

    def flush(self, now: float) -> None:
        """Turn waiting XMITs into Produce requests while the connection is UP and has room."""
        broker = self.broker
        conn = broker.conn
        if conn.state != ConnState.UP:
            if self.unsent:
                broker.ensure_connecting()
            return
        version = conn.version_for(PRODUCE)
        if version is None:
            failed, self.unsent = self.unsent, []
            for entry in failed:
                self._xmit_result(entry, KafkaError._UNSUPPORTED_FEATURE,
                                  error_message=f"broker does not support Produce v{PRODUCE.min_version}+",
                                  sent=False)
            return
        socket_timeout_ms = broker.socket_timeout_ms
        self.held = False
        self._in_flush = True
        try:
            self._make_requests(conn, version, socket_timeout_ms, now)
        finally:
            self._in_flush = False
        broker.write()

    def _make_requests(self, conn: Any, version: int, socket_timeout_ms: int, now: float) -> None:
        broker = self.broker
        debug = broker.clog.debugging("msg")
        while self.unsent and len(conn.in_flight) + len(conn.waiting) < broker.max_in_flight:
            if conn.untransmitted >= self.backpressure:
                broker.write()  # the socket may take the earlier requests now
                if conn.untransmitted >= self.backpressure:
                    self.held = True
                    return
            taken, self.unsent = collate_produce(self.unsent)
            timeout_ms = socket_timeout_ms
            wall_ms = time.time() * 1000
            for entry in taken:
                if entry.deadline_ms is not None:
                    timeout_ms = min(timeout_ms, int(entry.deadline_ms - wall_ms))
            if timeout_ms <= 0:
                for entry in taken:
                    self._xmit_result(entry, _timeout_code(entry, wall_ms), error_message="timed out", sent=False)
                continue
            body = encode_produce(version, taken, self.transactional_id)
            if debug:
                for entry in taken:
                    broker.clog.debug("msg", "PRODUCE", f"{broker.log_name}: {entry.topic} [{entry.partition}]: "
                                                        f"Produce MessageSet with {entry.record_count} message(s) "
                                                        f"({len(entry.batch)} bytes, ApiVersion {version}, "
                                                        f"MsgVersion 2, acks {entry.acks})")
            conn.enqueue(Request(PRODUCE.api_key, version, body, PRODUCE.is_flexible(version),
                                 expect_response=taken[0].acks != 0, timeout_ms=timeout_ms,
                                 context=(self.complete, taken, PRODUCE, version)), now)

    def on_output_progress(self) -> None:
        """The socket took bytes: XMITs held back by the backpressure threshold may go now."""
        if self.held and not self._in_flush and self.broker.conn.untransmitted < self.backpressure:
            self.flush(time.monotonic())

    def resume(self) -> None:
        """After completions: more XMITs may fit in the in-flight window now."""
        if self.unsent and self.broker.conn.state == ConnState.UP:
            self.flush(time.monotonic())

    # ---- results ---------------------------------------------------------------------------------------

    def complete(self, entries: list[XmitEntry], _kind: Any, version: int, completion: Completion) -> None:
        wall_ms = time.time() * 1000
        if completion.error_code:
            sent = completion.request.sent_at >= 0
            for entry in entries:
                code = completion.error_code
                if code == KafkaError._TIMED_OUT:
                    code = _timeout_code(entry, wall_ms)
                self._xmit_result(entry, code, error_message=completion.reason, sent=sent)
            return
        if completion.response is None:  # acks=0: done when written
            for entry in entries:
                self._xmit_result(entry, KafkaError.NO_ERROR)
            return
        try:
            results = decode_produce(version, completion.response)
        except Exception as exc:  # noqa: BLE001
            for entry in entries:
                self._xmit_result(entry, KafkaError._BAD_MSG, error_message=f"malformed Produce response: {exc}")
            return
        for entry in entries:
            result = results.get((entry.topic, entry.partition))
            if result is None:
                self._xmit_result(entry, KafkaError._BAD_MSG, error_message="partition missing from response")
            else:
                self._xmit_result(entry, **result)

    def expire(self, now: float) -> None:
        """XMITs that waited for a connection past socket.timeout.ms or their message timeout fail unsent."""
        if not self.unsent:
            return
        broker = self.broker
        wall_ms = time.time() * 1000
        keep = []
        for entry in self.unsent:
            expired = (now - entry.received_at) * 1000 >= broker.socket_timeout_ms
            if expired or (entry.deadline_ms is not None and wall_ms >= entry.deadline_ms):
                self._xmit_result(entry, _timeout_code(entry, wall_ms), sent=False,
                                  error_message=f"not sent: broker {broker.node_id} {broker.conn.state.name}")
            else:
                keep.append(entry)
        self.unsent = keep

    def fail_unsent(self, code: int, reason: str) -> None:
        xmits, self.unsent = self.unsent, []
        for entry in xmits:
            self._xmit_result(entry, code, error_message=reason, sent=False)

    def _xmit_result(self, entry: XmitEntry, error_code: int, base_offset: int = -1, log_append_time: int = -1,
                     log_start_offset: int = -1, record_errors: list | None = None,
                     error_message: str | None = None, sent: bool = True) -> None:
        broker = self.broker
        payload = pops.xmit_result_payload(entry.topic, entry.partition, entry.batch_id, entry.toppar_version,
                                          error_code, base_offset, log_append_time, log_start_offset,
                                          record_errors, error_message, broker.node_id, sent)
        if broker.clog.contexts and broker.clog.debugging("msg"):
            outcome = (f"delivered (base offset {base_offset})" if not error_code else
                       f"failed: {KafkaError(error_code).str()}{f' ({error_message})' if error_message else ''}")
            broker.clog.debug("msg", "MSGSET", f"{broker.log_name}: {entry.topic} [{entry.partition}]: MessageSet "
                                               f"with {entry.record_count} message(s) {outcome}")
        if entry.sender:
            broker.ctx.send(entry.sender, Op(pops.XMIT_RESULT, payload))

    def _send_xmit_error(self, op: Op, code: int, message: str) -> None:
        payload = op.payload if isinstance(op.payload, dict) else {}
        result = pops.xmit_result_payload(payload.get("topic", ""), payload.get("partition", -1),
                                         payload.get("batch_id", -1), payload.get("toppar_version", 0), code,
                                         error_message=message, broker_id=self.broker.node_id)
        if op.sender:
            self.broker.ctx.send(op.sender, Op(pops.XMIT_RESULT, result))
