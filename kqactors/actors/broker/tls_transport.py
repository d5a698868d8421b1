"""Runs in: the main host, inside broker/N actors with security.protocol ssl / sasl_ssl (imported by
``security.py`` only then, so a plaintext client never loads ``ssl``). Owns ``TlsTransport``.

``needs_handshake`` makes the connection pass through SSL_HANDSHAKE, where the actor drives ``handshake()`` on
socket events until it returns True; OpenSSL's want-read / want-write become the loop's fd interest
(``wants_write_for_handshake``). ssl.SSLSocket has no sendmsg, so ``write`` joins runs of small buffers
(request headers, small bodies) into one TLS write and hands large ones (spliced record batches) to OpenSSL
as memoryview slices, never copied on the Python side. A write OpenSSL could not finish is retried with the
very same chunk, as OpenSSL requires.
"""

from __future__ import annotations

import errno
import ssl
from typing import Any

from kqactors.actors.broker.transport import AddrInfo, PlainTransport, TlsError

JOIN_BELOW = 16 * 1024
"""Buffers smaller than this are joined with their neighbours into one TLS write (one record, one syscall)."""
MAX_TLS_WRITE = 256 * 1024
"""The largest chunk handed to one SSLSocket.send (a slice of a large buffer, not a copy)."""


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
