"""Runs in: the main host. Owns one broker's TCP socket and the broker/N actor wrapped around it: connect,
reconnect with backoff, drive the Connection state machine, send XMIT batches as Produce requests and
generic REQUEST ops of registered kinds, and give every one of them exactly one result.

Ops in:  XMIT (toppar), REQUEST (any actor, as a runtime request), BROKER_UPDATE, PARTITION_JOIN/LEAVE, STATS
         (main).
Ops out: XMIT_RESULT (to the XMIT's sender), the REQUEST's reply (RESPONSE), BROKER_STATE (to main).
"""

from __future__ import annotations

import errno
import logging
import socket
import time
from typing import Any

from kqactors.core.connection import Completion, Connection, ConnState, ReconnectBackoff, Request
from kqactors.core.stats import broker_stats, monotonic_us
from kqactors.errors import KafkaError
from kqactors.ops import client as ops
from kqactors.ops import producer as pops
from kqactors.protocol.requests import (
    PRODUCE_FLEXIBLE_FROM,
    PRODUCE_KEY,
    PRODUCE_VERSIONS,
    REQUEST_KINDS,
    XmitEntry,
    collate_produce,
    decode_produce,
    encode_produce,
)
from kqactors.runtime.actor import Actor, ActorContext, on
from kqactors.runtime.op import Op

log = logging.getLogger(__name__)

RECV_SIZE = 256 * 1024
TICK_SECONDS = 0.05
_CONNECT = "BROKER_CONNECT"
_TICK = "BROKER_TICK"
_FLUSH = "BROKER_FLUSH"


def _conf(config: dict[str, Any], name: str, default: Any) -> Any:
    value = config.get(name, default)
    return default if value is None else value


class BrokerActor(Actor):
    """broker/N. `config` holds librdkafka property names (client.id, socket.timeout.ms, ...)."""

    def __init__(self, ctx: ActorContext, node_id: int, host: str, port: int, config: dict[str, Any] | None = None,
                 owner: str = "main") -> None:
        super().__init__(ctx)
        config = dict(config or {})
        self.node_id = node_id
        self.host = host
        self.port = int(port)
        self.owner = owner
        self.socket_timeout_ms = int(_conf(config, "socket.timeout.ms", 60000))
        self.nagle_disable = bool(_conf(config, "socket.nagle.disable", True))
        self.max_in_flight = int(_conf(config, "max.in.flight.requests.per.connection", 1000000))
        self.conn = Connection(
            client_id=_conf(config, "client.id", "rdkafka"),
            max_in_flight=self.max_in_flight,
            api_version_timeout_ms=int(_conf(config, "api.version.request.timeout.ms", 10000)),
            connect_timeout_ms=int(_conf(config, "socket.connection.setup.timeout.ms", 30000)),
        )
        self.backoff = ReconnectBackoff(int(_conf(config, "reconnect.backoff.ms", 100)),
                                        int(_conf(config, "reconnect.backoff.max.ms", 10000)))
        self.sock: socket.socket | None = None
        self._recv_buf = memoryview(bytearray(RECV_SIZE))  # reused: a fresh 256 KiB per read cost page faults
        self.want_write = False
        self.unsent_xmits: list[XmitEntry] = []
        self.unsent_requests: list[tuple[Op, float]] = []
        self.partitions: set[tuple[str, int]] = set()
        self.flush_scheduled = False
        self.reconnect_timer: int | None = None
        self.connect_attempts = 0
        self.stopped = False
        self._addr_index = 0
        self._reported_state = ""
        self._state_since_us = monotonic_us()
        self.bootstrap = node_id < 0  # main numbers the bootstrap servers -1, -2, ...

    # ---- lifecycle -------------------------------------------------------------------------------------

    def on_start(self) -> None:
        self.ctx.timer(TICK_SECONDS, Op(_TICK), repeat=True)
        self._connect()

    def on_stop(self) -> None:
        self.stopped = True
        try:
            # The client lives on (main retires brokers that leave the metadata): what this broker held is
            # failed as a lost connection, so toppars retry it on the partition's next leader.
            self._fail_all(KafkaError._TRANSPORT, "broker actor stopped")
        finally:
            self._close_socket()

    @on(ops.STATS)
    def _on_stats(self, op: Op) -> None:
        """This connection's part of the statistics (librdkafka's ``brokers`` entry)."""
        nodename = f"{self.host}:{self.port}"
        if self.bootstrap:  # librdkafka's names: "host:port/bootstrap" (node id -1), "host:port/<id>"
            name, node_id, source = f"{nodename}/bootstrap", -1, "configured"
        else:
            name, node_id, source = f"{nodename}/{self.node_id}", self.node_id, "learned"
        waiting = len(self.conn.waiting) + len(self.unsent_xmits) + len(self.unsent_requests)
        self.ctx.reply(op, Op(ops.STATS, broker_stats(
            name, node_id, nodename, source, self.conn.state.name, self._state_since_us, self.conn.counters,
            waiting, len(self.conn.in_flight), sorted(self.partitions), monotonic_us())))

    @on(_CONNECT)
    def _on_connect_timer(self, _op: Op) -> None:
        self.reconnect_timer = None
        if self.conn.state in (ConnState.INIT, ConnState.DOWN) and not self.stopped:
            self._connect()

    @on(_TICK)
    def _on_tick(self, _op: Op) -> None:
        now = time.monotonic()
        done, must_disconnect = self.conn.check_timeouts(now)
        self._dispatch(done)
        if must_disconnect:
            self._disconnect(self.conn.last_error or "request timed out", now)
        self._expire_unsent(now)

    @on(ops.BROKER_UPDATE)
    def _on_update(self, op: Op) -> None:
        payload = op.payload or {}
        host, port = payload.get("host", self.host), int(payload.get("port", self.port))
        if (host, port) != (self.host, self.port):
            self.host, self.port = host, port
            self._addr_index = 0
            if self.conn.state != ConnState.DOWN:
                self._disconnect(f"broker address changed to {host}:{port}", time.monotonic())

    @on(ops.PARTITION_JOIN)
    def _on_partition_join(self, op: Op) -> None:
        self.partitions.add((op.payload["topic"], op.payload["partition"]))

    @on(ops.PARTITION_LEAVE)
    def _on_partition_leave(self, op: Op) -> None:
        self.partitions.discard((op.payload["topic"], op.payload["partition"]))

    # ---- requests in -----------------------------------------------------------------------------------

    @on(pops.XMIT)
    def _on_xmit(self, op: Op) -> None:
        payload = op.payload or {}
        try:
            entry = XmitEntry(op.sender or "", payload["topic"], int(payload["partition"]),
                              payload["batch_id"], int(payload.get("toppar_version", 0)),
                              int(payload.get("acks", -1)), int(payload.get("timeout_ms", 30000)),
                              op.frames[0], time.monotonic(), payload.get("deadline_ms"))
        except (KeyError, IndexError, TypeError, ValueError) as exc:
            self._send_xmit_error(op, KafkaError._INVALID_ARG, f"malformed XMIT: {exc!r}")
            if op.is_request:
                self.ctx.reply(op, Op(pops.XMIT, {"accepted": False}))
            return
        if op.is_request:  # the sender only wants to learn about undeliverable XMITs: free its slot now
            self.ctx.reply(op, Op(pops.XMIT, {"accepted": True}))
        self.unsent_xmits.append(entry)
        if not self.flush_scheduled:
            self.flush_scheduled = True
            self.ctx.send(self.ctx.name, Op(_FLUSH))

    @on(_FLUSH)
    def _on_flush(self, _op: Op) -> None:
        self.flush_scheduled = False
        self._flush_produce(time.monotonic())

    @on(ops.REQUEST)
    def _on_request(self, op: Op) -> None:
        payload = op.payload or {}
        kind = REQUEST_KINDS.get(payload.get("kind"))
        if kind is None:
            self._reply(op, KafkaError._INVALID_ARG, f"unknown request kind {payload.get('kind')!r}")
            return
        self.unsent_requests.append((op, time.monotonic()))
        if self.conn.state == ConnState.UP:
            self._flush_requests(time.monotonic())
        elif self.conn.state == ConnState.DOWN and self.reconnect_timer is None:
            self._connect()

    # ---- sending ---------------------------------------------------------------------------------------

    def _flush_requests(self, now: float) -> None:
        pending, self.unsent_requests = self.unsent_requests, []
        for op, received_at in pending:
            payload = op.payload or {}
            kind = REQUEST_KINDS[payload["kind"]]
            version = self.conn.pick_version(kind.api_key, kind.min_version, kind.max_version)
            if version is None:
                self._reply(op, KafkaError._UNSUPPORTED_FEATURE,
                            f"broker {self.node_id} does not support {kind.name} v{kind.min_version}-"
                            f"{kind.max_version}")
                continue
            try:
                body = kind.encode(version, payload.get("args") or {}, op.frames)
            except Exception as exc:  # noqa: BLE001 - bad args: one clear error back to the requester
                self._reply(op, KafkaError._INVALID_ARG, f"cannot encode {kind.name}: {exc}")
                continue
            timeout_ms = int(payload.get("timeout_ms") or self.socket_timeout_ms)
            remaining = max(1, timeout_ms - int((now - received_at) * 1000))
            self.conn.enqueue(Request(kind.api_key, version, body, kind.is_flexible(version),
                                      timeout_ms=remaining, context=("req", op, kind, version)), now)
        self._write()

    def _flush_produce(self, now: float) -> None:
        if self.conn.state != ConnState.UP:
            if self.conn.state == ConnState.DOWN and self.reconnect_timer is None and self.unsent_xmits:
                self._connect()
            return
        version = self.conn.pick_version(PRODUCE_KEY, *PRODUCE_VERSIONS)
        if version is None:
            failed, self.unsent_xmits = self.unsent_xmits, []
            for entry in failed:
                self._xmit_result(entry, KafkaError._UNSUPPORTED_FEATURE,
                                  error_message="broker does not support Produce v3+", sent=False)
            return
        while self.unsent_xmits and len(self.conn.in_flight) + len(self.conn.waiting) < self.max_in_flight:
            taken, self.unsent_xmits = collate_produce(self.unsent_xmits)
            timeout_ms = self.socket_timeout_ms
            wall_ms = time.time() * 1000
            for entry in taken:
                if entry.deadline_ms is not None:
                    timeout_ms = min(timeout_ms, int(entry.deadline_ms - wall_ms))
            if timeout_ms <= 0:
                for entry in taken:
                    self._xmit_result(entry, self._timeout_code(entry, wall_ms), error_message="timed out",
                                      sent=False)
                continue
            acks = taken[0].acks
            body = encode_produce(version, taken)
            self.conn.enqueue(Request(PRODUCE_KEY, version, body, version >= PRODUCE_FLEXIBLE_FROM,
                                      expect_response=acks != 0, timeout_ms=timeout_ms,
                                      context=("produce", taken, None, version)), now)
        self._write()

    # ---- completions -----------------------------------------------------------------------------------

    def _dispatch(self, completions: list[Completion]) -> None:
        for completion in completions:
            what, subject, kind, version = completion.request.context
            if what == "req":
                self._complete_request(subject, kind, version, completion)
            else:
                self._complete_produce(subject, version, completion)
        if completions and self.unsent_xmits and self.conn.state == ConnState.UP:
            self._flush_produce(time.monotonic())

    def _complete_request(self, op: Op, kind: Any, version: int, completion: Completion) -> None:
        if completion.error_code:
            self._reply(op, completion.error_code, completion.reason)
            return
        try:
            result = kind.decode(version, completion.response)
        except Exception as exc:  # noqa: BLE001 - a malformed response is that request's error
            self._reply(op, KafkaError._BAD_MSG, f"malformed {kind.name} v{version} response: {exc}")
            return
        self._reply(op, KafkaError.NO_ERROR, "", result)

    def _complete_produce(self, entries: list[XmitEntry], version: int, completion: Completion) -> None:
        wall_ms = time.time() * 1000
        if completion.error_code:
            sent = completion.request.sent_at >= 0
            for entry in entries:
                code = completion.error_code
                if code == KafkaError._TIMED_OUT:
                    code = self._timeout_code(entry, wall_ms)
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

    @staticmethod
    def _timeout_code(entry: XmitEntry, wall_ms: float) -> int:
        if entry.deadline_ms is not None and wall_ms >= entry.deadline_ms:
            return KafkaError._MSG_TIMED_OUT
        return KafkaError._TIMED_OUT

    def _xmit_result(self, entry: XmitEntry, error_code: int, base_offset: int = -1, log_append_time: int = -1,
                     log_start_offset: int = -1, record_errors: list | None = None,
                     error_message: str | None = None, sent: bool = True) -> None:
        payload = pops.xmit_result_payload(entry.topic, entry.partition, entry.batch_id, entry.toppar_version,
                                          error_code, base_offset, log_append_time, log_start_offset,
                                          record_errors, error_message, self.node_id, sent)
        if entry.sender:
            self.ctx.send(entry.sender, Op(pops.XMIT_RESULT, payload))

    def _send_xmit_error(self, op: Op, code: int, message: str) -> None:
        payload = op.payload if isinstance(op.payload, dict) else {}
        result = pops.xmit_result_payload(payload.get("topic", ""), payload.get("partition", -1),
                                         payload.get("batch_id", -1), payload.get("toppar_version", 0), code,
                                         error_message=message, broker_id=self.node_id)
        if op.sender:
            self.ctx.send(op.sender, Op(pops.XMIT_RESULT, result))

    def _reply(self, op: Op, error_code: int, reason: str, result: Any = None) -> None:
        reply = Op(ops.RESPONSE, {"error_code": error_code, "reason": reason, "result": result,
                                  "broker_id": self.node_id})
        if op.is_request and not op.replied:
            self.ctx.reply(op, reply)
        elif op.sender:
            self.ctx.send(op.sender, reply)

    def _expire_unsent(self, now: float) -> None:
        wall_ms = time.time() * 1000
        if self.unsent_xmits:
            keep = []
            for entry in self.unsent_xmits:
                expired = (now - entry.received_at) * 1000 >= self.socket_timeout_ms
                if expired or (entry.deadline_ms is not None and wall_ms >= entry.deadline_ms):
                    self._xmit_result(entry, self._timeout_code(entry, wall_ms), sent=False,
                                      error_message=f"not sent: broker {self.node_id} {self.conn.state.name}")
                else:
                    keep.append(entry)
            self.unsent_xmits = keep
        if self.unsent_requests:
            keep_requests = []
            for op, received_at in self.unsent_requests:
                timeout_ms = int((op.payload or {}).get("timeout_ms") or self.socket_timeout_ms)
                if (now - received_at) * 1000 >= timeout_ms:
                    self._reply(op, KafkaError._TIMED_OUT, f"not sent: broker {self.node_id} {self.conn.state.name}")
                else:
                    keep_requests.append((op, received_at))
            self.unsent_requests = keep_requests

    def _fail_all(self, code: int, reason: str) -> None:
        self._dispatch(self.conn.on_disconnect(time.monotonic(), reason, code))
        self._fail_unsent(code, reason)

    # ---- socket ----------------------------------------------------------------------------------------

    def _connect(self) -> None:
        now = time.monotonic()
        self.connect_attempts += 1
        self.conn.counters.connects += 1
        self.conn.start_connect(now)
        self._report_state()
        try:
            infos = socket.getaddrinfo(self.host, self.port, type=socket.SOCK_STREAM)
        except OSError as exc:
            self._connect_failed(f"resolve {self.host}:{self.port} failed: {exc}", KafkaError._RESOLVE)
            return
        family, kind, proto, _name, address = infos[self._addr_index % len(infos)]
        self._addr_index += 1
        sock = socket.socket(family, kind, proto)
        sock.setblocking(False)
        if self.nagle_disable:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        code = sock.connect_ex(address)
        if code not in (0, errno.EINPROGRESS, errno.EWOULDBLOCK):
            sock.close()
            self._connect_failed(f"connect to {self.host}:{self.port} failed: {errno.errorcode.get(code, code)}",
                                 KafkaError._TRANSPORT)
            return
        self.sock = sock
        self.want_write = True
        self.ctx.register_fd(sock.fileno(), self._on_readable, self._on_writable)

    def _connect_failed(self, reason: str, code: int) -> None:
        now = time.monotonic()
        self._dispatch(self.conn.on_disconnect(now, reason, code))
        self._fail_unsent(code, reason)
        self._schedule_reconnect(now)
        self._report_state()

    def _fail_unsent(self, code: int, reason: str) -> None:
        """Work waiting for a connection fails when the connection attempt fails (librdkafka does the same),
        so requesters can try another broker and toppars retry with their own backoff."""
        xmits, self.unsent_xmits = self.unsent_xmits, []
        for entry in xmits:
            self._xmit_result(entry, code, error_message=reason, sent=False)
        requests, self.unsent_requests = self.unsent_requests, []
        for op, _ in requests:
            self._reply(op, code, reason)

    def _on_writable(self) -> None:
        now = time.monotonic()
        if self.conn.state == ConnState.CONNECT:
            err = self.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) if self.sock else errno.EBADF
            if err:
                self._disconnect(f"connect to {self.host}:{self.port} failed: {errno.errorcode.get(err, err)}",
                                 now)
                return
            self.conn.on_connected(now)
            self._report_state()
        self._write()

    def _on_readable(self) -> None:
        if self.sock is None:
            return
        now = time.monotonic()
        was_up = self.conn.state == ConnState.UP
        try:
            buf = self._recv_buf
            while True:
                received = self.sock.recv_into(buf)
                if not received:
                    self._disconnect("connection closed by broker", now)
                    return
                self._dispatch(self.conn.feed(buf[:received], now))
                if received < RECV_SIZE or self.sock is None:
                    break
        except (BlockingIOError, InterruptedError):
            pass
        except (OSError, ConnectionError) as exc:
            self.conn.counters.rxerrs += 1
            self._disconnect(f"receive failed: {exc}", now)
            return
        if not was_up and self.conn.state == ConnState.UP:
            self._on_up(now)
        self._write()

    def _on_up(self, now: float) -> None:
        self.connect_attempts = 0
        self._report_state()
        self._flush_requests(now)
        self._flush_produce(now)

    def _write(self) -> None:
        if self.sock is None or self.conn.state == ConnState.CONNECT:
            return
        now = time.monotonic()
        try:
            while self.conn.has_output():
                sent = self.sock.sendmsg(self.conn.output_buffers())
                self._dispatch(self.conn.on_written(sent, now))
                if self.sock is None:
                    return
        except (BlockingIOError, InterruptedError):
            pass
        except OSError as exc:
            self.conn.counters.txerrs += 1
            self._disconnect(f"send failed: {exc}", now)
            return
        want = self.conn.has_output()
        if want != self.want_write and self.sock is not None:
            self.want_write = want
            self.ctx.register_fd(self.sock.fileno(), self._on_readable, self._on_writable if want else None)

    def _disconnect(self, reason: str, now: float) -> None:
        log.info("broker/%s %s:%s down: %s", self.node_id, self.host, self.port, reason)
        self.conn.counters.disconnects += 1
        self._close_socket()
        self._dispatch(self.conn.on_disconnect(now, reason))
        self._fail_unsent(KafkaError._TRANSPORT, reason)
        self._schedule_reconnect(now)
        self._report_state()

    def _close_socket(self) -> None:
        if self.sock is not None:
            try:
                self.ctx.unregister_fd(self.sock.fileno())
            finally:
                self.sock.close()
                self.sock = None
                self.want_write = False

    def _schedule_reconnect(self, now: float) -> None:
        if self.stopped or self.reconnect_timer is not None:
            return
        delay_ms = self.backoff.next_delay_ms(now)
        self.reconnect_timer = self.ctx.timer(max(delay_ms, 1) / 1000, Op(_CONNECT))

    def _report_state(self) -> None:
        if self.conn.state.name != self._reported_state:
            self._reported_state = self.conn.state.name
            self._state_since_us = monotonic_us()
        self.ctx.send(self.owner, Op(ops.BROKER_STATE, {
            "node_id": self.node_id, "name": self.ctx.name, "state": self.conn.state.name,
            "reason": self.conn.last_error, "host": self.host, "port": self.port}))
