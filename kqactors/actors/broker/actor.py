"""Runs in: the main host. Owns the broker/N actor: its lifecycle, the connection attempt (name resolution off
the loop, a ``Transport`` per attempt, reconnect with backoff), driving the socket-free ``core.connection``
state machine with socket events and clock ticks, generic REQUEST ops of the request table's kinds, and the
dispatch of every completion to the part that sent the request. Exactly one result per request.

The actor is composed of parts, each owning its side of the connection: ``sink.ProduceSink`` (XMIT → Produce,
always present) and ``source.FetchSource`` (the consumer's fetch loop, present only when spawned with
``consumer=True`` or ``fetch=<FetchSettings dict>``). Parts contribute op handlers and send requests tagged with
their completion callback; the socket layer is ``transport.py``.

Ops in:  REQUEST (any actor, as a runtime request), BROKER_UPDATE, PARTITION_JOIN/LEAVE, STATS (main), plus the
         parts' ops (XMIT; B_FETCH_START/STOP, FETCH_FLOW).
Ops out: the REQUEST's reply (RESPONSE), BROKER_STATE (to the owner), plus the parts' ops (XMIT_RESULT;
         FETCHED, FETCH_ERROR, FETCH_POSITION, METADATA_REFRESH).
"""

from __future__ import annotations

import errno
import logging
import time
from typing import Any

from kqactors.actors.broker import transport as transports
from kqactors.actors.broker.security import SECURITY_ERRORS, BrokerSecurity
from kqactors.actors.broker.sink import ProduceSink
from kqactors.actors.broker.source import FetchSource
from kqactors.core.connection import (
    Completion,
    Connection,
    ConnState,
    HandshakeError,
    ReconnectBackoff,
    Request,
)
from kqactors.core.consumer.settings import FetchSettings
from kqactors.core.stats import broker_stats, monotonic_us
from kqactors.errors import KafkaError
from kqactors.ops import client as ops
from kqactors.protocol.requests import REQUEST_KINDS, RequestKind
from kqactors.runtime.actor import Actor, ActorContext, on
from kqactors.runtime.op import Op
from kqactors.runtime.threadsafe import ThreadInbox

log = logging.getLogger(__name__)

RECV_SIZE = 256 * 1024
TICK_SECONDS = 0.05
_CONNECT = "BROKER_CONNECT"
_TICK = "BROKER_TICK"
_RESOLVED = "BROKER_RESOLVED"
_REAUTH = "BROKER_REAUTH"
REAUTH_AT = 0.9  # KIP-368: re-authenticate at 90% of the session lifetime the broker granted
_PRE_TRANSPORT = (ConnState.CONNECT, ConnState.SSL_HANDSHAKE)


def _conf(config: dict[str, Any], name: str, default: Any) -> Any:
    value = config.get(name, default)
    return default if value is None else value


class BrokerActor(Actor):
    """broker/N. `config` holds librdkafka property names (client.id, socket.timeout.ms, ...). With
    ``consumer=True`` (settings from ``config``) or ``fetch`` (FetchSettings.to_dict()) it also fetches."""

    def __init__(self, ctx: ActorContext, node_id: int, host: str, port: int, config: dict[str, Any] | None = None,
                 owner: str = "main", consumer: bool = False, fetch: dict[str, Any] | None = None) -> None:
        super().__init__(ctx)
        config = dict(config or {})
        self.node_id = node_id
        self.host = host
        self.port = int(port)
        self.owner = owner
        self.socket_timeout_ms = int(_conf(config, "socket.timeout.ms", 60000))
        self.nagle_disable = bool(_conf(config, "socket.nagle.disable", True))
        self.max_in_flight = int(_conf(config, "max.in.flight.requests.per.connection", 1000000))
        self.security = BrokerSecurity(config)
        self.conn = Connection(
            client_id=_conf(config, "client.id", "rdkafka"),
            max_in_flight=self.max_in_flight,
            api_version_timeout_ms=int(_conf(config, "api.version.request.timeout.ms", 10000)),
            connect_timeout_ms=int(_conf(config, "socket.connection.setup.timeout.ms", 30000)),
            authenticator=self.security.authenticator, tls=self.security.tls,
        )
        self.backoff = ReconnectBackoff(int(_conf(config, "reconnect.backoff.ms", 100)),
                                        int(_conf(config, "reconnect.backoff.max.ms", 10000)))
        self.transport: transports.Transport | None = None
        self._fd = -1
        self._recv_buf = memoryview(bytearray(RECV_SIZE))  # reused: a fresh 256 KiB per read cost page faults
        self.want_write = False
        self.unsent_requests: list[tuple[Op, float]] = []
        self.partitions: set[tuple[str, int]] = set()
        self.reconnect_timer: int | None = None
        self.reauth_timer: int | None = None
        self.reauthentications = 0
        self.connect_attempts = 0
        self.stopped = False
        self._addr_index = 0
        self._resolve_seq = 0
        self._inbox: ThreadInbox | None = None
        self._reported_state = ""
        self._state_since_us = monotonic_us()
        self.bootstrap = node_id < 0  # main numbers the bootstrap servers -1, -2, ...
        # the parts
        self.sink = ProduceSink(self)
        self.sink.transactional_id = _conf(config, "transactional.id", None) or None
        self._handlers.update(self.sink.handlers())
        self.source: FetchSource | None = None
        if consumer or fetch is not None:
            settings = FetchSettings.from_dict(fetch) if fetch is not None else FetchSettings.from_config(config)
            self.source = FetchSource(self, settings)
            self._handlers.update(self.source.handlers())

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
            self._close_transport()
            if self._inbox is not None:
                self._inbox.close()
                self._inbox = None

    @on(ops.STATS)
    def _on_stats(self, op: Op) -> None:
        """This connection's part of the statistics (librdkafka's ``brokers`` entry)."""
        nodename = f"{self.host}:{self.port}"
        if self.bootstrap:  # librdkafka's names: "host:port/bootstrap" (node id -1), "host:port/<id>"
            name, node_id, source = f"{nodename}/bootstrap", -1, "configured"
        else:
            name, node_id, source = f"{nodename}/{self.node_id}", self.node_id, "learned"
        waiting = len(self.conn.waiting) + len(self.sink.unsent) + len(self.unsent_requests)
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
        self.sink.expire(now)
        self._expire_requests(now)
        if self.source is not None:
            self.source.pump()

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

    # ---- generic requests ------------------------------------------------------------------------------

    @on(ops.REQUEST)
    def _on_request(self, op: Op) -> None:
        payload = op.payload or {}
        kind = REQUEST_KINDS.get(payload.get("kind"))
        if kind is None or not kind.remote:
            self._reply(op, KafkaError._INVALID_ARG, f"unknown request kind {payload.get('kind')!r}")
            return
        self.unsent_requests.append((op, time.monotonic()))
        if self.conn.state == ConnState.UP:
            self._flush_requests(time.monotonic())
        elif self.conn.state == ConnState.DOWN and self.reconnect_timer is None:
            self._connect()

    def _flush_requests(self, now: float) -> None:
        pending, self.unsent_requests = self.unsent_requests, []
        for op, received_at in pending:
            payload = op.payload or {}
            kind = REQUEST_KINDS[payload["kind"]]
            version = self.conn.version_for(kind)
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
                                      timeout_ms=remaining, context=(self._complete_request, op, kind, version)),
                              now)
        self.write()

    def _complete_request(self, op: Op, kind: RequestKind, version: int, completion: Completion) -> None:
        if completion.error_code:
            self._reply(op, completion.error_code, completion.reason)
            return
        try:
            result = kind.decode(version, completion.response)
        except Exception as exc:  # noqa: BLE001 - a malformed response is that request's error
            self._reply(op, KafkaError._BAD_MSG, f"malformed {kind.name} v{version} response: {exc}")
            return
        self._reply(op, KafkaError.NO_ERROR, "", result)

    def _reply(self, op: Op, error_code: int, reason: str, result: Any = None) -> None:
        reply = Op(ops.RESPONSE, {"error_code": error_code, "reason": reason, "result": result,
                                  "broker_id": self.node_id})
        if op.is_request and not op.replied:
            self.ctx.reply(op, reply)
        elif op.sender:
            self.ctx.send(op.sender, reply)

    def _expire_requests(self, now: float) -> None:
        if not self.unsent_requests:
            return
        keep_requests = []
        for op, received_at in self.unsent_requests:
            timeout_ms = int((op.payload or {}).get("timeout_ms") or self.socket_timeout_ms)
            if (now - received_at) * 1000 >= timeout_ms:
                self._reply(op, KafkaError._TIMED_OUT, f"not sent: broker {self.node_id} {self.conn.state.name}")
            else:
                keep_requests.append((op, received_at))
        self.unsent_requests = keep_requests

    # ---- completions -----------------------------------------------------------------------------------

    def _dispatch(self, completions: list[Completion]) -> None:
        """Each completion goes to the callback its sender put in the request's context."""
        if not completions:
            return
        for completion in completions:
            complete, subject, kind, version = completion.request.context
            complete(subject, kind, version, completion)
        self.sink.resume()
        source = self.source
        if source is not None and source.completed:
            source.completed = False
            source.pump()

    def _fail_all(self, code: int, reason: str) -> None:
        self._dispatch(self.conn.on_disconnect(time.monotonic(), reason, code))
        self._fail_unsent(code, reason)

    def _fail_unsent(self, code: int, reason: str) -> None:
        """Work waiting for a connection fails when the connection attempt fails (librdkafka does the same),
        so requesters can try another broker and toppars retry with their own backoff."""
        self.sink.fail_unsent(code, reason)
        requests, self.unsent_requests = self.unsent_requests, []
        for op, _ in requests:
            self._reply(op, code, reason)

    # ---- connecting ------------------------------------------------------------------------------------

    def ensure_connecting(self) -> None:
        """Work is waiting: start a connection attempt now unless one is running or a reconnect is planned."""
        if self.conn.state == ConnState.DOWN and self.reconnect_timer is None:
            self._connect()

    def _connect(self) -> None:
        if self.security.needs_token():
            # OAUTHBEARER: the token comes first (from the oauth actor); the attempt starts when it does
            self.security.request_token(self.ctx, self.conn.connect_timeout_ms / 1000, self._on_token)
            return
        now = time.monotonic()
        self.connect_attempts += 1
        self.conn.counters.connects += 1
        self.conn.start_connect(now)
        self._report_state()
        addresses = transports.numeric_address(self.host, self.port)
        if addresses is not None:
            self._connect_to(addresses)
            return
        # A host name: getaddrinfo may block for seconds, so it runs on a thread and the answer comes back
        # as a BROKER_RESOLVED op (numbered: a late answer for an abandoned attempt is ignored).
        self._resolve_seq += 1
        seq = self._resolve_seq
        if self._inbox is None:
            self._inbox = ThreadInbox(self.ctx)
        post = self._inbox.post
        transports.resolve_in_thread(
            self.host, self.port,
            lambda found, error: post(Op(_RESOLVED, {"seq": seq, "addresses": found, "error": error})))

    def _on_token(self, error: str) -> None:
        if self.stopped or self.transport is not None or self.conn.state not in (ConnState.INIT, ConnState.DOWN):
            return
        if error:
            self._connect_failed(error, KafkaError._AUTHENTICATION)
            return
        self._connect()

    @on(_RESOLVED)
    def _on_resolved(self, op: Op) -> None:
        payload = op.payload
        if (payload["seq"] != self._resolve_seq or self.stopped or self.transport is not None
                or self.conn.state != ConnState.CONNECT):
            return
        if payload["addresses"] is None:
            self._connect_failed(f"resolve {self.host}:{self.port} failed: {payload['error']}", KafkaError._RESOLVE)
            return
        self._connect_to(payload["addresses"])

    def _connect_to(self, addresses: list[transports.AddrInfo]) -> None:
        address = addresses[self._addr_index % len(addresses)]
        self._addr_index += 1
        try:
            transport = self.security.transport(address, self.host, self.nagle_disable)
        except transports.TlsError as exc:
            self._connect_failed(str(exc), KafkaError._SSL)
            return
        except OSError as exc:
            self._connect_failed(f"connect to {self.host}:{self.port} failed: {exc}", KafkaError._TRANSPORT)
            return
        try:
            transport.connect()
        except OSError as exc:
            transport.close()
            self._connect_failed(f"connect to {self.host}:{self.port} failed: {exc.strerror or exc}",
                                 KafkaError._TRANSPORT)
            return
        self.transport = transport
        self.conn.tls = transport.needs_handshake
        self._fd = transport.fileno()
        self.want_write = True
        self.ctx.register_fd(self._fd, self._on_readable, self._on_writable)

    def _connect_failed(self, reason: str, code: int) -> None:
        now = time.monotonic()
        reason = self._security_failure(code, reason)
        self._dispatch(self.conn.on_disconnect(now, reason, code))
        self._fail_unsent(code, reason)
        self._schedule_reconnect(now)
        self._report_state()

    def _schedule_reconnect(self, now: float) -> None:
        if self.stopped or self.reconnect_timer is not None:
            return
        delay_ms = self.backoff.next_delay_ms(now)
        self.reconnect_timer = self.ctx.timer(max(delay_ms, 1) / 1000, Op(_CONNECT))

    # ---- socket events ---------------------------------------------------------------------------------

    def _on_writable(self) -> None:
        now = time.monotonic()
        state = self.conn.state
        if state == ConnState.CONNECT:
            err = self.transport.connect_error() if self.transport is not None else errno.EBADF
            if err:
                self._disconnect(f"connect to {self.host}:{self.port} failed: {errno.errorcode.get(err, err)}",
                                 now)
                return
            self.conn.on_connected(now)
            self._report_state()
        if self.conn.state == ConnState.SSL_HANDSHAKE:
            self._drive_transport_handshake(now)
            return
        self.write()

    def _drive_transport_handshake(self, now: float) -> None:
        """A transport with its own handshake (TLS) runs it on socket events until it reports done."""
        transport = self.transport
        try:
            done = transport.handshake()
        except transports.TlsError as exc:
            self._disconnect(str(exc), now, KafkaError._SSL)
            return
        except OSError as exc:
            self._disconnect(f"transport handshake with {self.host}:{self.port} failed: {exc}", now)
            return
        if not done:
            self._watch(transport.wants_write_for_handshake())
            return
        self.conn.on_tls_ready(now)
        self._report_state()
        self.write()

    def _on_readable(self) -> None:
        transport = self.transport
        if transport is None:
            return
        now = time.monotonic()
        if self.conn.state == ConnState.SSL_HANDSHAKE:
            self._drive_transport_handshake(now)
            return
        before = self.conn.state
        try:
            buf = self._recv_buf
            while True:
                received = transport.recv_into(buf)
                if not received:
                    self._disconnect("connection closed by broker", now)
                    return
                self._dispatch(self.conn.feed(buf[:received], now))
                if received < RECV_SIZE or self.transport is None:
                    break
        except (BlockingIOError, InterruptedError):
            pass
        except HandshakeError as exc:  # authentication refused: its own text, _AUTHENTICATION
            self._disconnect(str(exc), now, exc.error_code)
            return
        except transports.TlsError as exc:
            self.conn.counters.rxerrs += 1
            self._disconnect(str(exc), now, KafkaError._SSL)
            return
        except (OSError, ConnectionError) as exc:
            self.conn.counters.rxerrs += 1
            self._disconnect(f"receive failed: {exc}", now, getattr(exc, "error_code", KafkaError._TRANSPORT))
            return
        state = self.conn.state
        if state != before:
            if state == ConnState.UP:
                self._on_up(now)
            else:
                self._report_state()  # a handshake step began
        self.write()

    def _on_up(self, now: float) -> None:
        self.connect_attempts = 0
        self.security.on_up()
        self._schedule_reauth()
        self._report_state()
        self._flush_requests(now)
        self.sink.flush(now)
        if self.source is not None:
            self.source.pump()

    def write(self) -> None:
        """Write what the connection has queued until the socket would block."""
        transport = self.transport
        if transport is None or self.conn.state in _PRE_TRANSPORT:
            return
        conn = self.conn
        now = time.monotonic()
        try:
            while conn.has_output():
                sent = transport.write(conn.output_buffers())
                self._dispatch(conn.on_written(sent, now))
                if self.transport is None:
                    return
        except (BlockingIOError, InterruptedError):
            pass
        except transports.TlsError as exc:
            conn.counters.txerrs += 1
            self._disconnect(str(exc), now, KafkaError._SSL)
            return
        except OSError as exc:
            conn.counters.txerrs += 1
            self._disconnect(f"send failed: {exc}", now)
            return
        self._watch(conn.has_output())

    def _watch(self, want_write: bool) -> None:
        if want_write != self.want_write and self.transport is not None:
            self.want_write = want_write
            self.ctx.register_fd(self._fd, self._on_readable, self._on_writable if want_write else None)

    def _disconnect(self, reason: str, now: float, code: int = KafkaError._TRANSPORT) -> None:
        reason = self._security_failure(code, reason)
        log.info("broker/%s %s:%s down: %s", self.node_id, self.host, self.port, reason)
        self.conn.counters.disconnects += 1
        self._close_transport()
        self._dispatch(self.conn.on_disconnect(now, reason, code))
        self._fail_unsent(code, reason)
        self._schedule_reconnect(now)
        self._report_state()

    # ---- re-authentication (KIP-368) ---------------------------------------------------------------------

    def _schedule_reauth(self) -> None:
        authenticator = self.security.authenticator
        if self.reauth_timer is not None:
            self.ctx.cancel_timer(self.reauth_timer)
            self.reauth_timer = None
        if authenticator is not None and authenticator.session_lifetime_ms > 0:
            delay = max(0.05, authenticator.session_lifetime_ms * REAUTH_AT / 1000)
            self.reauth_timer = self.ctx.timer(delay, Op(_REAUTH))

    @on(_REAUTH)
    def _on_reauth_timer(self, _op: Op) -> None:
        self.reauth_timer = None
        if self.conn.state != ConnState.UP or self.stopped:
            return
        if self.security.mechanism == "OAUTHBEARER":  # the token source's current token, fresh if due
            self.security.token = None
            self.security.request_token(self.ctx, self.socket_timeout_ms / 1000, self._reauthenticate)
            return
        self._reauthenticate("")

    def _reauthenticate(self, error: str) -> None:
        now = time.monotonic()
        if self.conn.state != ConnState.UP or self.transport is None:
            return
        if error:
            self._disconnect(error, now, KafkaError._AUTHENTICATION)
            return
        try:
            started = self.conn.start_reauthentication(now)
        except HandshakeError as exc:
            self._disconnect(str(exc), now, exc.error_code)
            return
        if started:
            self.reauthentications += 1
            self._report_state()
            self.write()

    def _security_failure(self, code: int, reason: str) -> str:
        """A TLS or authentication failure is told to error_cb (once per reason) in librdkafka's form:
        "<protocol>://host:port/node: reason (after N ms in state S)"; the same text fails the requests."""
        if code not in SECURITY_ERRORS:
            return reason
        node = "bootstrap" if self.bootstrap else str(self.node_id)
        elapsed_ms = max(0, (monotonic_us() - self._state_since_us) // 1000)
        text = (f"{self.security.protocol}://{self.host}:{self.port}/{node}: {reason} "
                f"(after {elapsed_ms}ms in state {self.conn.state.name})")
        self.security.report(self.ctx, code, reason, text)
        return text

    def _close_transport(self) -> None:
        if self.reauth_timer is not None:
            self.ctx.cancel_timer(self.reauth_timer)
            self.reauth_timer = None
        if self.transport is not None:
            try:
                self.ctx.unregister_fd(self._fd)
            finally:
                self.transport.close()
                self.transport = None
                self._fd = -1
                self.want_write = False

    def _report_state(self) -> None:
        if self.conn.state.name != self._reported_state:
            self._reported_state = self.conn.state.name
            self._state_since_us = monotonic_us()
        self.ctx.send(self.owner, Op(ops.BROKER_STATE, {
            "node_id": self.node_id, "name": self.ctx.name, "state": self.conn.state.name,
            "reason": self.conn.last_error, "host": self.host, "port": self.port}))
