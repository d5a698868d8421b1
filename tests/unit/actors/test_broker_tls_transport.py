"""TlsTransport's writes without sendmsg: small buffers joined into one TLS write, large ones handed over as
slices (no copy), and a write OpenSSL could not finish retried with the very same chunk; reads fill the
buffer from as many records as are ready."""

from __future__ import annotations

import socket
import ssl

import pytest

from kqactors.actors.broker import transport as transports
from kqactors.actors.broker.tls_transport import JOIN_BELOW, MAX_TLS_WRITE, TlsError, TlsTransport


class FakeSsl:
    def __init__(self, block_first: int = 0, reads: list | None = None) -> None:
        self.sent: list = []
        self.block = block_first
        self.reads = list(reads or [])

    def send(self, chunk):
        if self.block:
            self.block -= 1
            self.sent.append(("blocked", chunk))
            raise ssl.SSLWantWriteError()
        self.sent.append(("sent", chunk))
        return len(chunk)

    def recv_into(self, buf):
        if not self.reads:
            raise ssl.SSLWantReadError()
        item = self.reads.pop(0)
        if isinstance(item, Exception):
            raise item
        buf[:len(item)] = item
        return len(item)

    def close(self):
        pass


@pytest.fixture
def transport():
    t = TlsTransport((socket.AF_INET, socket.SOCK_STREAM, 0, ("127.0.0.1", 9)), ssl.create_default_context(),
                     "127.0.0.1")
    yield t
    t.close()


def test_small_buffers_are_joined_and_large_ones_sliced(transport):
    transport.ssl_sock = FakeSsl()
    big = bytearray(MAX_TLS_WRITE + 100)
    assert transport.write([b"hdr", b"body", big]) == len(b"hdrbody")
    assert transport.ssl_sock.sent[-1] == ("sent", b"hdrbody")
    assert transport.write([big]) == MAX_TLS_WRITE
    chunk = transport.ssl_sock.sent[-1][1]
    assert isinstance(chunk, memoryview) and chunk.obj is big  # a slice of the batch, not a copy
    medium = b"m" * JOIN_BELOW
    assert transport.write([medium, b"tail"]) == JOIN_BELOW
    assert transport.ssl_sock.sent[-1][1] is medium


def test_a_blocked_write_is_retried_with_the_same_chunk(transport):
    transport.ssl_sock = FakeSsl(block_first=1)
    with pytest.raises(BlockingIOError):
        transport.write([b"a", b"b"])
    blocked = transport.ssl_sock.sent[-1][1]
    assert transport.write([b"a", b"b", b"more"]) == 2  # new buffers queued meanwhile do not change the retry
    assert transport.ssl_sock.sent[-1][1] is blocked


def test_reads_fill_from_several_records_then_report_what_they_got(transport):
    transport.ssl_sock = FakeSsl(reads=[b"abc", b"def"])
    buf = memoryview(bytearray(16))
    assert transport.recv_into(buf) == 6 and bytes(buf[:6]) == b"abcdef"
    with pytest.raises(BlockingIOError):
        transport.recv_into(buf)
    transport.ssl_sock = FakeSsl(reads=[ssl.SSLError(1, "bad record mac")])
    with pytest.raises(TlsError) as info:
        transport.recv_into(buf)
    assert info.value.error_code == transports.KafkaError._SSL


def test_the_handshake_maps_want_read_and_want_write(monkeypatch, transport):
    outcomes = [ssl.SSLWantReadError(), ssl.SSLWantWriteError(), None]

    class Sock:
        def do_handshake(self):
            outcome = outcomes.pop(0)
            if outcome is not None:
                raise outcome

    transport.ssl_sock = Sock()
    assert transport.handshake() is False and not transport.wants_write_for_handshake()
    assert transport.handshake() is False and transport.wants_write_for_handshake()
    assert transport.handshake() is True
    transport.ssl_sock = None
