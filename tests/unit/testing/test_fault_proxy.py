"""The fault-injecting proxy (kqactors/testing/fault_proxy.py) against a tiny framed echo server.

Runs in: the pytest process (the server and the proxy are threads). The server answers each framed request
with a frame carrying the request's first 4 bytes (its "correlation id") and the rest echoed, so a test can
tell what arrived, when, and whether framing survived.
"""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections.abc import Iterator

import pytest
from support.waiting import wait_until

from kqactors.testing._process import free_loopback_port
from kqactors.testing.fault_proxy import FaultProxy

SIZE = struct.Struct(">i")


class EchoBroker:
    def __init__(self) -> None:
        self.server = socket.socket()
        self.server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.server.bind(("127.0.0.1", 0))
        self.server.listen(16)
        self.port = self.server.getsockname()[1]
        self.accepted = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                sock, _ = self.server.accept()
            except OSError:
                return
            self.accepted += 1
            threading.Thread(target=self._serve, args=(sock,), daemon=True).start()

    @staticmethod
    def _serve(sock: socket.socket) -> None:
        try:
            while True:
                frame = read_frame(sock)
                if frame is None:
                    return
                sock.sendall(SIZE.pack(len(frame)) + frame)
        except OSError:
            pass
        finally:
            sock.close()

    def close(self) -> None:
        self.server.close()


def read_exactly(sock: socket.socket, size: int) -> bytes | None:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            return None
        data += chunk
    return data


def read_frame(sock: socket.socket) -> bytes | None:
    head = read_exactly(sock, 4)
    return None if head is None else read_exactly(sock, SIZE.unpack(head)[0])


def request(sock: socket.socket, corr_id: int, payload: bytes = b"hello") -> None:
    body = SIZE.pack(corr_id) + payload
    sock.sendall(SIZE.pack(len(body)) + body)


@pytest.fixture
def broker() -> Iterator[EchoBroker]:
    server = EchoBroker()
    yield server
    server.close()


@pytest.fixture
def proxy(broker: EchoBroker) -> Iterator[FaultProxy]:
    with FaultProxy(f"127.0.0.1:{broker.port}") as running:
        yield running


def connect(proxy: FaultProxy, timeout: float = 10.0) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", proxy.port), timeout=timeout)
    wait_until(lambda: proxy.open_connections(), 10, "the proxy to accept")
    return sock


def test_frames_pass_unchanged_both_ways(proxy: FaultProxy) -> None:
    with connect(proxy) as sock:
        for corr_id in range(5):
            request(sock, corr_id, b"x" * (corr_id * 1000))
        for corr_id in range(5):
            assert read_frame(sock) == SIZE.pack(corr_id) + b"x" * (corr_id * 1000)


def test_latency_delays_each_direction_and_can_be_switched_off(proxy: FaultProxy) -> None:
    with connect(proxy) as sock:
        proxy.set_latency(0.5)
        started = time.monotonic()
        request(sock, 1)
        assert read_frame(sock) == SIZE.pack(1) + b"hello"
        assert time.monotonic() - started >= 0.95  # 0.5 s to the broker and 0.5 s back
        proxy.set_latency(0)
        started = time.monotonic()
        request(sock, 2)
        assert read_frame(sock) == SIZE.pack(2) + b"hello"
        assert time.monotonic() - started < 0.9  # a loopback echo, however loaded the machine


def test_bandwidth_cap_slows_a_large_frame(proxy: FaultProxy) -> None:
    proxy.set_bandwidth(400_000)
    with connect(proxy) as sock:
        started = time.monotonic()
        request(sock, 7, b"y" * 200_000)
        assert read_frame(sock) == SIZE.pack(7) + b"y" * 200_000
        assert time.monotonic() - started >= 0.8  # 200 kB each way at 400 kB/s


def test_reset_gives_the_client_a_connection_reset(proxy: FaultProxy) -> None:
    with connect(proxy) as sock:
        request(sock, 1)
        assert read_frame(sock) is not None
        assert proxy.reset_all() == 1
        with pytest.raises(ConnectionResetError):
            sock.recv(10)


def test_blackhole_keeps_the_connection_open_and_forwards_nothing(proxy: FaultProxy) -> None:
    with connect(proxy) as sock:
        proxy.blackhole_all()
        request(sock, 1)
        sock.settimeout(0.5)
        with pytest.raises(TimeoutError):
            sock.recv(10)
        assert not proxy.open_connections()[0].closed
        proxy.blackhole_all(False)
        sock.settimeout(10)
        request(sock, 2)
        assert read_frame(sock) == SIZE.pack(2) + b"hello"


def test_half_open_accepts_but_never_reaches_the_broker(proxy: FaultProxy, broker: EchoBroker) -> None:
    proxy.half_open = True
    with connect(proxy) as sock:
        request(sock, 1)
        sock.settimeout(0.5)
        with pytest.raises(TimeoutError):
            sock.recv(10)
    assert broker.accepted == 0


def test_slow_close_sends_the_fin_only_after_the_delay(proxy: FaultProxy) -> None:
    with connect(proxy) as sock:
        started = time.monotonic()
        proxy.slow_close_all(0.6)
        request(sock, 1)
        assert sock.recv(10) == b""
        assert time.monotonic() - started >= 0.55


@pytest.mark.parametrize("kind", ["garbage", "oversized"])
def test_injected_bad_frames_reach_the_client_at_a_frame_boundary(proxy: FaultProxy, kind: str) -> None:
    with connect(proxy) as sock:
        request(sock, 1)
        assert read_frame(sock) == SIZE.pack(1) + b"hello"
        proxy.inject_all(kind)
        (size,) = SIZE.unpack(read_exactly(sock, 4))
        assert size < 0 if kind == "garbage" else size > 1 << 30
    assert proxy.injected == 1


def test_truncated_frame_is_followed_by_eof(proxy: FaultProxy) -> None:
    with connect(proxy) as sock:
        proxy.inject_all("truncated")
        (size,) = SIZE.unpack(read_exactly(sock, 4))
        got = read_exactly(sock, size)
        assert got is None  # fewer than ``size`` bytes came before the FIN


def test_corrupt_keeps_the_correlation_id_and_replaces_the_body(proxy: FaultProxy) -> None:
    with connect(proxy) as sock:
        proxy.inject_all("corrupt")
        request(sock, 9, b"\x00" * 64)
        frame = read_frame(sock)
        assert frame is not None and frame[:4] == SIZE.pack(9) and len(frame) == 68
        assert frame[4:] != b"\x00" * 64
        request(sock, 10, b"\x00" * 64)
        assert read_frame(sock) == SIZE.pack(10) + b"\x00" * 64  # only the next response


def test_bad_settings_are_refused(proxy: FaultProxy) -> None:
    with connect(proxy):
        conn = proxy.open_connections()[0]
        with pytest.raises(ValueError):
            conn.inject("nonsense")
    with pytest.raises(ValueError):
        proxy.set_latency(-1)
    with pytest.raises(ValueError):
        proxy.set_bandwidth(-5)


def test_a_missing_broker_closes_the_client() -> None:
    with FaultProxy(f"127.0.0.1:{free_loopback_port()}") as proxy, \
            socket.create_connection(("127.0.0.1", proxy.port), timeout=10) as sock:
        assert sock.recv(10) == b""
