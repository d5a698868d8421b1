"""Runs in: any process (broker actors on the hot path). Owns request framing, the API registry and
version negotiation.

Framing follows the protocol guide: a request is ``int32 size`` + request header + body, where the
header is v2 (compact, tagged fields) for flexible request versions and v1 otherwise; a response is
``int32 size`` + response header + body, with header v1 for flexible versions and v0 otherwise — except
ApiVersions, whose response header is always v0 so that a client can parse it whatever version it sent.
"""

from __future__ import annotations

import importlib
import struct
from typing import Any, NamedTuple

from kqactors.errors import KafkaError
from kqactors.protocol.base import Message
from kqactors.protocol.errors import ProtocolError, UnsupportedVersionError
from kqactors.protocol.generated import API_TABLE
from kqactors.protocol.primitives import ChunkedWriter, read_unknown_tags

_SIZE = struct.Struct(">i")
_HEADER_FIXED = struct.Struct(">hhi")  # api key, api version, correlation id
_CORRELATION = struct.Struct(">i")
API_VERSIONS_KEY = 18
# ControlledShutdown v0 used a request header without client id; we never send it, but keep the rule.
_CONTROLLED_SHUTDOWN_KEY = 7


class ApiInfo(NamedTuple):
    key: int
    name: str
    request: type[Message]
    response: type[Message]
    min_version: int
    max_version: int
    first_flexible: int | None


_API_CACHE: dict[int, ApiInfo] = {}
API_KEYS: dict[str, int] = {entry[0]: key for key, entry in API_TABLE.items()}
"""API name (e.g. "Metadata") → api key."""

CLIENT_VERSIONS: dict[int, tuple[int, int]] = {key: entry[4] for key, entry in API_TABLE.items()}
"""The client's supported (min, max) version per api key: every version in the specs."""


def api_info(api: int | str) -> ApiInfo:
    """Registry lookup by api key or name; imports the generated module on first use."""
    key = API_KEYS.get(api) if isinstance(api, str) else api
    info = _API_CACHE.get(key) if key is not None else None
    if info is not None:
        return info
    entry = API_TABLE.get(key) if key is not None else None
    if entry is None:
        raise UnsupportedVersionError(f"unknown or unsupported API {api!r}")
    name, module_name, request_name, response_name, valid, first_flexible = entry
    module = importlib.import_module(f"kqactors.protocol.generated.{module_name}")
    info = ApiInfo(key, name, getattr(module, request_name), getattr(module, response_name), valid[0], valid[1],
                   first_flexible)
    _API_CACHE[key] = info
    return info


def api_name(api_key: int) -> str:
    entry = API_TABLE.get(api_key)
    return entry[0] if entry else f"Unknown-{api_key}"


def is_flexible(api_key: int, version: int) -> bool:
    first = API_TABLE[api_key][5]
    return first is not None and version >= first


def request_header_version(api_key: int, version: int) -> int:
    if is_flexible(api_key, version):
        return 2
    if api_key == _CONTROLLED_SHUTDOWN_KEY and version == 0:
        return 0
    return 1


def response_header_version(api_key: int, version: int) -> int:
    if api_key == API_VERSIONS_KEY:
        return 0
    return 1 if is_flexible(api_key, version) else 0


def _write_request_header(out: bytearray, api_key: int, version: int, correlation_id: int,
                          client_id: str | None) -> None:
    out += _HEADER_FIXED.pack(api_key, version, correlation_id)
    header_version = request_header_version(api_key, version)
    if header_version >= 1:
        if client_id is None:
            out += b"\xff\xff"
        else:
            data = client_id.encode()
            out += struct.pack(">h", len(data))
            out += data
    if header_version >= 2:
        out.append(0)  # no tagged fields


def encode_request_header(api_key: int, version: int, correlation_id: int, client_id: str | None) -> bytes:
    """The request header alone (v0–v2 as the API and version need), for callers that frame bodies themselves."""
    out = bytearray()
    _write_request_header(out, api_key, version, correlation_id, client_id)
    return bytes(out)


def encode_request_chunks(api_key: int, version: int, correlation_id: int, client_id: str | None,
                          body: Message) -> list[Any]:
    """Frame a request as a list of buffers (size prefix first); large record sets are not copied.

    Suitable for ``socket.sendmsg`` or a zmq multipart send.
    """
    out = ChunkedWriter()
    out += b"\0\0\0\0"  # size placeholder, patched below
    _write_request_header(out, api_key, version, correlation_id, client_id)
    body.encode_into(out, version)
    chunks = out.finish()
    size = sum(c.nbytes if isinstance(c, memoryview) else len(c) for c in chunks) - 4
    first = chunks[0]
    chunks[0] = _SIZE.pack(size) + first[4:]
    return chunks


def encode_request(api_key: int, version: int, correlation_id: int, client_id: str | None,
                   body: Message) -> bytes:
    """Frame a request as one bytes object including the 4-byte size prefix."""
    out = bytearray(b"\0\0\0\0")
    _write_request_header(out, api_key, version, correlation_id, client_id)
    body.encode_into(out, version)
    _SIZE.pack_into(out, 0, len(out) - 4)
    return bytes(out)


def decode_request_header(buf: Any) -> tuple[int, int, int, str | None, int]:
    """Parse a request header (no size prefix): (api key, version, correlation id, client id, body offset)."""
    view = memoryview(buf)
    try:
        api_key, version, correlation_id = _HEADER_FIXED.unpack_from(view, 0)
        pos = _HEADER_FIXED.size
        client_id = None
        header_version = request_header_version(api_key, version) if api_key in API_TABLE else 1
        if header_version >= 1:
            (length,) = struct.unpack_from(">h", view, pos)
            pos += 2
            if length >= 0:
                if pos + length > len(view):
                    raise ValueError("client id runs past the end")
                client_id = str(view[pos:pos + length], "utf-8")
                pos += length
        if header_version >= 2:
            _, pos = read_unknown_tags(view, pos)
    except (struct.error, IndexError, ValueError) as exc:
        raise ProtocolError(f"malformed request header: {exc}") from exc
    return api_key, version, correlation_id, client_id, pos


def decode_response_header(buf: Any, api_key: int, version: int) -> tuple[int, int]:
    """Parse a response header (no size prefix); returns (correlation id, offset of the body)."""
    view = buf if type(buf) is memoryview else memoryview(buf)
    try:
        (correlation_id,) = _CORRELATION.unpack_from(view, 0)
        pos = 4
        if response_header_version(api_key, version) >= 1:
            _, pos = read_unknown_tags(view, pos)
    except (struct.error, IndexError, ValueError) as exc:
        raise ProtocolError(f"malformed response header ({len(view)} bytes): {exc}") from exc
    return correlation_id, pos


def decode_response(buf: Any, api_key: int, version: int) -> tuple[int, Message]:
    """Parse a whole response frame without its size prefix: (correlation id, response body)."""
    view = buf if type(buf) is memoryview else memoryview(buf)
    correlation_id, pos = decode_response_header(view, api_key, version)
    body, _ = api_info(api_key).response.decode_from(view, pos, version)
    return correlation_id, body


def decode_request(buf: Any) -> tuple[int, int, int, str | None, Message]:
    """Parse a whole request frame without its size prefix (used by tests and tools)."""
    view = memoryview(buf)
    api_key, version, correlation_id, client_id, pos = decode_request_header(view)
    body, _ = api_info(api_key).request.decode_from(view, pos, version)
    return api_key, version, correlation_id, client_id, body


# --- negotiation ---------------------------------------------------------------------------------------

class NegotiatedVersions(dict):
    """{api key: version to use} for every API both sides support.

    ``unsupported`` maps each client API the broker cannot serve to a reason; ``version_for`` raises a
    KafkaException(UNSUPPORTED_VERSION) for those, so callers cannot silently pick a bad version. ``broker``
    keeps the broker's own ranges, so ``pick`` can answer for a narrower client range (two request kinds may
    share an API with different ranges, e.g. OffsetCommit for the classic and the KIP-848 group).
    """

    def __init__(self, versions: dict[int, int], unsupported: dict[int, str],
                 broker: dict[int, tuple[int, int]] | None = None) -> None:
        super().__init__(versions)
        self.unsupported = unsupported
        self.broker = broker or {}

    def version_for(self, api: int | str) -> int:
        key = API_KEYS.get(api, -1) if isinstance(api, str) else api
        version = self.get(key)
        if version is None:
            reason = self.unsupported.get(key, "not offered by the broker")
            raise UnsupportedVersionError(f"{api_name(key)} (api key {key}): {reason}",
                                          code=KafkaError.UNSUPPORTED_VERSION)
        return version

    def pick(self, api_key: int, client_min: int, client_max: int) -> int | None:
        """Highest version in ``client_min..client_max`` the broker offers for ``api_key``, or None."""
        broker = self.broker.get(api_key)
        return None if broker is None else common_version(client_min, client_max, broker[0], broker[1])


def common_version(client_min: int, client_max: int, broker_min: int, broker_max: int) -> int | None:
    """The one negotiation rule: the highest version inside both ranges, or None when they do not meet."""
    version = min(client_max, broker_max)
    return version if version >= max(client_min, broker_min) else None


def broker_ranges(broker_api_versions: Any) -> dict[int, tuple[int, int]]:
    """{api key: (min, max)} from an ApiVersionsResponse, its ApiVersion entries, tuples or a dict."""
    if isinstance(broker_api_versions, dict):
        return {int(k): (int(v[0]), int(v[1])) for k, v in broker_api_versions.items()}
    entries = getattr(broker_api_versions, "api_keys", broker_api_versions)
    ranges = {}
    for entry in entries:
        if isinstance(entry, tuple | list):
            key, low, high = entry
        else:
            key, low, high = entry.api_key, entry.min_version, entry.max_version
        ranges[int(key)] = (int(low), int(high))
    return ranges


def negotiate(broker_api_versions: Any,
              client_versions: dict[int, tuple[int, int]] | None = None) -> NegotiatedVersions:
    """Pick, per API, the highest version both the client and the broker support.

    ``broker_api_versions`` may be an ApiVersionsResponse, a list of its ApiVersion entries or
    ``(key, min, max)`` tuples, or a ``{key: (min, max)}`` dict. ``client_versions`` defaults to
    CLIENT_VERSIONS (every version in the specs); broker connections pass the ranges of the request table
    (``kqactors.protocol.requests.client_versions()``).
    """
    client = CLIENT_VERSIONS if client_versions is None else client_versions
    broker = broker_ranges(broker_api_versions)
    chosen: dict[int, int] = {}
    unsupported: dict[int, str] = {}
    for key, (client_min, client_max) in client.items():
        if key not in broker:
            unsupported[key] = "not offered by the broker"
            continue
        broker_min, broker_max = broker[key]
        version = common_version(client_min, client_max, broker_min, broker_max)
        if version is None:
            unsupported[key] = (f"no common version (client {client_min}-{client_max}, "
                                f"broker {broker_min}-{broker_max})")
            continue
        chosen[key] = version
    return NegotiatedVersions(chosen, unsupported, broker)
