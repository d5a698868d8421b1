"""A TCP proxy in front of a one-broker cluster that makes the broker's responses ask for throttling.

Runs in: the test process (threads). Neither the librdkafka mock cluster nor Tansu can be made to throttle a
client (no quotas), so tests put this proxy between the client and a real broker: every response passes
through unchanged except that ``throttle_time_ms`` is set to ``proxy.throttle_ms`` in the responses of the
chosen APIs (Produce, Fetch, ... by api key), and Metadata responses name the proxy as the broker so the
client's broker connection goes through it too. Requests are forwarded untouched; their api key and version,
by correlation id, say how each response is read.
"""

from __future__ import annotations

import socket
import struct
import threading
from collections.abc import Iterable

from kqactors.protocol.api import decode_response_header
from kqactors.protocol.generated.metadata import MetadataResponse
from kqactors.protocol.generated.produce import ProduceResponse

_SIZE = struct.Struct(">i")
_REQUEST_HEADER = struct.Struct(">hhi")
PRODUCE, FETCH, METADATA = 0, 1, 3
# api key → first version whose response starts with throttle_time_ms (the ones these tests throttle)
_FIRST_FIELD_FROM = {FETCH: 1, METADATA: 3, 2: 2, 8: 3, 9: 3, 10: 1, 12: 1, 22: 0}


def _read_exactly(sock: socket.socket, size: int) -> bytes | None:
    data = bytearray()
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            return None
        data += chunk
    return bytes(data)


def _read_frame(sock: socket.socket) -> bytes | None:
    head = _read_exactly(sock, 4)
    if head is None:
        return None
    return _read_exactly(sock, _SIZE.unpack(head)[0])


class ThrottlingProxy:
    """``ThrottlingProxy(upstream_bootstrap, apis).start()``; ``bootstrap`` is the address clients use."""

    def __init__(self, upstream: str, apis: Iterable[int] = (PRODUCE, FETCH), throttle_ms: int = 0) -> None:
        host, _, port = upstream.split(",")[0].rpartition(":")
        self.upstream = (host, int(port))
        self.apis = set(apis)
        self.throttle_ms = throttle_ms
        self.throttled = 0  # responses rewritten with a non-zero throttle time
        self._server = socket.socket()
        self._server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._server.bind(("127.0.0.1", 0))
        self._server.listen(16)
        self.port = self._server.getsockname()[1]
        self._closed = threading.Event()
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> ThrottlingProxy:
        threading.Thread(target=self._accept, name="throttle-proxy", daemon=True).start()
        return self

    def close(self) -> None:
        self._closed.set()
        self._server.close()
        with self._lock:
            for sock in self._sockets:
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                sock.close()

    def __enter__(self) -> ThrottlingProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- plumbing ----------------------------------------------------------------------------------------
    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.upstream)
            with self._lock:
                self._sockets += [client, upstream]
            pending: dict[int, tuple[int, int]] = {}
            threading.Thread(target=self._requests, args=(client, upstream, pending), daemon=True).start()
            threading.Thread(target=self._responses, args=(upstream, client, pending), daemon=True).start()

    def _requests(self, client: socket.socket, upstream: socket.socket, pending: dict[int, tuple[int, int]]) -> None:
        try:
            while (frame := _read_frame(client)) is not None:
                api_key, version, corr_id = _REQUEST_HEADER.unpack_from(frame, 0)
                pending[corr_id] = (api_key, version)
                upstream.sendall(_SIZE.pack(len(frame)) + frame)
        except OSError:
            pass
        finally:
            upstream.close()

    def _responses(self, upstream: socket.socket, client: socket.socket,
                   pending: dict[int, tuple[int, int]]) -> None:
        try:
            while (frame := _read_frame(upstream)) is not None:
                (corr_id,) = _SIZE.unpack_from(frame, 0)
                api_key, version = pending.pop(corr_id, (-1, 0))
                if api_key >= 0:
                    frame = self._rewrite(frame, api_key, version)
                client.sendall(_SIZE.pack(len(frame)) + frame)
        except OSError:
            pass
        finally:
            client.close()

    def _rewrite(self, frame: bytes, api_key: int, version: int) -> bytes:
        if api_key not in self.apis and api_key != METADATA:
            return frame  # passed through as it came (also APIs the codec does not know)
        _, offset = decode_response_header(memoryview(frame), api_key, version)
        header, body = frame[:offset], frame[offset:]
        if api_key == METADATA:
            response = MetadataResponse.decode(body, version)
            for broker in response.brokers:
                broker.host, broker.port = "127.0.0.1", self.port
            if api_key in self.apis and version >= 3:
                response.throttle_time_ms = self.throttle_ms
                self._count()
            return header + response.encode(version)
        if api_key not in self.apis:
            return frame
        if api_key == PRODUCE and version >= 1:
            response = ProduceResponse.decode(body, version)
            response.throttle_time_ms = self.throttle_ms
            self._count()
            return header + response.encode(version)
        first_from = _FIRST_FIELD_FROM.get(api_key)
        if first_from is not None and version >= first_from:
            self._count()
            return header + _SIZE.pack(self.throttle_ms) + body[4:]
        return frame

    def _count(self) -> None:
        if self.throttle_ms:
            self.throttled += 1
