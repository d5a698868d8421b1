"""Runs in: any process that encodes or decodes record batches (toppar hosts, broker actors, tests).

Owns the error types raised by the record codec. They subclass ValueError so callers that do not know
kqactors' error model still get a sensible exception, and they carry the librdkafka error code
(``_BAD_MSG`` / ``_BAD_COMPRESSION``) so the actor layer can turn them into KafkaError without guessing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kqactors.errors import KafkaError

#: librdkafka RD_KAFKA_RESP_ERR__BAD_MSG: a received message or batch is malformed.
ERR__BAD_MSG = -199
#: librdkafka RD_KAFKA_RESP_ERR__BAD_COMPRESSION: a payload could not be (de)compressed.
ERR__BAD_COMPRESSION = -198


class CorruptRecordError(ValueError):
    """A record batch or legacy message set is malformed (bad CRC, truncation, bad magic, bad varint...)."""

    code: int = ERR__BAD_MSG

    def __init__(self, message: str, *, offset: int | None = None) -> None:
        if offset is not None:
            message = f"{message} (batch at offset {offset})"
        super().__init__(message)
        self.offset = offset

    def to_kafka_error(self) -> KafkaError:
        """This error as a KafkaError with the librdkafka code and this message as the reason."""
        from kqactors.errors import KafkaError  # lazy: kqactors.records does not depend on the rest

        return KafkaError(self.code, str(self))


class CompressionError(CorruptRecordError):
    """A payload uses an unknown codec or its compressed bytes cannot be decoded (or encoded)."""

    code: int = ERR__BAD_COMPRESSION
