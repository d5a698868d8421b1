"""A fault-injecting TCP proxy between Kafka clients and a broker, switchable per connection at run time.

Runs in: the test (or benchmark) process, on threads. No installable tool does this offline, so tests put this
proxy in front of a real broker and turn faults on and off while a client runs:

- ``latency`` (seconds, each way) and ``bandwidth`` (bytes/s, each way; 0 = unlimited);
- ``reset()``: an RST to the client (SO_LINGER 0) and the broker side closed;
- ``blackhole()``: the connection stays open but nothing is forwarded either way; ``half_open = True`` on the
  proxy makes new connections accepted and never forwarded (no broker connection at all);
- ``slow_close(delay)``: the broker side goes away at once, the client's side gets its FIN only ``delay`` s
  later (requests meanwhile go unanswered);
- ``inject(kind)``: at the next response boundary toward the client, ``"garbage"`` (bytes whose size prefix is
  negative), ``"truncated"`` (a size prefix and part of a frame, then FIN), ``"oversized"`` (a 2 GiB - 16 size
  prefix) or ``"corrupt"`` (the next real response with its body, after the correlation id, replaced by
  random bytes).

Responses are forwarded frame by frame (so injections land on frame boundaries); requests byte for byte.
Nothing is rewritten: for a broker whose Metadata names itself, start the broker advertising the proxy's port
(``FaultyTansu`` does it for Tansu, as ``stunnel.TlsTansu`` does for TLS), so a client's every connection goes
through the proxy.
"""

from __future__ import annotations

import os
import queue
import socket
import struct
import threading
import time
from types import TracebackType

from kqactors.testing.tansu import FrontedTansu

__all__ = ["FaultProxy", "FaultyTansu", "ProxyConnection", "INJECTIONS"]

INJECTIONS = ("garbage", "truncated", "oversized", "corrupt")
_SIZE = struct.Struct(">i")
_CHUNK = 64 * 1024
_STOP = object()


class ProxyConnection:
    """One client connection through the proxy; its settings start as the proxy's and may be changed alone."""

    def __init__(self, proxy: FaultProxy, client: socket.socket, upstream: socket.socket | None) -> None:
        self.proxy = proxy
        self.client = client
        self.upstream = upstream
        self.latency: float = proxy.latency
        self.bandwidth: int = proxy.bandwidth
        self.blackholed = upstream is None
        self.bytes_to_broker = 0
        self.bytes_to_client = 0
        self._corrupt_next = False
        self._reset = False
        self._closed = threading.Event()
        self._lock = threading.Lock()
        self._to_client: queue.Queue = queue.Queue()
        self._to_broker: queue.Queue = queue.Queue()

    @property
    def closed(self) -> bool:
        return self._closed.is_set()

    # ---- faults ------------------------------------------------------------------------------------------
    def reset(self) -> None:
        """RST toward the client, close toward the broker."""
        self._reset = True
        try:
            self.client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass
        self.close()

    def blackhole(self, on: bool = True) -> None:
        """Stop (or resume) forwarding both ways; the sockets stay open."""
        self.blackholed = on

    def slow_close(self, delay: float) -> None:
        """Close the broker side now and send the client a FIN only after ``delay`` seconds."""
        self.blackholed = True
        if self.upstream is not None:
            _close(self.upstream)

        def later() -> None:
            if not self._closed.wait(delay):
                try:
                    self.client.shutdown(socket.SHUT_WR)
                except OSError:
                    pass
                self._closed.wait(delay)
                self.close()

        threading.Thread(target=later, name="fault-proxy-slow-close", daemon=True).start()

    def inject(self, kind: str) -> None:
        """Put a bad frame toward the client at the next response boundary (see the module docstring)."""
        if kind not in INJECTIONS:
            raise ValueError(f"unknown injection {kind!r}: one of {INJECTIONS}")
        if kind == "corrupt":
            self._corrupt_next = True
        else:
            self._to_client.put((time.monotonic(), kind))
        self.proxy.injected += 1

    def close(self) -> None:
        if self._closed.is_set():
            return
        self._closed.set()
        # a reset must not send a FIN first: SHUT_RD wakes this socket's reader and sends nothing, the close
        # with SO_LINGER 0 then sends the RST
        _close(self.client, how=socket.SHUT_RD if self._reset else socket.SHUT_RDWR)
        if self.upstream is not None:
            _close(self.upstream)
        self._to_client.put((0.0, _STOP))
        self._to_broker.put((0.0, _STOP))

    # ---- plumbing ----------------------------------------------------------------------------------------
    def start(self) -> None:
        threads = [(self._read_requests, "req-in"), (self._write, "req-out", self._to_broker, True),
                   (self._write, "resp-out", self._to_client, False)]
        if self.upstream is not None:
            threads.append((self._read_responses, "resp-in"))
        for target, name, *args in threads:
            threading.Thread(target=target, args=args, name=f"fault-proxy-{name}", daemon=True).start()

    def _read_requests(self) -> None:
        try:
            while not self._closed.is_set():
                chunk = self.client.recv(_CHUNK)
                if not chunk:
                    break
                self._to_broker.put((time.monotonic(), chunk))
        except OSError:
            pass
        self.close()

    def _read_responses(self) -> None:
        assert self.upstream is not None
        try:
            while not self._closed.is_set():
                head = _read_exactly(self.upstream, 4)
                if head is None:
                    break
                (size,) = _SIZE.unpack(head)
                body = _read_exactly(self.upstream, size) if size > 0 else b""
                if body is None:
                    break
                if self._corrupt_next and len(body) > 4:
                    self._corrupt_next = False
                    body = body[:4] + os.urandom(len(body) - 4)
                self._to_client.put((time.monotonic(), head + body))
        except OSError:
            pass
        if not self.blackholed:  # a slow close keeps the client side open on its own schedule
            self.close()

    def _write(self, items: queue.Queue, to_broker: bool) -> None:
        while True:
            received, item = items.get()
            if item is _STOP or self._closed.is_set():
                return
            wait = received + self.latency - time.monotonic()
            if wait > 0 and self._closed.wait(wait):
                return
            if self.blackholed:
                continue
            if isinstance(item, str):
                self._send_injection(item)
                continue
            sock = self.upstream if to_broker else self.client
            if sock is None or not self._send(sock, item):
                self.close()
                return
            if to_broker:
                self.bytes_to_broker += len(item)
            else:
                self.bytes_to_client += len(item)

    def _send(self, sock: socket.socket, data: bytes) -> bool:
        """Send ``data`` at the connection's bandwidth (slices of 1/20 s worth), or at once when unlimited."""
        view = memoryview(data)
        try:
            while view:
                rate = self.bandwidth
                if rate <= 0:
                    sock.sendall(view)
                    return True
                step = max(1, rate // 20)
                started = time.monotonic()
                sock.sendall(view[:step])
                view = view[step:]
                pause = started + step / rate - time.monotonic()
                if pause > 0 and self._closed.wait(pause):
                    return False
        except OSError:
            return False
        return True

    def _send_injection(self, kind: str) -> None:
        if kind == "garbage":
            data = b"\xff\xfe\xfd\xfc" + os.urandom(60)
        elif kind == "oversized":
            data = _SIZE.pack(0x7FFFFFF0) + os.urandom(64)
        else:  # truncated: a frame announced as 1000 bytes, 10 of them sent, then FIN
            data = _SIZE.pack(1000) + os.urandom(10)
        try:
            self.client.sendall(data)
            if kind == "truncated":
                self.client.shutdown(socket.SHUT_WR)
        except OSError:
            self.close()


class FaultProxy:
    """``FaultProxy("127.0.0.1:9092").start()``; clients use ``proxy.bootstrap``.

    Settings on the proxy (``latency``, ``bandwidth``, ``half_open``) apply to connections made after the change;
    ``set_latency`` / ``set_bandwidth`` and the ``*_all`` methods change every open connection too.
    """

    def __init__(self, upstream: str | tuple[str, int], port: int | None = None) -> None:
        if isinstance(upstream, str):
            host, _, port_text = upstream.split(",")[0].rpartition(":")
            upstream = (host, int(port_text))
        self.upstream: tuple[str, int] = upstream
        self.latency = 0.0
        self.bandwidth = 0
        self.half_open = False
        self.accepted = 0
        self.injected = 0
        self.connections: list[ProxyConnection] = []
        self._server = socket.socket()
        self._server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._server.bind(("127.0.0.1", port or 0))
        self._server.listen(64)
        self.port: int = self._server.getsockname()[1]
        self._closed = threading.Event()
        self._lock = threading.Lock()

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def open_connections(self) -> list[ProxyConnection]:
        with self._lock:
            return [conn for conn in self.connections if not conn.closed]

    # ---- run-time switches over every open connection ----------------------------------------------------
    def set_latency(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError("latency must be >= 0")
        self.latency = seconds
        for conn in self.open_connections():
            conn.latency = seconds

    def set_bandwidth(self, bytes_per_second: int) -> None:
        if bytes_per_second < 0:
            raise ValueError("bandwidth must be >= 0 (0 = unlimited)")
        self.bandwidth = bytes_per_second
        for conn in self.open_connections():
            conn.bandwidth = bytes_per_second

    def reset_all(self) -> int:
        conns = self.open_connections()
        for conn in conns:
            conn.reset()
        return len(conns)

    def blackhole_all(self, on: bool = True) -> int:
        conns = self.open_connections()
        for conn in conns:
            conn.blackhole(on)
        return len(conns)

    def slow_close_all(self, delay: float) -> int:
        conns = self.open_connections()
        for conn in conns:
            conn.slow_close(delay)
        return len(conns)

    def inject_all(self, kind: str) -> int:
        conns = self.open_connections()
        for conn in conns:
            conn.inject(kind)
        return len(conns)

    # ---- lifecycle ---------------------------------------------------------------------------------------
    def start(self) -> FaultProxy:
        threading.Thread(target=self._accept, name="fault-proxy-accept", daemon=True).start()
        return self

    def close(self) -> None:
        self._closed.set()
        _close(self._server)
        for conn in self.open_connections():
            conn.close()

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<FaultProxy {self.bootstrap} -> {self.upstream[0]}:{self.upstream[1]}>"

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            upstream = None
            if not self.half_open:
                try:
                    upstream = socket.create_connection(self.upstream, timeout=5)
                    upstream.settimeout(None)
                    upstream.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                except OSError:
                    _close(client)  # the broker is not there: the client sees the same
                    continue
            conn = ProxyConnection(self, client, upstream)
            with self._lock:
                self.connections.append(conn)
                self.accepted += 1
            conn.start()


class FaultyTansu(FrontedTansu):
    """A Tansu broker reachable only through a FaultProxy (``faulty.proxy`` switches the faults)."""

    def _start_front(self) -> FaultProxy:
        return FaultProxy(self.tansu.bootstrap, port=self.proxy_port).start()

    def _stop_front(self, front: FaultProxy) -> None:
        front.close()


def _read_exactly(sock: socket.socket, size: int) -> bytes | None:
    data = bytearray()
    while len(data) < size:
        chunk = sock.recv(min(size - len(data), 1 << 20))
        if not chunk:
            return None
        data += chunk
    return bytes(data)


def _close(sock: socket.socket, how: int = socket.SHUT_RDWR) -> None:
    try:
        sock.shutdown(how)
    except OSError:
        pass
    try:
        sock.close()
    except OSError:
        pass
