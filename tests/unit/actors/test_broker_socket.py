"""Unit tests for the broker socket's librdkafka properties (kqactors.actors.broker.transport): socket options
on the sockets a broker actor connects with, and the address families broker.address.family allows."""

from __future__ import annotations

import socket

import pytest

from kqactors.actors.broker import transport


@pytest.fixture
def listener():
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(4)
    yield sock.getsockname()[1]
    sock.close()


def connected(port: int, **options) -> transport.PlainTransport:
    (address,) = transport.numeric_address("127.0.0.1", port)
    conn = transport.PlainTransport(address, **options)
    conn.connect()
    return conn


def test_defaults_leave_keepalive_off(listener):
    conn = connected(listener)
    try:
        assert conn.sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) == 1  # socket.nagle.disable=true
        assert conn.sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 0
    finally:
        conn.close()


def test_keepalive_and_buffer_sizes_are_set_on_the_broker_socket(listener):
    conn = connected(listener, nodelay=False, keepalive=True, sndbuf=65536, rcvbuf=131072)
    try:
        sock = conn.sock
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) == 0
        # Linux doubles the value asked for (bookkeeping overhead); any OS gives at least about what was asked
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF) >= 65536
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF) >= 131072
    finally:
        conn.close()


def test_address_family_limits_numeric_and_looked_up_addresses():
    assert transport.numeric_address("127.0.0.1", 9092, transport.FAMILIES["v6"]) == []
    assert [a[0] for a in transport.numeric_address("127.0.0.1", 9092, transport.FAMILIES["v4"])] == [socket.AF_INET]
    assert transport.numeric_address("::1", 9092, transport.FAMILIES["v4"]) == []
    assert transport.numeric_address("localhost", 9092) is None  # a name: looked up on a thread instead
    found = transport.getaddrinfo("localhost", 9092, transport.FAMILIES["v4"])
    assert found and {a[0] for a in found} == {socket.AF_INET}
