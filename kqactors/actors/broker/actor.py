"""Runs in: the main host. Owns the broker/N actor: its lifecycle, the connection attempt (name resolution off
the loop, a ``Transport`` per attempt, reconnect with backoff), driving the socket-free ``core.connection``
state machine with socket events and clock ticks, generic REQUEST ops of the request table's kinds, and the
dispatch of every completion to the part that sent the request. Exactly one result per request.

The actor is composed of parts, each owning its side of the connection: ``sink.ProduceSink`` (XMIT → Produce,
always present) and ``source.FetchSource`` (the consumer's fetch loop, present only when spawned with
``consumer=True`` or ``fetch=<FetchSettings dict>``). Parts contribute op handlers and send requests tagged with
their completion callback; the socket layer is ``transport.py``. The fetch part (with the consumer's fetch
planner and record decoding) is imported only by a broker actor that fetches, and ``security.py`` loads TLS and
SASL only when configured: a plaintext producer's main host loads neither (tests/unit/test_lazy_imports.py).

Ops in:  REQUEST (any actor, as a runtime request), BROKER_UPDATE, PARTITION_JOIN/LEAVE, STATS (main), plus the
         parts' ops (XMIT; B_FETCH_START/STOP, FETCH_FLOW).
Ops out: the REQUEST's reply (RESPONSE), BROKER_STATE (to the owner), plus the parts' ops (XMIT_RESULT;
         FETCHED, FETCH_ERROR, FETCH_POSITION, METADATA_REFRESH).
"""

from __future__ import annotations

import errno
import os
import socket
import time
from typing import TYPE_CHECKING, Any

from kqactors.actors.broker import transport as transports
from kqactors.actors.broker.security import SECURITY_ERRORS, BrokerSecurity
from kqactors.actors.broker.sink import ProduceSink
from kqactors.actors.broker.throttle import CLIENT_REPORTER, throttle_time_ms
from kqactors.core.connection import (
    MAX_RESPONSE_SIZE,
    Completion,
    Connection,
    ConnState,
    HandshakeError,
    ReconnectBackoff,
    Request,
)
from kqactors.core.log import LOG_DEBUG, LOG_ERR, ClientLog
from kqactors.core.stats import broker_stats, monotonic_us
from kqactors.errors import KafkaError
from kqactors.ops import client as ops
from kqactors.protocol.api import api_name
from kqactors.protocol.requests import REQUEST_KINDS, RequestKind
from kqactors.runtime.actor import Actor, ActorContext, on
from kqactors.runtime.op import Op
from kqactors.runtime.threadsafe import ThreadInbox

if TYPE_CHECKING:
    from kqactors.actors.broker.source import FetchSource

TICK_SECONDS = 0.05
_CONNECT = "BROKER_CONNECT"
_TICK = "BROKER_TICK"
_RESOLVED = "BROKER_RESOLVED"
_REAUTH = "BROKER_REAUTH"
REAUTH_AT = 0.9  # KIP-368: re-authenticate at 90% of the session lifetime the broker granted
_PRE_TRANSPORT = (ConnState.CONNECT, ConnState.SSL_HANDSHAKE)
_IDLE = (ConnState.INIT, ConnState.DOWN)  # no connection: one is made when work arrives (or a reconnect is due)
_SUPPRESS_S = 30.0  # an identical connection failure within this long is logged at debug level only


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
        self.socket_options = {"keepalive": bool(_conf(config, "socket.keepalive.enable", False)),
                               "sndbuf": int(_conf(config, "socket.send.buffer.bytes", 0)),
                               "rcvbuf": int(_conf(config, "socket.receive.buffer.bytes", 0))}
        self.family = transports.FAMILIES.get(str(_conf(config, "broker.address.family", "any")).lower(), 0)
        self.idle_ms = int(_conf(config, "connections.max.idle.ms", 0))
        self.log_connection_close = bool(_conf(config, "log.connection.close", True))
        self.max_in_flight = int(_conf(config, "max.in.flight.requests.per.connection", 1000000))
        self.security = BrokerSecurity(config)
        self._handlers.update(self.security.handlers())  # SASL_CREDENTIALS (set_sasl_credentials)
        self.conn = Connection(
            client_id=_conf(config, "client.id", "rdkafka"),
            max_in_flight=self.max_in_flight,
            api_version_timeout_ms=int(_conf(config, "api.version.request.timeout.ms", 10000)),
            connect_timeout_ms=int(_conf(config, "socket.connection.setup.timeout.ms", 30000)),
            authenticator=self.security.authenticator, tls=self.security.tls,
            max_response_size=int(_conf(config, "receive.message.max.bytes", MAX_RESPONSE_SIZE)),
        )
        # round trips are sampled for the statistics only: without them the window would just fill and stay full
        self.conn.counters.rtt.enabled = int(_conf(config, "statistics.interval.ms", 0)) > 0
        self.backoff = ReconnectBackoff(int(_conf(config, "reconnect.backoff.ms", 100)),
                                        int(_conf(config, "reconnect.backoff.max.ms", 10000)))
        self.transport: transports.Transport | None = None
        self._fd = -1
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
        #: librdkafka's broker name ("127.0.0.1:9092/1", "127.0.0.1:9092/bootstrap"): log records start with it
        self.log_name = self._broker_log_name()
        self.clog = ClientLog.from_config(config, self._emit_log, thread=self.log_name)
        if self.clog.debugging("protocol"):
            self.conn.on_trace = self._trace
        self.throttle = CLIENT_REPORTER
        self.throttle_wanted = bool(config.get("kqactors.throttle_cb"))
        self._decode_throttle = self.throttle_wanted or self.clog.debugging("broker", "msg")
        self._last_failure: tuple[str, float] = ("", 0.0)
        self._address = ""
        # the parts
        self.sink = ProduceSink(self, int(_conf(config, "queue.buffering.backpressure.threshold", 1)))
        self.sink.transactional_id = _conf(config, "transactional.id", None) or None
        self._handlers.update(self.sink.handlers())
        self.source: FetchSource | None = None
        if consumer or fetch is not None:  # a consumer's broker: its fetch part is loaded now, not by producers
            from kqactors.actors.broker.source import FetchSource
            from kqactors.core.consumer.settings import FetchSettings

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
        if self.conn.state in _IDLE and not self.stopped:
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
        if self.idle_ms and self.conn.state == ConnState.UP:
            self._check_idle(now)

    @on(ops.BROKER_UPDATE)
    def _on_update(self, op: Op) -> None:
        payload = op.payload or {}
        host, port = payload.get("host", self.host), int(payload.get("port", self.port))
        if (host, port) != (self.host, self.port):
            self.host, self.port = host, port
            self.log_name = self._broker_log_name()
            self.clog.rename(self.log_name)
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
        else:
            self.ensure_connecting()

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
            if completion.response is not None and not completion.error_code:
                self._observe_throttle(completion)
            complete, subject, kind, version = completion.request.context
            complete(subject, kind, version, completion)
        self.sink.resume()
        source = self.source
        if source is not None and source.completed:
            source.after_completions()  # the next Fetch, now or once this turn's records have left

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
        if self.conn.state in _IDLE and self.reconnect_timer is None and not self.stopped:
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
        addresses = transports.numeric_address(self.host, self.port, self.family)
        if addresses is not None:
            if not addresses:
                self._connect_failed(f"Failed to resolve '{self.host}:{self.port}': address family not allowed "
                                     "by broker.address.family", KafkaError._RESOLVE)
                return
            self._connect_to(addresses)
            return
        # A host name: getaddrinfo may block for seconds, so it runs on a thread and the answer comes back
        # as a BROKER_RESOLVED op (numbered: a late answer for an abandoned attempt is ignored).
        self._resolve_seq += 1
        seq = self._resolve_seq
        if self._inbox is None:
            self._inbox = ThreadInbox(self.ctx)
        post = self._inbox.post
        family = self.family
        transports.resolve_in_thread(
            self.host, self.port,
            lambda found, error: post(Op(_RESOLVED, {"seq": seq, "addresses": found, "error": error})),
            (lambda host, port: transports.getaddrinfo(host, port, family)) if family else None)

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
        self._address = _describe_address(address)
        try:
            transport = self.security.transport(address, self.host, self.nagle_disable, **self.socket_options)
        except transports.TlsError as exc:
            self._connect_failed(str(exc), KafkaError._SSL)
            return
        except OSError as exc:
            self._connect_failed(f"Connect to {self._address} failed: {exc.strerror or exc}", KafkaError._TRANSPORT)
            return
        try:
            transport.connect()
        except OSError as exc:
            transport.close()
            self._connect_failed(f"Connect to {self._address} failed: {exc.strerror or exc}", KafkaError._TRANSPORT)
            return
        self.transport = transport
        self.conn.tls = transport.needs_handshake
        self._fd = transport.fileno()
        self.clog.debug("broker", "CONNECT", f"{self.log_name}: Connecting to {self._address} with socket {self._fd}")
        self.want_write = True
        self.ctx.register_fd(self._fd, self._on_readable, self._on_writable)

    def _connect_failed(self, reason: str, code: int) -> None:
        now = time.monotonic()
        self._log_failure(reason, now)  # before the security form: FAIL adds its own "(after N ms in state S)"
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
                self._disconnect(f"Connect to {self._address} failed: {_strerror(err)}", now)
                return
            self.clog.debug("broker", "CONNECT", f"{self.log_name}: Connected to {self._address}")
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
        if self.conn.state == ConnState.CONNECT:  # a refused connect can be reported readable first
            self._on_writable()
            return
        before = self.conn.state
        try:
            conn = self.conn
            while True:  # read into the connection's own buffers (a large answer straight into its frame)
                buf = conn.receive_buffer()
                received = transport.recv_into(buf)
                if not received:
                    self._disconnect("Disconnected", now, closed_by_broker=True)
                    return
                self._dispatch(conn.received(received, now))
                if received < len(buf) or self.transport is None:
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
            self._dispatch(getattr(exc, "completions", []))  # answered before the bad frame (core/connection)
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
        if self.clog.debugging("feature", "protocol"):
            versions = ", ".join(f"{api_name(key)} v{version}" for key, version in sorted(self.conn.versions.items()))
            self.clog.debug("feature", "APIVERSION", f"{self.log_name}: Negotiated API versions: {versions}")
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
        if self.sink.held:
            self.sink.on_output_progress()

    def _watch(self, want_write: bool) -> None:
        if want_write != self.want_write and self.transport is not None:
            self.want_write = want_write
            self.ctx.register_fd(self._fd, self._on_readable, self._on_writable if want_write else None)

    def _disconnect(self, reason: str, now: float, code: int = KafkaError._TRANSPORT,
                    closed_by_broker: bool = False) -> None:
        self._log_failure(reason, now, closed_by_broker)
        reason = self._security_failure(code, reason)
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
            self.clog.debug("broker", "STATE", f"{self.log_name}: Broker changed state "
                                               f"{self._reported_state or 'INIT'} -> {self.conn.state.name}")
            self._reported_state = self.conn.state.name
            self._state_since_us = monotonic_us()
        self.ctx.send(self.owner, Op(ops.BROKER_STATE, {
            "node_id": self.node_id, "name": self.ctx.name, "state": self.conn.state.name,
            "reason": self.conn.last_error, "host": self.host, "port": self.port}))

    # ---- logs, throttling, idle connections ------------------------------------------------------------

    def _broker_log_name(self) -> str:
        if self.owner != "main" and self.ctx.name.startswith("cgrp-coord/"):
            return f"GroupCoordinator/{self.node_id}"  # librdkafka's logical coordinator broker
        return f"{self.host}:{self.port}/{'bootstrap' if self.bootstrap else self.node_id}"

    def _emit_log(self, payload: dict[str, Any]) -> None:
        self.ctx.send("app", Op(ops.LOG, payload))

    def _trace(self, sent: bool, request: Request, nbytes: int, rtt_s: float) -> None:
        """debug=protocol: every request sent and every response received on this connection."""
        name = api_name(request.api_key)
        if sent:
            text = (f"{self.log_name}: Sent {name}Request (v{request.api_version}, {nbytes} bytes @ 0, "
                    f"CorrId {request.corr_id})")
            self.clog.debug("protocol", "SEND", text)
        else:
            text = (f"{self.log_name}: Received {name}Response (v{request.api_version}, {nbytes} bytes, "
                    f"CorrId {request.corr_id}, rtt {rtt_s * 1000:.2f}ms)")
            self.clog.debug("protocol", "RECV", text)

    def _log_failure(self, reason: str, now: float, closed_by_broker: bool = False) -> None:
        """librdkafka's FAIL record: an error, unless log.connection.close is off (or the broker closed a
        connection idle for a minute: its idle reaper) for a broker's close, or the same failure was logged
        less than 30 s ago; then only with debug=broker."""
        level = LOG_ERR
        if closed_by_broker:
            idle_us = monotonic_us() - max(self.conn.counters.last_tx_us, self.conn.counters.last_rx_us)
            quiet = not self.conn.in_flight and not self.conn.waiting
            if not self.log_connection_close or (quiet and idle_us >= max(60000, self.socket_timeout_ms) * 1000):
                level = LOG_DEBUG
        last_reason, last_at = self._last_failure
        if reason == last_reason and now - last_at < _SUPPRESS_S:
            level = LOG_DEBUG
        elif level == LOG_ERR:
            self._last_failure = (reason, now)
        state = self._reported_state or self.conn.state.name
        after_ms = max(0, (monotonic_us() - self._state_since_us) // 1000)
        text = f"{self.log_name}: {reason} (after {after_ms}ms in state {state})"
        if level == LOG_DEBUG:
            self.clog.debug("broker", "FAIL", text)
        else:
            self.clog.log(level, "FAIL", text)

    def _observe_throttle(self, completion: Completion) -> None:
        request = completion.request
        throttle_ms = throttle_time_ms(request.api_key, request.api_version, completion.response,
                                       self._decode_throttle)
        report = self.throttle.observe(throttle_ms)
        if report is None:
            return
        self.clog.debug("broker", "THROTTLE", f"{self.log_name}: {api_name(request.api_key)} throttled by broker "
                                              f"for {report}ms")
        if self.throttle_wanted:
            self.ctx.send("app", Op(ops.THROTTLE, ops.throttle_payload(
                f"{self.host}:{self.port}", -1 if self.bootstrap else self.node_id, report)))

    def _check_idle(self, now: float) -> None:
        """connections.max.idle.ms: a connection with nothing to do for that long is closed; the next piece of
        work opens a new one (the broker is INIT meanwhile, as a connection not made yet)."""
        conn = self.conn
        if conn.in_flight or conn.waiting or conn.has_output() or self.sink.unsent or self.unsent_requests:
            return
        counters = conn.counters
        last_us = max(counters.last_tx_us, counters.last_rx_us, self._state_since_us)
        idle_ms = (monotonic_us() - last_us) // 1000
        if idle_ms < self.idle_ms:
            return
        self.clog.debug("broker", "FAIL", f"{self.log_name}: Connection max idle time exceeded ({idle_ms}ms "
                                          "since last activity)")
        counters.disconnects += 1
        self._close_transport()
        self._dispatch(conn.on_disconnect(now, "connection max idle time exceeded", KafkaError._TRANSPORT))
        conn.state = ConnState.INIT
        self._report_state()


def _describe_address(address: transports.AddrInfo) -> str:
    """librdkafka's form of a socket address: ``ipv4#127.0.0.1:9092``, ``ipv6#[::1]:9092``."""
    family, _kind, _proto, sockaddr = address
    if family == socket.AF_INET6:
        return f"ipv6#[{sockaddr[0]}]:{sockaddr[1]}"
    if family == socket.AF_INET:
        return f"ipv4#{sockaddr[0]}:{sockaddr[1]}"
    return str(sockaddr)


def _strerror(err: int) -> str:
    try:
        return os.strerror(err)
    except (ValueError, OverflowError):
        return errno.errorcode.get(err, str(err))
