"""Runs in: tests, the CLI and test fixtures (never the hot path). Owns one blocking broker connection.

``BlockingConnection`` sends one request at a time and waits for its response: enough for creating
topics, probing readiness and protocol tests. Versions are negotiated from ApiVersions on first use.
"""

from __future__ import annotations

import socket
import struct
from typing import Any

from kqactors.errors import KafkaError, KafkaException
from kqactors.protocol.api import (
    API_VERSIONS_KEY,
    CLIENT_VERSIONS,
    NegotiatedVersions,
    api_info,
    decode_response_header,
    encode_request,
    negotiate,
)
from kqactors.protocol.base import Message
from kqactors.protocol.errors import ProtocolError
from kqactors.protocol.generated.api_versions import ApiVersionsResponse
from kqactors.protocol.handshake import api_versions_request, read_api_versions

_SIZE = struct.Struct(">i")
MAX_RESPONSE_BYTES = 256 * 1024 * 1024


class BlockingConnection:
    """A plain TCP connection to one broker that speaks request/response synchronously."""

    def __init__(self, host: str, port: int, client_id: str | None = "kqactors", timeout: float = 10.0) -> None:
        self.host = host
        self.port = int(port)
        self.client_id = client_id
        self.timeout = timeout
        self._correlation_id = 0
        self._versions: NegotiatedVersions | None = None
        self.api_versions_response: ApiVersionsResponse | None = None
        try:
            self._sock: socket.socket | None = socket.create_connection((host, self.port), timeout=timeout)
        except OSError as exc:
            raise KafkaException(KafkaError(KafkaError._TRANSPORT, f"connect to {host}:{port} failed: {exc}")) \
                from exc
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    @classmethod
    def from_bootstrap(cls, bootstrap: str, **kwargs: Any) -> BlockingConnection:
        """Connect to the first ``host:port`` of a bootstrap string."""
        first = bootstrap.split(",")[0].strip()
        host, _, port = first.rpartition(":")
        return cls(host or "127.0.0.1", int(port), **kwargs)

    # -- context manager ------------------------------------------------------------------------------
    def __enter__(self) -> BlockingConnection:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    # -- raw I/O --------------------------------------------------------------------------------------
    def _recv_exact(self, count: int) -> bytearray:
        assert self._sock is not None
        buf = bytearray(count)
        view = memoryview(buf)
        got = 0
        while got < count:
            try:
                n = self._sock.recv_into(view[got:], count - got)
            except TimeoutError as exc:
                raise KafkaException(KafkaError(KafkaError._TIMED_OUT, f"no response within {self.timeout}s")) \
                    from exc
            except OSError as exc:
                raise KafkaException(KafkaError(KafkaError._TRANSPORT, f"receive failed: {exc}")) from exc
            if n == 0:
                self.close()
                raise KafkaException(KafkaError(KafkaError._TRANSPORT, "connection closed by the broker"))
            got += n
        return buf

    def _roundtrip(self, api_key: int, version: int, body: Message) -> tuple[memoryview, int]:
        """Send a request and return (response frame without size prefix, body offset)."""
        if self._sock is None:
            raise KafkaException(KafkaError(KafkaError._TRANSPORT, "connection is closed"))
        self._correlation_id += 1
        correlation_id = self._correlation_id
        frame = encode_request(api_key, version, correlation_id, self.client_id, body)
        try:
            self._sock.sendall(frame)
        except OSError as exc:
            self.close()
            raise KafkaException(KafkaError(KafkaError._TRANSPORT, f"send failed: {exc}")) from exc
        (size,) = _SIZE.unpack(self._recv_exact(4))
        if size < 4 or size > MAX_RESPONSE_BYTES:
            self.close()
            raise ProtocolError(f"invalid response size {size}")
        payload = memoryview(self._recv_exact(size))
        got, pos = decode_response_header(payload, api_key, version)
        if got != correlation_id:
            self.close()
            raise ProtocolError(f"correlation id mismatch: sent {correlation_id}, got {got}")
        return payload, pos

    def request_at(self, api_key: int, version: int, body: Message) -> Message:
        """Send ``body`` at an explicit version and return the decoded response."""
        payload, pos = self._roundtrip(api_key, version, body)
        response, _ = api_info(api_key).response.decode_from(payload, pos, version)
        return response

    # -- API ------------------------------------------------------------------------------------------
    def api_versions(self) -> ApiVersionsResponse:
        """Run ApiVersions (newest version first, falling back as librdkafka does) and negotiate."""
        version = CLIENT_VERSIONS[API_VERSIONS_KEY][1]
        request = api_versions_request()
        while True:
            payload, pos = self._roundtrip(API_VERSIONS_KEY, version, request)
            answer = read_api_versions(payload, pos, version)
            if answer.retry_version is not None:
                version = answer.retry_version
                continue
            if answer.response is None:
                raise KafkaException(KafkaError(answer.error_code, "ApiVersions failed"))
            self.api_versions_response = answer.response
            self._versions = negotiate(answer.response)
            return answer.response

    @property
    def versions(self) -> NegotiatedVersions:
        if self._versions is None:
            self.api_versions()
        assert self._versions is not None
        return self._versions

    def request(self, api: int | str, body: Message, version: int | None = None) -> Message:
        """Send ``body`` at the negotiated version (or ``version``) and return the decoded response."""
        info = api_info(api)
        if not isinstance(body, info.request):
            raise TypeError(f"{info.name} needs a {info.request.__name__}, got {type(body).__name__}")
        if version is None:
            version = self.versions.version_for(info.key)
        return self.request_at(info.key, version, body)
