"""Runs in: any process. Owns the exceptions raised by the wire codec.

Decoding problems are KafkaExceptions carrying ``_BAD_MSG`` (librdkafka's code for an unparsable
message); asking for a version the codec (or broker) does not support carries ``_UNSUPPORTED_FEATURE`` or
``UNSUPPORTED_VERSION``. Encoding bad values raises :class:`EncodeError`, which is both a ValueError and
a TypeError so callers can treat it like either.
"""

from __future__ import annotations

from kqactors.errors import KafkaError, KafkaException


class ProtocolError(KafkaException):
    """A response (or request) could not be parsed: truncated, corrupt or not what was expected."""

    def __init__(self, reason: str) -> None:
        super().__init__(KafkaError(KafkaError._BAD_MSG, reason))

    def __str__(self) -> str:
        return self.error.str()


class UnsupportedVersionError(KafkaException):
    """The API or version is outside what the codec (or the broker) supports."""

    def __init__(self, reason: str, code: int = KafkaError._UNSUPPORTED_FEATURE) -> None:
        super().__init__(KafkaError(code, reason))

    def __str__(self) -> str:
        return self.error.str()


class EncodeError(ValueError, TypeError):
    """A field value cannot be encoded (wrong type, out of range, or lost in the chosen version)."""
