"""Runs in: the main host, inside each broker/N actor. Owns one broker connection's protocol state, socket-free.

The broker actor feeds this class events (connected, transport handshake done, bytes received, bytes written,
clock ticks, disconnect) and asks it what to write next and which requests completed. Nothing here touches a
socket or a clock, so the whole state machine — framing, correlation ids, the in-flight limit, timeouts, the
pre-UP handshake steps and reconnect backoff — is unit-tested without a broker.

Before UP a connection runs its handshake: CONNECT → (SSL_HANDSHAKE, while the transport negotiates TLS) →
APIVERSION_QUERY → the steps of a pluggable ``Authenticator`` (each a ``HandshakeStep`` exchanging requests on
this connection in its own state, e.g. AUTH_HANDSHAKE then AUTH_REQ for SASL) → UP; the same steps run again
on an UP connection for a re-authentication (KIP-368, ``start_reauthentication``). Versions are negotiated
by ``kqactors.protocol.api.negotiate`` against the ranges of ``kqactors.protocol.requests``' table.
"""

from __future__ import annotations

import random
import struct
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any, Protocol

from kqactors.core.stats import ConnectionCounters
from kqactors.errors import KafkaError
from kqactors.protocol.api import (
    NegotiatedVersions,
    api_name,
    decode_response_header,
    encode_request_header,
    negotiate,
)
from kqactors.protocol.errors import ProtocolError
from kqactors.protocol.requests import API_VERSIONS, CLIENT_RANGES, FETCH, RequestKind

_SIZE = struct.Struct(">i")
MAX_RESPONSE_SIZE = 100000000
"""receive.message.max.bytes' default: a larger response frame fails the connection."""
SCRATCH_SIZE = 256 * 1024
"""The reused receive buffer small frames are read into (one socket read at most)."""
DIRECT_MIN = 64 * 1024
"""A response frame at least this large is read into a buffer of its own (only its first bytes, those that came
with other frames, are copied there)."""
SCRATCH_MIN_FREE = DIRECT_MIN + 4
"""Less free room than this at the scratch buffer's end moves its unread bytes to the front before a read."""
VIEW_APIS = frozenset({FETCH.api_key})
"""APIs whose large answers are handed over as a read-only view of their frame (the fetch source slices record
sets out of it and sends them on as zero-copy frames); every other answer is a bytes copy (they are decoded at
once, and some are kept or shipped whole)."""


class ConnState(IntEnum):
    """Connection states, named after librdkafka's broker states (values kept stable for the first five)."""

    INIT = 0
    CONNECT = 1
    APIVERSION_QUERY = 2
    UP = 3
    DOWN = 4
    SSL_HANDSHAKE = 5   # TCP is up, the transport negotiates TLS (driven by the actor's transport)
    AUTH_HANDSHAKE = 6  # an authentication step's first exchange (SASL: SaslHandshake)
    AUTH_REQ = 7        # an authentication step's exchanges (SASL: SaslAuthenticate rounds)


SETUP_STATES = frozenset({ConnState.CONNECT, ConnState.SSL_HANDSHAKE})
"""States bounded by socket.connection.setup.timeout.ms (later ones are bounded by their requests' timeouts)."""


class HandshakeError(ConnectionError):
    """A handshake step failed for good (e.g. authentication refused): the connection goes down with
    ``error_code`` (default _AUTHENTICATION) instead of _TRANSPORT."""

    def __init__(self, reason: str, error_code: int = KafkaError._AUTHENTICATION) -> None:
        super().__init__(reason)
        self.error_code = error_code


StepRequest = tuple[int, int, list[Any]]
"""(api key, version, body buffers) a handshake step wants sent."""


class HandshakeStep(Protocol):
    """One pre-UP step after ApiVersions, run on the connection in ``state``. ``start`` returns the first request
    (or None: nothing to do, the step is skipped); each response goes to ``on_response``, which returns the next
    request or None when the step is done. Raise HandshakeError (or ConnectionError) to fail the connection."""

    name: str
    state: ConnState

    def start(self, versions: NegotiatedVersions) -> StepRequest | None: ...

    def on_response(self, versions: NegotiatedVersions, api_key: int, version: int,
                    body: bytes) -> StepRequest | None: ...


class Authenticator(Protocol):
    """Supplies the handshake steps of one connection attempt (fresh objects each time: steps keep state)."""

    def steps(self) -> list[HandshakeStep]: ...


@dataclass(eq=False)
class Request:
    """One request to send: an encoded body plus what the connection needs to frame and track it.

    `body` is a list of buffers written back to back, so pre-encoded record batches are spliced in without a
    copy. `context` is opaque here and comes back unchanged in the Completion.
    """

    api_key: int
    api_version: int
    body: list[Any]
    flexible: bool = False
    expect_response: bool = True
    timeout_ms: int = 60000
    context: Any = None
    corr_id: int = -1
    enqueued_at: float = 0.0
    deadline: float = 0.0
    sent_at: float = -1.0
    handshake: bool = False

    @property
    def body_size(self) -> int:
        return sum(len(part) for part in self.body)


@dataclass
class Completion:
    """Exactly one per request: error_code 0 with the response body, or a broker/local error."""

    request: Request
    error_code: int
    #: bytes, or for a large Fetch answer a read-only memoryview of the frame's own buffer (VIEW_APIS)
    response: bytes | memoryview | None = None
    reason: str = ""


class ReconnectBackoff:
    """Exponential reconnect backoff with -25%..+50% jitter, reset after a quiet period (librdkafka's rule:
    if the last attempt was longer than reconnect.backoff.max.ms ago, start again from reconnect.backoff.ms)."""

    def __init__(self, initial_ms: int = 100, max_ms: int = 10000,
                 rng: Callable[[float, float], float] | None = None) -> None:
        if initial_ms < 0 or max_ms < 0:
            raise ValueError("reconnect backoff must be >= 0")
        self.initial_ms = initial_ms
        self.max_ms = max(max_ms, initial_ms)
        self.current_ms = initial_ms
        self._rng = rng or random.uniform
        self._last_attempt: float | None = None

    def next_delay_ms(self, now: float) -> float:
        """Delay before the next connection attempt, given that one is starting to be planned at `now`."""
        if self._last_attempt is not None and (now - self._last_attempt) * 1000 > self.max_ms:
            self.current_ms = self.initial_ms
        self._last_attempt = now
        delay = self._rng(self.current_ms * 0.75, self.current_ms * 1.5)
        delay = min(delay, self.max_ms)
        self.current_ms = min(max(self.current_ms * 2, 1), self.max_ms) if self.initial_ms else 0
        return delay


@dataclass
class _OutFrame:
    buffers: deque = field(default_factory=deque)
    request: Request | None = None


class Connection:
    """Protocol state of one broker connection. Times are seconds (float) supplied by the caller."""

    def __init__(self, client_id: str | None = "kqactors", max_in_flight: int = 1000000,
                 api_version_timeout_ms: int = 10000, connect_timeout_ms: int = 30000,
                 api_versions_max: int = API_VERSIONS.max_version,
                 client_versions: dict[int, tuple[int, int]] | None = None,
                 authenticator: Authenticator | None = None, tls: bool = False,
                 max_response_size: int = MAX_RESPONSE_SIZE) -> None:
        if max_in_flight < 1:
            raise ValueError("max_in_flight must be >= 1")
        self.client_id = client_id
        #: receive.message.max.bytes: the largest response frame accepted
        self.max_response_size = max_response_size
        #: debug hook (librdkafka's "protocol" context): ``on_trace(sent, request, nbytes, rtt_s)`` for every
        #: request written to the output (sent=True, rtt 0) and every response matched to one (sent=False)
        self.on_trace: Callable[[bool, Request, int, float], Any] | None = None
        self.max_in_flight = max_in_flight
        self.api_version_timeout_ms = api_version_timeout_ms
        self.connect_timeout_ms = connect_timeout_ms
        self.api_versions_max = api_versions_max
        self.client_versions = CLIENT_RANGES if client_versions is None else client_versions
        self.authenticator = authenticator
        self.tls = tls
        self.state = ConnState.INIT
        #: what ApiVersions negotiated (the broker's ranges are in ``versions.broker``)
        self.versions = NegotiatedVersions({}, {})
        self._steps: deque[HandshakeStep] = deque()
        self.waiting: deque[Request] = deque()
        self.in_flight: dict[int, Request] = {}
        self.unknown_responses = 0
        self._next_corr_id = 1
        self._out: deque[_OutFrame] = deque()
        # receive side (see receive_buffer): a reused scratch buffer for small frames, and a buffer of its own
        # for a large frame, which the socket reads into directly
        self._scratch = bytearray(SCRATCH_SIZE)
        self._scratch_view = memoryview(self._scratch)
        self._rx_start = 0  # first unread byte in the scratch buffer
        self._rx_end = 0    # end of the bytes received into it
        self._big: bytearray | None = None  # a large frame (without its size) being received
        self._big_view: memoryview | None = None
        self._big_filled = 0
        self._connect_deadline = 0.0
        self.last_error = ""
        #: statistics (statistics.interval.ms): requests and bytes each way, round trips, timeouts
        self.counters = ConnectionCounters()

    # ---- events from the actor -------------------------------------------------------------------------

    def start_connect(self, now: float) -> None:
        """The actor has started a non-blocking connect."""
        if self.state not in (ConnState.INIT, ConnState.DOWN):
            raise RuntimeError(f"start_connect in state {self.state.name}")
        self.state = ConnState.CONNECT
        self._connect_deadline = now + self.connect_timeout_ms / 1000

    def on_connected(self, now: float) -> None:
        """TCP is up: with TLS the transport handshakes first (SSL_HANDSHAKE until on_tls_ready), else
        ApiVersions is queried before anything else goes out."""
        if self.state != ConnState.CONNECT:
            raise RuntimeError(f"on_connected in state {self.state.name}")
        if self.tls:
            self.state = ConnState.SSL_HANDSHAKE
            return
        self._query_api_versions(now)

    def on_tls_ready(self, now: float) -> None:
        """The transport finished its TLS handshake."""
        if self.state != ConnState.SSL_HANDSHAKE:
            raise RuntimeError(f"on_tls_ready in state {self.state.name}")
        self._query_api_versions(now)

    def enqueue(self, request: Request, now: float) -> None:
        """Queue a request; it goes out when the connection is UP and the in-flight window has room."""
        request.enqueued_at = now
        request.deadline = now + request.timeout_ms / 1000
        self.waiting.append(request)
        self._pump(now)

    def on_disconnect(self, now: float, reason: str, error_code: int = KafkaError._TRANSPORT) -> list[Completion]:
        """Socket closed or failed: every queued and in-flight request fails (retriable), state goes DOWN.
        The internal ApiVersions handshake is not reported: it has no requester.

        Queued requests fail too, so a toppar never sees a later batch sent before an earlier one it retries."""
        self.last_error = reason
        self.state = ConnState.DOWN
        failed = [Completion(req, error_code, None, reason) for req in self.in_flight.values()
                  if not req.handshake]
        failed += [Completion(req, error_code, None, reason) for req in self.waiting]
        self.in_flight.clear()
        self.waiting.clear()
        self._out.clear()
        self._rx_start = self._rx_end = 0
        self._big = self._big_view = None
        self._steps.clear()
        return failed

    # ---- output ----------------------------------------------------------------------------------------

    def output_buffers(self, limit: int = 64) -> list[Any]:
        """Up to `limit` buffers to hand to sendmsg, in order."""
        out: list[Any] = []
        for frame in self._out:
            for buf in frame.buffers:
                out.append(buf)
                if len(out) >= limit:
                    return out
        return out

    def has_output(self) -> bool:
        return bool(self._out)

    @property
    def untransmitted(self) -> int:
        """Requests not yet written to the socket in full: queued ones and those in the output (librdkafka's
        outbuf count, which queue.buffering.backpressure.threshold compares with)."""
        return len(self.waiting) + len(self._out)

    def on_written(self, count: int, now: float) -> list[Completion]:
        """`count` bytes were written; requests that expect no response (acks=0) complete when fully sent."""
        done: list[Completion] = []
        while count > 0 and self._out:
            frame = self._out[0]
            head = frame.buffers[0]
            size = len(head)
            if count >= size:
                count -= size
                frame.buffers.popleft()
            else:
                frame.buffers[0] = memoryview(head)[count:]
                count = 0
            if not frame.buffers:
                self._out.popleft()
                req = frame.request
                if req is not None and not req.expect_response:
                    self.in_flight.pop(req.corr_id, None)
                    done.append(Completion(req, KafkaError.NO_ERROR, None))
        if done:
            self._pump(now)
        return done

    # ---- input -----------------------------------------------------------------------------------------

    def receive_buffer(self) -> memoryview:
        """Where the next socket read goes (``recv_into``), then ``received(n)``. While a large frame (at least
        ``DIRECT_MIN`` bytes) is incomplete this is the rest of that frame's own buffer, so its bytes are read
        from the socket straight into the place a Fetch answer's records are sliced from (no copy on this
        side); otherwise the free end of the reused scratch buffer."""
        if self._big_view is not None:
            return self._big_view[self._big_filled:]
        start, end = self._rx_start, self._rx_end
        if end == SCRATCH_SIZE or (start and SCRATCH_SIZE - end < SCRATCH_MIN_FREE):
            # a partial small frame (< DIRECT_MIN + 4 bytes) moves to the front
            self._scratch[:end - start] = self._scratch_view[start:end]
            self._rx_start, self._rx_end = 0, end - start
        return self._scratch_view[self._rx_end:]

    def received(self, count: int, now: float) -> list[Completion]:
        """``count`` bytes were read into ``receive_buffer()``; returns the requests they complete. A framing
        error raises ConnectionError (the actor then disconnects, which fails everything outstanding); the
        requests that frames before the bad one completed ride on it as ``completions``, so their answers are
        not lost with it."""
        done: list[Completion] = []
        if self._big is not None:
            self._big_filled += count
            if self._big_filled < len(self._big):
                return done
            frame, view = self._big, self._big_view
            self._big = self._big_view = None
            try:
                completion = self._on_frame(view, now, owned=frame)
            except ConnectionError as error:
                error.completions = done  # type: ignore[attr-defined]
                raise
            if completion is not None:
                done.append(completion)
            self._pump(now)
            return done
        self._rx_end += count
        scratch, view = self._scratch, self._scratch_view
        pos, end = self._rx_start, self._rx_end
        try:
            while end - pos >= 4:
                (size,) = _SIZE.unpack_from(scratch, pos)
                if size < 4 or size > self.max_response_size:
                    raise ConnectionError(f"Invalid response size {size} (0..{self.max_response_size}): "
                                          "increase receive.message.max.bytes")
                if end - pos - 4 < size:
                    if size >= DIRECT_MIN:  # the rest is read straight into the frame's own buffer
                        have = end - pos - 4
                        big = bytearray(size)
                        big[:have] = view[pos + 4:end]
                        self._big, self._big_view, self._big_filled = big, memoryview(big), have
                        pos = end
                    break
                completion = self._on_frame(view[pos + 4:pos + 4 + size], now)
                pos += 4 + size
                if completion is not None:
                    done.append(completion)
        except ConnectionError as error:
            error.completions = done  # type: ignore[attr-defined]
            raise
        finally:
            if pos == end:
                pos = end = 0
            self._rx_start, self._rx_end = pos, end
        self._pump(now)
        return done

    def feed(self, data: bytes | memoryview, now: float) -> list[Completion]:
        """Bytes from the socket, already read (tests, and transports that cannot read into a buffer): the same
        as reading them through ``receive_buffer``/``received``."""
        done: list[Completion] = []
        with memoryview(data) as source:
            pos, total = 0, source.nbytes
            while pos < total:
                target = self.receive_buffer()
                count = min(len(target), total - pos)
                target[:count] = source[pos:pos + count]
                pos += count
                try:
                    done += self.received(count, now)
                except ConnectionError as error:
                    error.completions = done + getattr(error, "completions", [])  # type: ignore[attr-defined]
                    raise
        return done

    def _on_frame(self, frame: memoryview, now: float, owned: bytearray | None = None) -> Completion | None:
        """One response frame (after its size). ``owned``: the frame is a buffer of its own that nothing else
        will write to, so a Fetch answer's body is handed over as a read-only view of it instead of a copy."""
        (corr_id,) = _SIZE.unpack_from(frame, 0)
        req = self.in_flight.pop(corr_id, None)
        if req is None:
            self.unknown_responses += 1
            self.counters.rxcorriderrs += 1
            return None
        self.counters.received(len(frame) + 4, int((now - req.sent_at) * 1e6), int(now * 1e6))
        if self.on_trace is not None:
            self.on_trace(False, req, len(frame) + 4, now - req.sent_at)
        try:
            _, offset = decode_response_header(frame, req.api_key, req.api_version)
        except ProtocolError as exc:
            # back in flight, so the disconnect this causes fails it (_TRANSPORT) like every other in-flight
            # request, instead of leaving its owner waiting for a completion that never comes
            self.in_flight[corr_id] = req
            raise ConnectionError(f"bad response header for corr id {corr_id}: {exc}") from exc
        body: bytes | memoryview
        if owned is not None and req.api_key in VIEW_APIS:
            body = frame.toreadonly()[offset:]
        else:
            body = bytes(frame[offset:])
        if req.handshake:
            self._on_handshake_response(req, body, now)
            return None
        return Completion(req, KafkaError.NO_ERROR, body)

    # ---- timeouts --------------------------------------------------------------------------------------

    def next_deadline(self) -> float | None:
        """Earliest time at which check_timeouts has something to do."""
        deadlines = [req.deadline for req in self.in_flight.values()]
        deadlines += [req.deadline for req in self.waiting]
        if self.state in SETUP_STATES:
            deadlines.append(self._connect_deadline)
        return min(deadlines) if deadlines else None

    def check_timeouts(self, now: float) -> tuple[list[Completion], bool]:
        """Returns (timed-out completions, must_disconnect). A request that timed out while in flight means
        the connection is unusable (responses come in order), so the actor must close it; the caller then
        calls on_disconnect, which fails the rest with _TRANSPORT."""
        done: list[Completion] = []
        must_disconnect = False
        if self.state in SETUP_STATES and now >= self._connect_deadline:
            self.last_error = ("connection setup timed out in state SSL_HANDSHAKE (no TLS answer: is this a TLS "
                               "listener?)" if self.state == ConnState.SSL_HANDSHAKE
                               else "connection setup timed out")
            must_disconnect = True
        for corr_id, req in list(self.in_flight.items()):
            if now >= req.deadline:
                del self.in_flight[corr_id]
                self.counters.req_timeouts += 1
                if req.handshake:
                    self.last_error = f"{req.context} request timed out after {req.timeout_ms} ms"
                else:
                    self.last_error = f"request timed out after {req.timeout_ms} ms in flight"
                    done.append(Completion(req, KafkaError._TIMED_OUT, None, self.last_error))
                must_disconnect = True
        if any(now >= req.deadline for req in self.waiting):
            keep: deque[Request] = deque()
            for req in self.waiting:
                if now >= req.deadline:
                    self.counters.req_timeouts += 1
                    done.append(Completion(req, KafkaError._TIMED_OUT, None,
                                           f"request timed out after {req.timeout_ms} ms in queue"))
                else:
                    keep.append(req)
            self.waiting = keep
        return done, must_disconnect

    # ---- versions --------------------------------------------------------------------------------------

    def pick_version(self, api_key: int, client_min: int, client_max: int) -> int | None:
        """Highest version in client_min..client_max the broker offers, or None (protocol.api's rule)."""
        return self.versions.pick(api_key, client_min, client_max)

    def version_for(self, kind: RequestKind) -> int | None:
        """The version to send ``kind`` at on this connection, or None when the broker offers none in range."""
        return self.versions.pick(kind.api_key, kind.min_version, kind.max_version)

    # ---- handshake -------------------------------------------------------------------------------------

    def _query_api_versions(self, now: float) -> None:
        self.state = ConnState.APIVERSION_QUERY
        self._send_api_versions(self.api_versions_max, now)

    def _send_api_versions(self, version: int, now: float) -> None:
        self._send_handshake(API_VERSIONS.api_key, version, API_VERSIONS.encode(version, {}, []), "ApiVersions",
                             self.api_version_timeout_ms, now)

    def _send_handshake(self, api_key: int, version: int, body: list[Any], name: str, timeout_ms: int,
                        now: float) -> None:
        req = Request(api_key, version, body, timeout_ms=timeout_ms, context=name, handshake=True)
        req.enqueued_at = now
        req.deadline = now + req.timeout_ms / 1000
        self._transmit(req, now)

    def _on_handshake_response(self, req: Request, body: bytes, now: float) -> None:
        if self.state == ConnState.APIVERSION_QUERY:
            self._on_api_versions(req, body, now)
            return
        step = self._steps[0]
        following = step.on_response(self.versions, req.api_key, req.api_version, body)
        if following is not None:
            self._send_step_request(step, following, now)
        else:
            self._steps.popleft()
            self._next_step(now)

    def _on_api_versions(self, req: Request, body: bytes, now: float) -> None:
        try:
            answer = API_VERSIONS.decode(req.api_version, body)
        except ProtocolError as exc:
            raise ConnectionError(f"malformed ApiVersions response: {exc}") from exc
        if answer.retry_version is not None:
            self._send_api_versions(answer.retry_version, now)
            return
        if answer.response is None:
            raise ConnectionError(f"ApiVersions failed with broker error {answer.error_code}")
        if not answer.response.api_keys:
            raise ConnectionError("ApiVersions response lists no APIs")
        self.versions = negotiate(answer.response, self.client_versions)
        self._steps = deque(self.authenticator.steps() if self.authenticator is not None else ())
        self._next_step(now)

    def _next_step(self, now: float) -> None:
        """Start the next handshake step that has something to send; UP when none is left."""
        while self._steps:
            step = self._steps[0]
            first = step.start(self.versions)
            if first is not None:
                self._send_step_request(step, first, now)
                return
            self._steps.popleft()
        self.state = ConnState.UP

    def _send_step_request(self, step: HandshakeStep, request: StepRequest, now: float) -> None:
        self.state = step.state
        api_key, version, body = request
        self._send_handshake(api_key, version, body, step.name, self.api_version_timeout_ms, now)

    def start_reauthentication(self, now: float) -> bool:
        """KIP-368: run the authenticator's steps again on an UP connection before the broker's session
        lifetime ends. New requests wait meanwhile (in-flight ones still complete); the connection is UP again
        when the steps are done. Returns False when there is nothing to do; a step's HandshakeError propagates
        (the caller disconnects)."""
        if self.state != ConnState.UP or self.authenticator is None:
            return False
        self._steps = deque(self.authenticator.steps())
        self._next_step(now)
        return self.state != ConnState.UP

    # ---- internals -------------------------------------------------------------------------------------

    def _pump(self, now: float) -> None:
        if self.state != ConnState.UP:
            return
        while self.waiting and len(self.in_flight) < self.max_in_flight:
            self._transmit(self.waiting.popleft(), now)

    def _transmit(self, req: Request, now: float) -> None:
        req.corr_id = self._next_corr_id
        self._next_corr_id = self._next_corr_id + 1 if self._next_corr_id < 0x7FFFFFFF else 1
        header = encode_request_header(req.api_key, req.api_version, req.corr_id, self.client_id)
        size = len(header) + req.body_size
        frame = _OutFrame(deque([_SIZE.pack(size) + header]), req)
        frame.buffers.extend(part for part in req.body if len(part))
        req.sent_at = now
        self.in_flight[req.corr_id] = req
        self._out.append(frame)
        self.counters.sent(api_name(req.api_key), size + 4, int(now * 1e6))
        if self.on_trace is not None:
            self.on_trace(True, req, size + 4, 0.0)


def frame_sizes(chunks: Iterable[bytes]) -> list[int]:
    """Sizes of the size-prefixed frames in a byte stream (test and debugging helper)."""
    data = b"".join(chunks)
    sizes, pos = [], 0
    while pos + 4 <= len(data):
        (size,) = _SIZE.unpack_from(data, pos)
        sizes.append(size)
        pos += 4 + size
    return sizes
