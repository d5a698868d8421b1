"""A tiny raw ApiVersions v0 probe, to tell when a freshly started broker is ready.

Runs in: the test (or CLI) process. Owns nothing but a socket for the duration of one probe; it is
deliberately independent of ``kqactors.protocol`` so the fixtures work while the codec is being built.

ApiVersions v0 is the one request every Kafka broker (and the librdkafka mock cluster) answers at any
version range: request header v1 (api_key, api_version, correlation_id, client_id) with an empty body;
the response is correlation_id, error_code and an array of (api_key, min_version, max_version).
"""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Callable

__all__ = ["ApiVersionsError", "api_versions", "wait_until_ready"]

_API_VERSIONS_KEY = 18
_CLIENT_ID = b"kqactors-probe"


class ApiVersionsError(ConnectionError):
    """The broker closed the connection, answered garbage or answered with an error code."""


def _recv_exact(sock: socket.socket, count: int) -> bytes:
    chunks = bytearray()
    while len(chunks) < count:
        chunk = sock.recv(count - len(chunks))
        if not chunk:
            raise ApiVersionsError("connection closed by the broker before the response was complete")
        chunks += chunk
    return bytes(chunks)


def _encode_request(correlation_id: int) -> bytes:
    body = struct.pack(">hhih", _API_VERSIONS_KEY, 0, correlation_id, len(_CLIENT_ID)) + _CLIENT_ID
    return struct.pack(">i", len(body)) + body


def _decode_response(payload: bytes, correlation_id: int) -> dict[int, tuple[int, int]]:
    if len(payload) < 10:
        raise ApiVersionsError(f"ApiVersions response too short ({len(payload)} bytes)")
    got_correlation, error_code, count = struct.unpack_from(">ihi", payload, 0)
    if got_correlation != correlation_id:
        raise ApiVersionsError(f"correlation id mismatch: sent {correlation_id}, got {got_correlation}")
    if error_code != 0:
        raise ApiVersionsError(f"ApiVersions answered error code {error_code}")
    if count < 0 or len(payload) < 10 + 6 * count:
        raise ApiVersionsError(f"ApiVersions response truncated (claims {count} entries)")
    ranges: dict[int, tuple[int, int]] = {}
    for index in range(count):
        api_key, min_version, max_version = struct.unpack_from(">hhh", payload, 10 + 6 * index)
        ranges[api_key] = (min_version, max_version)
    return ranges


def api_versions(host: str, port: int, timeout: float = 2.0) -> dict[int, tuple[int, int]]:
    """Send one ApiVersions v0 request; return {api_key: (min_version, max_version)}.

    Raises OSError (connection refused/timeout) or ApiVersionsError (bad or error response).
    """
    correlation_id = int(time.monotonic_ns() & 0x7FFFFFFF)
    with socket.create_connection((host, port), timeout=timeout) as sock:
        sock.sendall(_encode_request(correlation_id))
        (size,) = struct.unpack(">i", _recv_exact(sock, 4))
        if size < 0 or size > 1 << 20:
            raise ApiVersionsError(f"implausible response size {size}")
        return _decode_response(_recv_exact(sock, size), correlation_id)


def wait_until_ready(
    host: str,
    port: int,
    timeout: float,
    still_running: Callable[[], bool] = lambda: True,
) -> dict[int, tuple[int, int]]:
    """Probe until the broker answers ApiVersions; give up when ``still_running`` turns False or time ends.

    Raises TimeoutError (with the last probe failure) or RuntimeError if the process exited.
    """
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while True:
        if not still_running():
            raise RuntimeError(f"broker process exited before answering ApiVersions (last: {last_error})")
        try:
            return api_versions(host, port, timeout=min(2.0, max(0.1, deadline - time.monotonic())))
        except (OSError, ApiVersionsError) as exc:
            last_error = exc
        if time.monotonic() >= deadline:
            raise TimeoutError(f"{host}:{port} did not answer ApiVersions within {timeout}s: {last_error}")
        time.sleep(0.05)
