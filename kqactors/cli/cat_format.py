"""kcat's text shapes for ``kqactors cat``: delimiters, ``-f`` format strings, ``-J`` envelopes, ``-L`` listings.

Runs in: the user's shell process (the cat command). Owns the bytes ``kqactors cat`` writes for a message or
a metadata answer, and the parsing of kcat's option values (delimiters, ``-o`` offsets, ``-Q`` specs), so an
operator's kcat pipelines (``-f '%k\\t%s\\n'``, ``jq`` on ``-J``) give the same output. Pure: no broker, no
client; messages are anything with confluent-kafka's Message accessors.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "CatUsageError", "unescape", "MessageFormatter", "compile_format", "default_format", "json_envelope",
    "OffsetSpec", "parse_offset", "parse_query", "metadata_text", "metadata_json", "parse_header",
]

TIMESTAMP_NOT_AVAILABLE = 0
TIMESTAMP_CREATE_TIME = 1
TIMESTAMP_LOG_APPEND_TIME = 2
_TSTYPE_NAMES = {TIMESTAMP_CREATE_TIME: "create", TIMESTAMP_LOG_APPEND_TIME: "logappend"}


class CatUsageError(ValueError):
    """A command line kcat would refuse (kcat prints the reason and exits 1)."""


def unescape(text: str) -> bytes:
    """kcat's backslash escapes in a delimiter or format string: ``\\n \\r \\t``, ``\\xHH``, ``\\NNN``
    (a C number: octal with a leading 0, else decimal); any other escaped character stands for itself."""
    raw = text.encode("utf-8", "surrogateescape")
    out = bytearray()
    i = 0
    while i < len(raw):
        char = raw[i]
        if char != 0x5C or i + 1 >= len(raw):  # not a backslash, or a trailing one
            out.append(char)
            i += 1
            continue
        i += 1
        code = chr(raw[i])
        if code in "tnr":
            out.append({"t": 9, "n": 10, "r": 13}[code])
            i += 1
        elif code == "x":
            j = i + 1
            while j < len(raw) and chr(raw[j]) in "0123456789abcdefABCDEF":
                j += 1
            out.append(int(raw[i + 1:j], 16) & 0xFF if j > i + 1 else 0)
            i = j
        elif code.isdigit():
            j = i
            while j < len(raw) and chr(raw[j]).isdigit():
                j += 1
            digits = raw[i:j].decode()
            value = int(digits, 8) if digits.startswith("0") and len(digits) > 1 and set(digits) <= set(
                "01234567") else int(digits)
            out.append(value & 0xFF)
            i = j
        else:
            out.append(raw[i])
            i += 1
    return bytes(out)


def _timestamp(message: Any) -> tuple[int, int]:
    kind, value = message.timestamp()
    return (kind, value) if kind != TIMESTAMP_NOT_AVAILABLE else (kind, -1)


def _headers_csv(message: Any, null: bytes) -> bytes:
    headers = message.headers() or []
    parts = []
    for name, value in headers:
        name_b = name.encode() if isinstance(name, str) else bytes(name)
        if value is None:
            value_b = b"NULL"
        else:
            value_b = value.encode() if isinstance(value, str) else bytes(value)
        parts.append(name_b + b"=" + value_b)
    return b",".join(parts)


def _as_bytes(value: Any) -> bytes | None:
    if value is None:
        return None
    return value.encode() if isinstance(value, str) else bytes(value)


def _token(letter: str, null: bytes) -> Callable[[Any], bytes]:
    """The renderer of one ``%<letter>`` token (kcat's set); unknown letters are a usage error."""
    def key(m: Any) -> bytes:
        return _as_bytes(m.key()) or null

    def value(m: Any) -> bytes:
        return _as_bytes(m.value()) or null

    def length(get: Callable[[Any], Any]) -> Callable[[Any], bytes]:
        return lambda m: str(-1 if get(m) is None else len(get(m))).encode()

    table: dict[str, Callable[[Any], bytes]] = {
        "s": value,
        "S": length(lambda m: m.value()),
        "R": lambda m: struct.pack(">i", -1 if m.value() is None else len(m.value())),
        "k": key,
        "K": length(lambda m: m.key()),
        "t": lambda m: m.topic().encode(),
        "p": lambda m: str(m.partition()).encode(),
        "o": lambda m: str(m.offset()).encode(),
        "T": lambda m: str(_timestamp(m)[1]).encode(),
        "h": lambda m: _headers_csv(m, null),
    }
    if letter not in table:
        raise CatUsageError(f"Unsupported formatter: %{letter}")
    return table[letter]


@dataclass(frozen=True)
class MessageFormatter:
    """A compiled ``-f`` format: literal byte runs and per-message renderers, in order."""

    parts: tuple[bytes | Callable[[Any], bytes], ...]

    def render(self, message: Any) -> bytes:
        return b"".join([part if type(part) is bytes else part(message) for part in self.parts])


def compile_format(fmt: str, null_str: bytes = b"") -> MessageFormatter:
    """Compile a kcat ``-f`` string: ``%s %S %R %k %K %t %p %o %T %h``, ``%%``, and backslash escapes in the
    literal text. ``null_str`` is printed for a NULL key or value (``-Z`` makes it ``NULL``)."""
    parts: list[bytes | Callable[[Any], bytes]] = []
    literal: list[str] = []
    i = 0
    while i < len(fmt):
        char = fmt[i]
        if char != "%":
            literal.append(char)
            i += 1
            continue
        if i + 1 >= len(fmt):
            raise CatUsageError("Empty formatter")
        letter = fmt[i + 1]
        i += 2
        if letter == "%":
            literal.append("%")
            continue
        if literal:
            parts.append(unescape("".join(literal)))
            literal = []
        parts.append(_token(letter, null_str))
    if literal:
        parts.append(unescape("".join(literal)))
    return MessageFormatter(tuple(part for part in parts if part != b""))


def default_format(key_delim: bytes | None, delim: bytes, print_offset: bool, null_str: bytes = b""
                   ) -> MessageFormatter:
    """kcat's output without ``-f``: [offset key-delim] [key key-delim] value delim."""
    parts: list[bytes | Callable[[Any], bytes]] = []
    if print_offset:
        parts += [_token("o", null_str), key_delim if key_delim is not None else b""]
    if key_delim is not None:
        parts += [_token("k", null_str), key_delim]
    parts += [_token("s", null_str), delim]
    return MessageFormatter(tuple(part for part in parts if part != b""))


def _json_text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, str):
        return value
    return bytes(value).decode("utf-8", "replace")


def json_envelope(message: Any, broker: int) -> bytes:
    """kcat's ``-J`` envelope on one line: topic, partition, offset, tstype, ts, broker, [headers], key, payload.

    ``headers`` is kcat's flat ``[name, value, name, value, ...]`` list and is left out when there are none;
    ``broker`` is the id of the broker the partition was fetched from (its leader), -1 when unknown.
    """
    kind, ts = _timestamp(message)
    envelope: dict[str, Any] = {
        "topic": message.topic(), "partition": message.partition(), "offset": message.offset(),
        "tstype": _TSTYPE_NAMES.get(kind, "unknown"), "ts": ts, "broker": broker,
    }
    headers = message.headers()
    if headers:
        flat: list[str | None] = []
        for name, value in headers:
            flat += [_json_text(name), _json_text(value)]
        envelope["headers"] = flat
    envelope["key"] = _json_text(message.key())
    envelope["payload"] = _json_text(message.value())
    return json.dumps(envelope, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def parse_header(text: str) -> tuple[str, bytes | None]:
    """``-H name=value`` → (name, value); ``-H name`` (no ``=``) is a header with a NULL value, as in kcat."""
    name, sep, value = text.partition("=")
    if not name:
        raise CatUsageError(f"-H expects name=value, got {text!r}")
    return name, value.encode("utf-8", "surrogateescape") if sep else None


@dataclass(frozen=True)
class OffsetSpec:
    """A parsed ``-o``: ``kind`` is beginning, end, stored, absolute, tail (``value`` from the end),
    start_ts (``s@``) or end_ts (``e@``: start at the beginning, stop before the first record at ``value`` ms)."""

    kind: str
    value: int = 0


def parse_offset(text: str) -> OffsetSpec:
    """kcat's ``-o`` values: beginning | end | stored | <n> | -<n> | s@<ms> | e@<ms>."""
    if text in ("beginning", "end", "stored"):
        return OffsetSpec(text)
    for prefix, kind in (("s@", "start_ts"), ("e@", "end_ts")):
        if text.startswith(prefix):
            try:
                return OffsetSpec(kind, int(text[2:]))
            except ValueError:
                raise CatUsageError(f"Invalid timestamp in -o {text}") from None
    try:
        value = int(text)
    except ValueError:
        raise CatUsageError(f"Invalid offset: {text}") from None
    return OffsetSpec("tail", -value) if value < 0 else OffsetSpec("absolute", value)


def parse_query(text: str) -> tuple[str, int, int]:
    """``-Q -t topic:partition:timestamp`` → (topic, partition, timestamp); the topic may contain ``:``."""
    topic, _, rest = text.rpartition(":")
    topic, _, partition = topic.rpartition(":")
    try:
        if not topic:
            raise ValueError
        return topic, int(partition), int(rest)
    except ValueError:
        raise CatUsageError('-t: expected "topic:partition:offset_or_timestamp"') from None


def _error_text(error: Any) -> str:
    text = getattr(error, "str", None)
    return text() if callable(text) else str(error)


def _sorted_topics(metadata: Any, topic: str | None) -> list[Any]:
    topics = [metadata.topics[name] for name in sorted(metadata.topics)]
    return [t for t in topics if topic is None or t.topic == topic]


def metadata_text(metadata: Any, topic: str | None, origin: tuple[int, str]) -> str:
    """kcat's ``-L`` listing: brokers (the controller marked), then each topic's partitions with leader,
    replicas and ISRs; errors follow a topic or partition line as ``: <error>``."""
    what = "all topics" if topic is None else topic
    lines = [f"Metadata for {what} (from broker {origin[0]}: {origin[1]}):",
             f" {len(metadata.brokers)} brokers:"]
    for node_id in sorted(metadata.brokers):
        broker = metadata.brokers[node_id]
        controller = " (controller)" if node_id == metadata.controller_id else ""
        lines.append(f"  broker {node_id} at {broker.host}:{broker.port}{controller}")
    topics = _sorted_topics(metadata, topic)
    lines.append(f" {len(topics)} topics:")
    for meta in topics:
        line = f'  topic "{meta.topic}" with {len(meta.partitions)} partitions:'
        if meta.error is not None:
            line += f" {_error_text(meta.error)}"
        lines.append(line)
        for pid in sorted(meta.partitions):
            part = meta.partitions[pid]
            line = (f"    partition {pid}, leader {part.leader}, replicas: {_csv(part.replicas)}, "
                    f"isrs: {_csv(part.isrs)}")
            if part.error is not None:
                line += f", {_error_text(part.error)}"
            lines.append(line)
    return "\n".join(lines) + "\n"


def _csv(ids: Sequence[int]) -> str:
    return ",".join(str(i) for i in ids)


def metadata_json(metadata: Any, topic: str | None, origin: tuple[int, str]) -> str:
    """kcat's ``-L -J`` document (one line): originating_broker, query, controllerid, brokers, topics."""
    topics = []
    for meta in _sorted_topics(metadata, topic):
        entry: dict[str, Any] = {"topic": meta.topic}
        if meta.error is not None:
            entry["error"] = _error_text(meta.error)
        partitions = []
        for pid in sorted(meta.partitions):
            part = meta.partitions[pid]
            item: dict[str, Any] = {"partition": pid, "leader": part.leader,
                                    "replicas": [{"id": i} for i in part.replicas],
                                    "isrs": [{"id": i} for i in part.isrs]}
            if part.error is not None:
                item["error"] = _error_text(part.error)
            partitions.append(item)
        entry["partitions"] = partitions
        topics.append(entry)
    document = {
        "originating_broker": {"id": origin[0], "name": origin[1]},
        "query": {"topic": topic if topic is not None else "*"},
        "controllerid": metadata.controller_id,
        "brokers": [{"id": node_id, "name": f"{metadata.brokers[node_id].host}:{metadata.brokers[node_id].port}"}
                    for node_id in sorted(metadata.brokers)],
        "topics": topics,
    }
    return json.dumps(document, separators=(",", ":")) + "\n"
