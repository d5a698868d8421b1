"""Runs in: the main host, inside broker/N actors. Owns the socket layer of a broker connection: name
resolution (numeric addresses at once, host names on a worker thread so getaddrinfo never blocks the host
loop) and the ``Transport`` interface — non-blocking connect, read, write, close — with ``PlainTransport``
and ``TlsTransport``.

``TlsTransport`` (security.protocol ssl / sasl_ssl): ``needs_handshake`` makes the connection pass through
SSL_HANDSHAKE, where the actor drives ``handshake()`` on socket events until it returns True; OpenSSL's
want-read / want-write become the loop's fd interest (``wants_write_for_handshake``). ssl.SSLSocket has no
sendmsg, so ``write`` joins runs of small buffers (request headers, small bodies) into one TLS write and hands
large ones (spliced record batches) to OpenSSL as memoryview slices, never copied on the Python side. A write
OpenSSL could not finish is retried with the very same chunk, as OpenSSL requires. Plain TCP keeps
``sendmsg``, the zero-copy hot path.
"""

from __future__ import annotations

import errno
import socket
import ssl
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


JOIN_BELOW = 16 * 1024
"""Buffers smaller than this are joined with their neighbours into one TLS write (one record, one syscall)."""
MAX_TLS_WRITE = 256 * 1024
"""The largest chunk handed to one SSLSocket.send (a slice of a large buffer, not a copy)."""


class TlsError(OSError):
    """The TLS layer failed (handshake, certificate verification, a record error): reported as _SSL."""

    error_code = KafkaError._SSL


def describe_ssl_error(exc: BaseException) -> str:
    """A readable reason for an ssl exception: the verification failure when there is one."""
    if isinstance(exc, ssl.SSLCertVerificationError):
        return f"certificate verify failed: {exc.verify_message or exc.reason}"
    if isinstance(exc, ssl.SSLError):
        reason = str(getattr(exc, "reason", None) or exc.strerror or exc)
        if "ALERT" in reason:  # the broker's alert, e.g. TLSV13_ALERT_CERTIFICATE_REQUIRED
            reason = f"broker sent alert: {reason.lower().replace('_', ' ')}"
            if "certificate" in reason:
                reason += " (the broker did not accept this client's certificate)"
        return reason
    return str(exc)


class TlsTransport(PlainTransport):
    """TLS over a non-blocking TCP socket: TCP connects as plain, then ``handshake()`` wraps the socket and
    runs the TLS handshake a step per socket event. ``server_hostname`` is the broker's host (SNI and, with
    ssl.endpoint.identification.algorithm=https, hostname verification)."""

    needs_handshake = True

    def __init__(self, address: AddrInfo, context: ssl.SSLContext, server_hostname: str,
                 nodelay: bool = True, **socket_options: Any) -> None:
        super().__init__(address, nodelay, **socket_options)
        self.context = context
        self.server_hostname = server_hostname
        self.ssl_sock: ssl.SSLSocket | None = None
        self._want_write = False
        self._pending: Any = None  # the chunk of a write OpenSSL has not finished: retried as it is
        self.write = self._write  # type: ignore[assignment]
        self.recv_into = self._recv_into  # type: ignore[assignment]

    def handshake(self) -> bool:
        """One step of the TLS handshake: True when done; False when waiting (see wants_write_for_handshake).
        Raises TlsError with the reason (e.g. the certificate verification failure)."""
        try:
            if self.ssl_sock is None:
                self.ssl_sock = self.context.wrap_socket(self.sock, server_hostname=self.server_hostname,
                                                         do_handshake_on_connect=False)
            self.ssl_sock.do_handshake()
        except ssl.SSLWantReadError:
            self._want_write = False
            return False
        except ssl.SSLWantWriteError:
            self._want_write = True
            return False
        except ssl.SSLError as exc:
            raise TlsError(f"SSL handshake failed: {describe_ssl_error(exc)}") from None
        except (ConnectionError, OSError) as exc:
            raise TlsError(f"SSL handshake failed: {exc.strerror or exc} (the peer closed the connection "
                           "during the handshake: a plaintext listener, or the client certificate was "
                           "refused?)") from None
        self._want_write = False
        return True

    def wants_write_for_handshake(self) -> bool:
        return self._want_write

    def fileno(self) -> int:
        return self.ssl_sock.fileno() if self.ssl_sock is not None else self.sock.fileno()

    def _chunk(self, buffers: list[Any]) -> Any:
        first = buffers[0]
        if len(first) >= JOIN_BELOW or len(buffers) == 1:
            return memoryview(first)[:MAX_TLS_WRITE] if len(first) > MAX_TLS_WRITE else first
        run = [first]
        size = len(first)
        for buf in buffers[1:]:
            if len(buf) >= JOIN_BELOW or size + len(buf) > MAX_TLS_WRITE:
                break
            run.append(buf)
            size += len(buf)
        return b"".join(run) if len(run) > 1 else first

    def _write(self, buffers: list[Any]) -> int:
        """Write the head of ``buffers``; returns the bytes written or raises BlockingIOError."""
        chunk = self._pending if self._pending is not None else self._chunk(buffers)
        try:
            sent = self.ssl_sock.send(chunk)  # type: ignore[union-attr]
        except (ssl.SSLWantWriteError, ssl.SSLWantReadError):
            self._pending = chunk
            raise BlockingIOError(errno.EAGAIN, "TLS write would block") from None
        except ssl.SSLError as exc:
            raise TlsError(f"SSL write failed: {describe_ssl_error(exc)}") from None
        self._pending = None
        return sent

    def _recv_into(self, buffer: memoryview) -> int:
        """Decrypt as many records as are ready into ``buffer``; BlockingIOError when none is."""
        sock = self.ssl_sock
        total = 0
        size = len(buffer)
        while total < size:
            try:
                got = sock.recv_into(buffer[total:])  # type: ignore[union-attr]
            except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
                if total:
                    return total
                raise BlockingIOError(errno.EAGAIN, "no TLS record ready") from None
            except ssl.SSLError as exc:
                raise TlsError(f"SSL read failed: {describe_ssl_error(exc)}") from None
            if not got:
                return total
            total += got
        return total

    def close(self) -> None:
        if self.ssl_sock is not None:
            self.ssl_sock.close()
        self.sock.close()


def numeric_address(host: str, port: int, family: int = socket.AF_UNSPEC) -> list[AddrInfo] | None:
    """Addresses of a numeric host (an IP literal) without any lookup, or None when ``host`` is a name. An
    IP literal of another family than ``family`` has no address: the empty list."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
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
