"""Runs in: broker actors (main host) and the blocking client. Owns the ApiVersions handshake rules that every
connection shares: the request we send, how an answer is read, and which version to retry with after a broker
refuses ours (KIP-511 brokers answer in the v0 layout; librdkafka's mock cluster writes the array count as one
raw byte)."""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

from kqactors import __version__
from kqactors.protocol.api import API_VERSIONS_KEY
from kqactors.protocol.errors import ProtocolError
from kqactors.protocol.generated.api_versions import ApiVersionsRequest, ApiVersionsResponse

CLIENT_SOFTWARE_NAME = "kqactors"
CLIENT_SOFTWARE_VERSION = __version__
UNSUPPORTED_VERSION = 35
_INT16 = struct.Struct(">h")
_API_RANGE = struct.Struct(">hhh")


def api_versions_request() -> ApiVersionsRequest:
    """The ApiVersions request body (the software name/version fields exist from v3 on)."""
    return ApiVersionsRequest(client_software_name=CLIENT_SOFTWARE_NAME,
                              client_software_version=CLIENT_SOFTWARE_VERSION)


@dataclass(frozen=True)
class ApiVersionsAnswer:
    """What an ApiVersions answer means: a usable response, a version to retry with, or a broker error."""

    error_code: int
    response: ApiVersionsResponse | None = None
    retry_version: int | None = None


def read_api_versions(payload: Any, pos: int, version: int) -> ApiVersionsAnswer:
    """Read an ApiVersions response body sent for a request at ``version``; raises ProtocolError if malformed.

    Only the error code is trusted when it is non-zero: the rest of such a body need not follow ``version``.
    """
    view = payload if type(payload) is memoryview else memoryview(payload)
    if len(view) - pos < 2:
        raise ProtocolError("ApiVersions response has no error code")
    (error_code,) = _INT16.unpack_from(view, pos)
    if error_code == UNSUPPORTED_VERSION and version > 0:
        retry = min(version - 1, advertised_api_versions_max(view, pos, version) or 0)
        return ApiVersionsAnswer(error_code, retry_version=retry)
    if error_code:
        return ApiVersionsAnswer(error_code)
    response = ApiVersionsResponse.decode_from(view, pos, version)[0]
    return ApiVersionsAnswer(error_code, response=response)


def advertised_api_versions_max(payload: memoryview, pos: int, tried: int) -> int | None:
    """The broker's highest ApiVersions version below ``tried`` from an UNSUPPORTED_VERSION answer, if readable.

    A Kafka broker answers in the v0 layout (int32 array count); librdkafka's mock cluster writes the count as a
    single raw byte followed by v0-layout entries. Both are accepted.
    """
    try:
        response = ApiVersionsResponse.decode_from(payload, pos, 0)[0]
        entries = [(e.api_key, e.max_version) for e in response.api_keys]
    except ProtocolError:
        entries = []
        count_pos = pos + 2
        if count_pos < len(payload):
            count = payload[count_pos]
            if count_pos + 1 + _API_RANGE.size * count <= len(payload):
                for i in range(count):
                    key, _low, high = _API_RANGE.unpack_from(payload, count_pos + 1 + _API_RANGE.size * i)
                    entries.append((key, high))
    for key, high in entries:
        if key == API_VERSIONS_KEY and 0 <= high < tried:
            return high
    return None
