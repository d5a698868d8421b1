"""Runs in: any process. Owns the base classes of the generated message and struct classes.

Generated classes subclass :class:`Struct` (nested structs) or :class:`Message` (top-level requests,
responses, headers and consumer-protocol payloads). The per-version ``_WRITERS``/``_READERS`` tables
hold straight-line functions emitted by :mod:`kqactors.protocol.codegen`; this module only adds the
entry points, error translation, equality and repr.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any, ClassVar, NamedTuple, TypeVar

from kqactors.protocol.errors import EncodeError, ProtocolError, UnsupportedVersionError
from kqactors.protocol.primitives import ChunkedWriter, TruncatedError

M = TypeVar("M", bound="Message")

# Everything a malformed buffer can raise inside a generated reader.
_DECODE_ERRORS = (struct.error, IndexError, ValueError, TruncatedError, TypeError, OverflowError, KeyError)
_ENCODE_ERRORS = (struct.error, TypeError, AttributeError, ValueError, OverflowError)

ANY_VERSION = (0, 0x7FFF)


class _Unset:
    """Sentinel for "use a fresh default" in generated __init__ signatures (lists, structs)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "UNSET"


UNSET = _Unset()


class FieldSchema(NamedTuple):
    """Schema of one field, kept on each generated class for introspection and test strategies."""

    name: str  # snake_case attribute name
    type: str  # spec type: int32, string, []int32, []SomeStruct, SomeStruct, records, ...
    versions: tuple[int, int] | None  # inclusive range the field is present in (None: never)
    nullable: tuple[int, int] | None
    tagged: tuple[int, int] | None
    tag: int | None
    struct: Any  # generated class for struct / struct-array fields, else None
    ignorable: bool
    default: Any  # default value (for struct fields: None when the default is an empty struct)


def in_range(version: int, span: tuple[int, int] | None) -> bool:
    return span is not None and span[0] <= version <= span[1]


class Struct:
    """Base of every generated class: slots, field-wise equality, readable repr."""

    __slots__ = ("_unknown_tags",)
    _FIELDS: ClassVar[tuple[str, ...]] = ()
    _SCHEMA: ClassVar[tuple[FieldSchema, ...]] = ()

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        for name in self._FIELDS:
            if getattr(self, name) != getattr(other, name):
                return False
        return True

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __repr__(self) -> str:
        parts = ", ".join(f"{name}={getattr(self, name)!r}" for name in self._FIELDS)
        return f"{type(self).__name__}({parts})"

    @property
    def unknown_tagged_fields(self) -> dict[int, bytes] | None:
        """Tagged fields this codec did not recognise ({tag: raw bytes}); re-encoded unchanged."""
        return self._unknown_tags

    def to_dict(self) -> dict[str, Any]:
        """Plain nested dict/list form (record sets and memoryviews become bytes)."""
        return {name: _plain(getattr(self, name)) for name in self._FIELDS}


def _plain(value: Any) -> Any:
    if isinstance(value, Struct):
        return value.to_dict()
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, memoryview):
        return bytes(value)
    return value


class Message(Struct):
    """A top-level message with per-version encoders and decoders."""

    __slots__ = ()
    API_KEY: ClassVar[int] = -1
    MESSAGE_TYPE: ClassVar[str] = ""  # request, response, header or data
    VALID_VERSIONS: ClassVar[tuple[int, int]] = (0, 0)
    FLEXIBLE_VERSIONS: ClassVar[tuple[int, int] | None] = None
    _WRITERS: ClassVar[dict[int, Callable[[Any, bytearray], None]]] = {}
    _READERS: ClassVar[dict[int, Callable[[memoryview, int], tuple[Any, int]]]] = {}

    @classmethod
    def is_flexible(cls, version: int) -> bool:
        return in_range(version, cls.FLEXIBLE_VERSIONS)

    def encode_into(self, out: bytearray, version: int) -> None:
        """Append the encoding of this message at ``version`` to ``out``."""
        writer = self._WRITERS.get(version)
        if writer is None:
            raise UnsupportedVersionError(
                f"{type(self).__name__} has no version {version} (valid {self.VALID_VERSIONS[0]}"
                f"-{self.VALID_VERSIONS[1]})")
        try:
            writer(self, out)
        except EncodeError as exc:
            raise EncodeError(f"cannot encode {type(self).__name__} v{version}: {exc}") from exc
        except _ENCODE_ERRORS as exc:
            raise EncodeError(f"cannot encode {type(self).__name__} v{version}: {exc}") from exc

    def encode(self, version: int) -> bytes:
        out = bytearray()
        self.encode_into(out, version)
        return bytes(out)

    def encode_chunks(self, version: int) -> list[Any]:
        """Encode as a list of buffers; large record sets are included by reference, not copied."""
        out = ChunkedWriter()
        self.encode_into(out, version)
        return out.finish()

    @classmethod
    def decode_from(cls: type[M], buf: Any, pos: int, version: int) -> tuple[M, int]:
        """Decode at ``pos`` of ``buf``; returns the message and the offset just past it."""
        reader = cls._READERS.get(version)
        if reader is None:
            raise UnsupportedVersionError(
                f"{cls.__name__} has no version {version} (valid {cls.VALID_VERSIONS[0]}"
                f"-{cls.VALID_VERSIONS[1]})")
        view = buf if type(buf) is memoryview else memoryview(buf)
        try:
            return reader(view, pos)
        except _DECODE_ERRORS as exc:
            raise ProtocolError(
                f"malformed {cls.__name__} v{version} at offset {pos} ({len(view)} bytes): "
                f"{type(exc).__name__}: {exc}") from exc

    @classmethod
    def decode(cls: type[M], buf: Any, version: int) -> M:
        return cls.decode_from(buf, 0, version)[0]


class VersionedData(Message):
    """Consumer-protocol payloads: an int16 version prefix, then the body at that version."""

    __slots__ = ()

    def encode_versioned(self, version: int) -> bytes:
        out = bytearray(struct.pack(">h", version))
        self.encode_into(out, version)
        return bytes(out)

    @classmethod
    def decode_versioned(cls: type[M], buf: Any) -> tuple[M, int]:
        """Decode a version-prefixed payload; newer versions are read as our newest (fields only append)."""
        view = buf if type(buf) is memoryview else memoryview(buf)
        if len(view) < 2:
            raise ProtocolError(f"{cls.__name__}: payload of {len(view)} bytes has no version prefix")
        (version,) = struct.unpack_from(">h", view, 0)
        if version < cls.VALID_VERSIONS[0]:
            raise ProtocolError(f"{cls.__name__}: invalid version {version}")
        readable = min(version, cls.VALID_VERSIONS[1])
        return cls.decode_from(view, 2, readable)[0], version
