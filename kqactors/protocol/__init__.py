"""Runs in: any process. The Kafka wire codec: primitives, generated per-API messages, framing.

Entry points: :func:`encode_request` / :func:`encode_request_chunks` to frame requests,
:func:`decode_response` / :func:`decode_response_header` for responses, :func:`api_info` for the
api key ↔ name ↔ classes registry, :data:`CLIENT_VERSIONS` and :func:`negotiate` for versions, and
``kqactors.protocol.blocking.BlockingConnection`` for simple synchronous use. Message classes live in
``kqactors.protocol.generated.<api>`` (e.g. ``generated.metadata.MetadataRequest``).
"""

from kqactors.protocol.api import (
    API_KEYS,
    CLIENT_VERSIONS,
    ApiInfo,
    NegotiatedVersions,
    api_info,
    api_name,
    decode_request,
    decode_request_header,
    decode_response,
    decode_response_header,
    encode_request,
    encode_request_chunks,
    negotiate,
    request_header_version,
    response_header_version,
)
from kqactors.protocol.base import Message, Struct
from kqactors.protocol.errors import EncodeError, ProtocolError, UnsupportedVersionError

__all__ = [
    "API_KEYS", "CLIENT_VERSIONS", "ApiInfo", "EncodeError", "Message", "NegotiatedVersions", "ProtocolError",
    "Struct", "UnsupportedVersionError", "api_info", "api_name", "decode_request", "decode_request_header",
    "decode_response", "decode_response_header", "encode_request", "encode_request_chunks", "negotiate",
    "request_header_version", "response_header_version",
]
