"""Runs in: the main host, inside each broker/N actor. Owns one broker connection's protocol state, socket-free.

The broker actor feeds this class events (connected, bytes received, bytes written, clock ticks, disconnect)
and asks it what to write next and which requests completed. Nothing here touches a socket or a clock, so the
whole state machine — framing, correlation ids, the in-flight limit, timeouts, the ApiVersions handshake and
reconnect backoff — is unit-tested without a broker.
"""

from __future__ import annotations

import random
import struct
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

from kqactors.core.stats import ConnectionCounters
from kqactors.errors import KafkaError
from kqactors.protocol.api import API_VERSIONS_KEY, api_name, decode_response_header, encode_request_header
from kqactors.protocol.errors import ProtocolError
from kqactors.protocol.handshake import api_versions_request, read_api_versions

_SIZE = struct.Struct(">i")
MAX_RESPONSE_SIZE = 1 << 30


class ConnState(IntEnum):
    """Connection states, named after librdkafka's broker states."""

    INIT = 0
    CONNECT = 1
    APIVERSION_QUERY = 2
    UP = 3
    DOWN = 4


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
    response: bytes | None = None
    reason: str = ""


@dataclass
class ApiVersionRange:
    min_version: int
    max_version: int


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
                 api_versions_max: int = 3) -> None:
        if max_in_flight < 1:
            raise ValueError("max_in_flight must be >= 1")
        self.client_id = client_id
        self.max_in_flight = max_in_flight
        self.api_version_timeout_ms = api_version_timeout_ms
        self.connect_timeout_ms = connect_timeout_ms
        self.api_versions_max = api_versions_max
        self.state = ConnState.INIT
        self.api_versions: dict[int, ApiVersionRange] = {}
        self.waiting: deque[Request] = deque()
        self.in_flight: dict[int, Request] = {}
        self.unknown_responses = 0
        self._next_corr_id = 1
        self._out: deque[_OutFrame] = deque()
        self._rx = bytearray()
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
        """TCP is up: query ApiVersions before anything else goes out."""
        if self.state != ConnState.CONNECT:
            raise RuntimeError(f"on_connected in state {self.state.name}")
        self.state = ConnState.APIVERSION_QUERY
        self._send_api_versions(self.api_versions_max, now)

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
        self._rx.clear()
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

    def feed(self, data: bytes | memoryview, now: float) -> list[Completion]:
        """Bytes from the socket; returns the requests they complete. A framing error raises ConnectionError
        (the actor then disconnects, which fails everything outstanding)."""
        rx = self._rx
        rx += data
        done: list[Completion] = []
        pos = 0
        with memoryview(rx) as view:  # frames are read through it: a response body is copied once
            while len(rx) - pos >= 4:
                (size,) = _SIZE.unpack_from(rx, pos)
                if size < 4 or size > MAX_RESPONSE_SIZE:
                    raise ConnectionError(f"invalid response frame size {size}")
                if len(rx) - pos - 4 < size:
                    break
                with view[pos + 4:pos + 4 + size] as frame:
                    completion = self._on_frame(frame, now)
                pos += 4 + size
                if completion is not None:
                    done.append(completion)
        if pos:
            del rx[:pos]
            self._pump(now)
        return done

    def _on_frame(self, frame: memoryview, now: float) -> Completion | None:
        (corr_id,) = _SIZE.unpack_from(frame, 0)
        req = self.in_flight.pop(corr_id, None)
        if req is None:
            self.unknown_responses += 1
            self.counters.rxcorriderrs += 1
            return None
        self.counters.received(len(frame) + 4, int((now - req.sent_at) * 1e6), int(now * 1e6))
        try:
            _, offset = decode_response_header(frame, req.api_key, req.api_version)
        except ProtocolError as exc:
            raise ConnectionError(f"bad response header for corr id {corr_id}: {exc}") from exc
        body = bytes(frame[offset:])
        if req.handshake:
            return self._on_api_versions(req, body, now)
        return Completion(req, KafkaError.NO_ERROR, body)

    # ---- timeouts --------------------------------------------------------------------------------------

    def next_deadline(self) -> float | None:
        """Earliest time at which check_timeouts has something to do."""
        deadlines = [req.deadline for req in self.in_flight.values()]
        deadlines += [req.deadline for req in self.waiting]
        if self.state == ConnState.CONNECT:
            deadlines.append(self._connect_deadline)
        return min(deadlines) if deadlines else None

    def check_timeouts(self, now: float) -> tuple[list[Completion], bool]:
        """Returns (timed-out completions, must_disconnect). A request that timed out while in flight means
        the connection is unusable (responses come in order), so the actor must close it; the caller then
        calls on_disconnect, which fails the rest with _TRANSPORT."""
        done: list[Completion] = []
        must_disconnect = False
        if self.state == ConnState.CONNECT and now >= self._connect_deadline:
            self.last_error = "connection setup timed out"
            must_disconnect = True
        for corr_id, req in list(self.in_flight.items()):
            if now >= req.deadline:
                del self.in_flight[corr_id]
                self.counters.req_timeouts += 1
                if req.handshake:
                    self.last_error = f"ApiVersions request timed out after {req.timeout_ms} ms"
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
        """Highest version both sides support, or None."""
        broker = self.api_versions.get(api_key)
        if broker is None:
            return None
        high = min(client_max, broker.max_version)
        low = max(client_min, broker.min_version)
        return high if high >= low else None

    # ---- internals -------------------------------------------------------------------------------------

    def _send_api_versions(self, version: int, now: float) -> None:
        req = Request(API_VERSIONS_KEY, version, [api_versions_request().encode(version)],
                      flexible=version >= 3, timeout_ms=self.api_version_timeout_ms, handshake=True)
        req.enqueued_at = now
        req.deadline = now + req.timeout_ms / 1000
        self._transmit(req, now)

    def _on_api_versions(self, req: Request, body: bytes, now: float) -> Completion | None:
        try:
            answer = read_api_versions(body, 0, req.api_version)
        except ProtocolError as exc:
            raise ConnectionError(f"malformed ApiVersions response: {exc}") from exc
        if answer.retry_version is not None:
            self._send_api_versions(answer.retry_version, now)
            return None
        if answer.response is None:
            raise ConnectionError(f"ApiVersions failed with broker error {answer.error_code}")
        if not answer.response.api_keys:
            raise ConnectionError("ApiVersions response lists no APIs")
        self.api_versions = {entry.api_key: ApiVersionRange(entry.min_version, entry.max_version)
                             for entry in answer.response.api_keys}
        self.state = ConnState.UP
        return None

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


def frame_sizes(chunks: Iterable[bytes]) -> list[int]:
    """Sizes of the size-prefixed frames in a byte stream (test and debugging helper)."""
    data = b"".join(chunks)
    sizes, pos = [], 0
    while pos + 4 <= len(data):
        (size,) = _SIZE.unpack_from(data, pos)
        sizes.append(size)
        pos += 4 + size
    return sizes
