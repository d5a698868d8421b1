"""Runs in: the main host, inside broker/N actors. Owns the socket layer of a broker connection: name
resolution (numeric addresses at once, host names on a worker thread so getaddrinfo never blocks the host
loop) and the ``Transport`` interface — non-blocking connect, read, write, close — with ``PlainTransport``.

A TLS transport implements the same interface: ``needs_handshake`` tells the connection to pass through
SSL_HANDSHAKE, ``handshake()`` is driven by the actor on socket events until it returns True, and ``write``
takes the list of buffers and may send them however it can (ssl.SSLSocket has no sendmsg; plain TCP keeps
``sendmsg``, the zero-copy hot path for spliced record batches).
"""

from __future__ import annotations

import errno
import socket
import threading
from collections.abc import Callable
from typing import Any, Protocol

AddrInfo = tuple[int, int, int, Any]
"""(family, type, proto, sockaddr) — the part of a getaddrinfo entry a transport needs."""


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

    def __init__(self, address: AddrInfo, nodelay: bool = True) -> None:
        family, kind, proto, self.sockaddr = address
        sock = socket.socket(family, kind, proto)
        sock.setblocking(False)
        if nodelay:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
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


def numeric_address(host: str, port: int) -> list[AddrInfo] | None:
    """Addresses of a numeric host (an IP literal) without any lookup, or None when ``host`` is a name."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                   flags=socket.AI_NUMERICHOST | socket.AI_NUMERICSERV)
    except (socket.gaierror, UnicodeError):
        return None
    return [(family, kind, proto, address) for family, kind, proto, _name, address in infos]


def getaddrinfo(host: str, port: int) -> list[AddrInfo]:
    """The blocking lookup (run on a worker thread). Raises OSError."""
    return [(family, kind, proto, address)
            for family, kind, proto, _name, address in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)]


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
