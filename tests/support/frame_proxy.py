"""A TCP proxy for Kafka frames between a client and a one-broker cluster, for tests to alter what passes.

Runs in: the test process (threads: one accepting, two per connection). Each request frame goes through
``on_request`` (which may rewrite it and returns what the matching response needs), each response frame, matched
by correlation id, through ``on_response``. Subclasses (throttle_proxy.py, fetch_session_proxy.py) say what they
change; ``point_brokers_here`` makes a Metadata response name the proxy, so the client's broker connections pass
it too.
"""

from __future__ import annotations

import socket
import struct
import threading
from typing import Any

_SIZE = struct.Struct(">i")


def _read_exactly(sock: socket.socket, size: int) -> bytes | None:
    data = bytearray()
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            return None
        data += chunk
    return bytes(data)


def read_frame(sock: socket.socket) -> bytes | None:
    """One size-prefixed frame (without its size), or None at the end of the stream."""
    head = _read_exactly(sock, 4)
    return None if head is None else _read_exactly(sock, _SIZE.unpack(head)[0])


class FrameProxy:
    """``Proxy(upstream_bootstrap).start()`` (or ``with``); ``bootstrap`` is the address clients use."""

    name = "frame-proxy"

    def __init__(self, upstream: str) -> None:
        host, _, port = upstream.split(",")[0].rpartition(":")
        self.upstream = (host, int(port))
        self._lock = threading.Lock()
        self._server = socket.socket()
        self._server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._server.bind(("127.0.0.1", 0))
        self._server.listen(16)
        self.port = self._server.getsockname()[1]
        self._closed = threading.Event()
        self._sockets: list[socket.socket] = []

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> FrameProxy:
        threading.Thread(target=self._accept, name=self.name, daemon=True).start()
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

    def __enter__(self) -> FrameProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- what subclasses change --------------------------------------------------------------------------
    def on_request(self, frame: bytes) -> tuple[bytes, int, Any]:
        """(the frame to forward, its correlation id, what its response's ``on_response`` gets)."""
        raise NotImplementedError

    def on_response(self, frame: bytes, context: Any) -> bytes:
        """The frame to hand the client; ``context`` is what ``on_request`` returned (None: not matched)."""
        raise NotImplementedError

    def point_brokers_here(self, response: Any) -> None:
        """Name the proxy as every broker of a MetadataResponse."""
        for broker in response.brokers:
            broker.host, broker.port = "127.0.0.1", self.port

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
            pending: dict[int, Any] = {}
            threading.Thread(target=self._requests, args=(client, upstream, pending), daemon=True).start()
            threading.Thread(target=self._responses, args=(upstream, client, pending), daemon=True).start()

    def _requests(self, client: socket.socket, upstream: socket.socket, pending: dict[int, Any]) -> None:
        try:
            while (frame := read_frame(client)) is not None:
                frame, corr_id, context = self.on_request(frame)
                pending[corr_id] = context
                upstream.sendall(_SIZE.pack(len(frame)) + frame)
        except OSError:
            pass
        finally:
            upstream.close()

    def _responses(self, upstream: socket.socket, client: socket.socket, pending: dict[int, Any]) -> None:
        try:
            while (frame := read_frame(upstream)) is not None:
                (corr_id,) = _SIZE.unpack_from(frame, 0)
                frame = self.on_response(frame, pending.pop(corr_id, None))
                client.sendall(_SIZE.pack(len(frame)) + frame)
        except OSError:
            pass
        finally:
            client.close()
