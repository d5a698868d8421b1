"""A TCP proxy in front of a one-broker cluster that makes the broker's responses ask for throttling.

Runs in: the test process (threads). Neither the librdkafka mock cluster nor Tansu can be made to throttle a
client (no quotas), so tests put this proxy between the client and a real broker: every response passes
through unchanged except that ``throttle_time_ms`` is set to ``proxy.throttle_ms`` in the responses of the
chosen APIs (Produce, Fetch, ... by api key), and Metadata responses name the proxy as the broker so the
client's broker connection goes through it too. Requests are forwarded untouched; their api key and version,
by correlation id, say how each response is read.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable

from kqactors.protocol.api import decode_response_header
from kqactors.protocol.generated.metadata import MetadataResponse
from kqactors.protocol.generated.produce import ProduceResponse
from support.frame_proxy import FrameProxy

_SIZE = struct.Struct(">i")
_REQUEST_HEADER = struct.Struct(">hhi")
PRODUCE, FETCH, METADATA = 0, 1, 3
# api key → first version whose response starts with throttle_time_ms (the ones these tests throttle)
_FIRST_FIELD_FROM = {FETCH: 1, METADATA: 3, 2: 2, 8: 3, 9: 3, 10: 1, 12: 1, 22: 0}


class ThrottlingProxy(FrameProxy):
    """``ThrottlingProxy(upstream_bootstrap, apis).start()``; ``bootstrap`` is the address clients use."""

    name = "throttle-proxy"

    def __init__(self, upstream: str, apis: Iterable[int] = (PRODUCE, FETCH), throttle_ms: int = 0) -> None:
        super().__init__(upstream)
        self.apis = set(apis)
        self.throttle_ms = throttle_ms
        self.throttled = 0  # responses rewritten with a non-zero throttle time

    def on_request(self, frame: bytes) -> tuple[bytes, int, tuple[int, int]]:
        api_key, version, corr_id = _REQUEST_HEADER.unpack_from(frame, 0)
        return frame, corr_id, (api_key, version)

    def on_response(self, frame: bytes, context: tuple[int, int] | None) -> bytes:
        return frame if context is None else self._rewrite(frame, *context)

    def _rewrite(self, frame: bytes, api_key: int, version: int) -> bytes:
        if api_key not in self.apis and api_key != METADATA:
            return frame  # passed through as it came (also APIs the codec does not know)
        _, offset = decode_response_header(memoryview(frame), api_key, version)
        header, body = frame[:offset], frame[offset:]
        if api_key == METADATA:
            response = MetadataResponse.decode(body, version)
            self.point_brokers_here(response)
            if api_key in self.apis and version >= 3:
                response.throttle_time_ms = self.throttle_ms
                self._count()
            return header + response.encode(version)
        if api_key not in self.apis:
            return frame
        if api_key == PRODUCE and version >= 1:
            response = ProduceResponse.decode(body, version)
            response.throttle_time_ms = self.throttle_ms
            self._count()
            return header + response.encode(version)
        first_from = _FIRST_FIELD_FROM.get(api_key)
        if first_from is not None and version >= first_from:
            self._count()
            return header + _SIZE.pack(self.throttle_ms) + body[4:]
        return frame

    def _count(self) -> None:
        if self.throttle_ms:
            self.throttled += 1
