"""Runs in: the main host, inside broker/N actors. Owns the socket layer of a broker connection: name
resolution (numeric addresses at once, host names on a worker thread so getaddrinfo never blocks the host
loop) and the ``Transport`` interface — non-blocking connect, read, write, close — with ``PlainTransport``.
Plain TCP keeps ``sendmsg``, the zero-copy hot path. ``TlsTransport`` lives in ``tls_transport.py``, so a
plaintext client never imports ``ssl``; ``TlsError`` is here because every connection handles it.
"""

from __future__ import annotations

import errno
import socket
import threading
from collections.abc import Callable
from typing import Any, Protocol

from kqactors.errors import KafkaError

AddrInfo = tuple[int, int, int, Any]
"""(family, type, proto, sockaddr) — the part of a getaddrinfo entry a transport needs."""

FAMILIES = {"any": socket.AF_UNSPEC, "v4": socket.AF_INET, "v6": socket.AF_INET6}
"""broker.address.family → the address family lookups are limited to."""


def apply_socket_options(sock: socket.socket, nodelay: bool = True, keepalive: bool = False, sndbuf: int = 0,
                         rcvbuf: int = 0) -> None:
    """librdkafka's broker socket options: socket.nagle.disable (TCP_NODELAY), socket.keepalive.enable
    (SO_KEEPALIVE), socket.send.buffer.bytes / socket.receive.buffer.bytes (SO_SNDBUF / SO_RCVBUF; 0 keeps
    the system's default). Set before connecting, so the buffer sizes shape the TCP window."""
    if nodelay:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    if keepalive:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    if sndbuf > 0:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, sndbuf)
    if rcvbuf > 0:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)


class Transport(Protocol):
    """One connection attempt's socket. ``write``/``recv_into`` raise BlockingIOError when they would block."""

    needs_handshake: bool

    def fileno(self) -> int: ...

    def connect(self) -> None: ...

    def connect_error(self) -> int: ...

    def handshake(self) -> bool: ...

    def wants_write_for_handshake(self) -> bool: ...

    def write(self, buffers: list[Any]) -> int: ...

    def recv_into(self, buffer: memoryview) -> int: ...

    def close(self) -> None: ...


class PlainTransport:
    """TCP without TLS. ``write`` and ``recv_into`` are the socket's own bound methods (no extra call layer)."""

    needs_handshake = False

    def __init__(self, address: AddrInfo, nodelay: bool = True, keepalive: bool = False, sndbuf: int = 0,
                 rcvbuf: int = 0) -> None:
        family, kind, proto, self.sockaddr = address
        sock = socket.socket(family, kind, proto)
        sock.setblocking(False)
        try:
            apply_socket_options(sock, nodelay, keepalive, sndbuf, rcvbuf)
        except OSError:
            sock.close()
            raise
        self.sock = sock
        self.write: Callable[[list[Any]], int] = sock.sendmsg
        self.recv_into: Callable[[memoryview], int] = sock.recv_into

    def fileno(self) -> int:
        return self.sock.fileno()

    def connect(self) -> None:
        """Start a non-blocking connect; raises OSError when it fails at once."""
        code = self.sock.connect_ex(self.sockaddr)
        if code not in (0, errno.EINPROGRESS, errno.EWOULDBLOCK):
            raise OSError(code, errno.errorcode.get(code, str(code)))

    def connect_error(self) -> int:
        """The connect's outcome once the socket is writable: 0, or an errno."""
        return self.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)

    def handshake(self) -> bool:
        return True

    def wants_write_for_handshake(self) -> bool:
        return False

    def close(self) -> None:
        self.sock.close()


class TlsError(OSError):
    """The TLS layer failed (handshake, certificate verification, a record error): reported as _SSL."""

    error_code = KafkaError._SSL


def numeric_address(host: str, port: int, family: int = socket.AF_UNSPEC) -> list[AddrInfo] | None:
    """Addresses of a numeric host (an IP literal) without any lookup, or None when ``host`` is a name. An
    IP literal of another family than ``family`` has no address: the empty list."""
    try:
        literal = host.encode("ascii")  # an IP literal is ASCII; bytes skip the idna codec (and its import)
        infos = socket.getaddrinfo(literal, port, type=socket.SOCK_STREAM,
                                   flags=socket.AI_NUMERICHOST | socket.AI_NUMERICSERV)
    except (socket.gaierror, UnicodeError):
        return None
    return [(fam, kind, proto, address) for fam, kind, proto, _name, address in infos
            if family == socket.AF_UNSPEC or fam == family]


def getaddrinfo(host: str, port: int, family: int = socket.AF_UNSPEC) -> list[AddrInfo]:
    """The blocking lookup (run on a worker thread), limited to ``family``. Raises OSError."""
    return [(fam, kind, proto, address) for fam, kind, proto, _name, address
            in socket.getaddrinfo(host, port, family=family, type=socket.SOCK_STREAM)]


def resolve_in_thread(host: str, port: int, deliver: Callable[[list[AddrInfo] | None, str], Any],
                      lookup: Callable[[str, int], list[AddrInfo]] | None = None) -> threading.Thread:
    """Run the lookup on a daemon thread; ``deliver(addresses, "")`` or ``deliver(None, error)`` is called on
    that thread (the caller makes it thread-safe, e.g. a runtime ThreadInbox post)."""
    def run() -> None:
        try:
            found = (lookup or getaddrinfo)(host, port)
        except (OSError, UnicodeError) as exc:
            deliver(None, str(exc))
            return
        if not found:
            deliver(None, "no addresses")
        else:
            deliver(found, "")

    thread = threading.Thread(target=run, name=f"kqactors-resolve-{host}", daemon=True)
    thread.start()
    return thread
