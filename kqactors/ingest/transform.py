"""Per-source line transforms and the message key taken from a JSON field.

Runs in: the worker processes (compiled once per source; ``compile_transforms`` also validates the config in the
supervisor). Owns the transform vocabulary. Every step maps a list of lines (bytes, newline already stripped) to
a list of lines, so a read's lines go through each step in one comprehension rather than one call per line.

Steps (``transforms = [ {op = "..."}, ... ]`` in a source's table, applied in order):

- ``strip``: whitespace off both ends.            - ``drop_empty``: drop empty lines.
- ``grep`` (``pattern``): keep lines matching the regular expression.
- ``exclude`` (``pattern``): drop lines matching it.
- ``replace`` (``pattern``, ``with``): regular-expression substitution (``\\1`` references allowed).
- ``prefix`` / ``suffix`` (``text``): add text.   - ``truncate`` (``bytes``): cut lines longer than that.
- ``wrap_json`` (``field`` = "message", ``add`` = {...}): the line becomes ``{"message": line, ...add}``.
- ``add_fields`` (``fields`` = {...}): set fields on lines that are JSON objects (others pass unchanged).

``key_field`` (dotted, e.g. ``"user.id"``) takes the key from the (transformed) line parsed as JSON: a string as
UTF-8, any other value as its JSON text; a line that is not JSON or lacks the field gets no key (counted).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

__all__ = ["TransformError", "LinePipeline", "compile_transforms", "OPS"]

Step = Callable[[list[bytes]], list[bytes]]


class TransformError(ValueError):
    """A transform step or key_field that cannot be compiled."""


def _pattern(step: Mapping[str, Any], op: str) -> re.Pattern[bytes]:
    pattern = step.get("pattern")
    if not isinstance(pattern, str) or not pattern:
        raise TransformError(f"transform {op}: needs a non-empty pattern")
    try:
        return re.compile(pattern.encode())
    except re.error as exc:
        raise TransformError(f"transform {op}: bad pattern {pattern!r}: {exc}") from None


def _text(step: Mapping[str, Any], key: str, op: str) -> bytes:
    value = step.get(key)
    if not isinstance(value, str):
        raise TransformError(f"transform {op}: needs {key} (a string)")
    return value.encode()


def _strip(step: Mapping[str, Any]) -> Step:
    return lambda lines: [line.strip() for line in lines]


def _drop_empty(step: Mapping[str, Any]) -> Step:
    return lambda lines: [line for line in lines if line]


def _grep(step: Mapping[str, Any]) -> Step:
    search = _pattern(step, "grep").search
    return lambda lines: [line for line in lines if search(line)]


def _exclude(step: Mapping[str, Any]) -> Step:
    search = _pattern(step, "exclude").search
    return lambda lines: [line for line in lines if not search(line)]


def _replace(step: Mapping[str, Any]) -> Step:
    sub = _pattern(step, "replace").sub
    repl = _text(step, "with", "replace")
    try:
        sub(repl, b"")
    except (re.error, IndexError) as exc:
        raise TransformError(f"transform replace: bad replacement {repl!r}: {exc}") from None
    return lambda lines: [sub(repl, line) for line in lines]


def _prefix(step: Mapping[str, Any]) -> Step:
    text = _text(step, "text", "prefix")
    return lambda lines: [text + line for line in lines]


def _suffix(step: Mapping[str, Any]) -> Step:
    text = _text(step, "text", "suffix")
    return lambda lines: [line + text for line in lines]


def _truncate(step: Mapping[str, Any]) -> Step:
    limit = step.get("bytes")
    if isinstance(limit, bool) or not isinstance(limit, int) or limit <= 0:
        raise TransformError("transform truncate: needs bytes (an integer > 0)")
    return lambda lines: [line[:limit] for line in lines]


def _json_fields(step: Mapping[str, Any], key: str, op: str) -> dict[str, Any]:
    fields = step.get(key, {})
    if not isinstance(fields, Mapping):
        raise TransformError(f"transform {op}: {key} must be a table")
    try:
        json.dumps(dict(fields))
    except (TypeError, ValueError) as exc:
        raise TransformError(f"transform {op}: {key} cannot be JSON: {exc}") from None
    return dict(fields)


def _wrap_json(step: Mapping[str, Any]) -> Step:
    name = step.get("field", "message")
    if not isinstance(name, str) or not name:
        raise TransformError("transform wrap_json: field must be a non-empty string")
    add = _json_fields(step, "add", "wrap_json")
    dumps = json.dumps

    def wrap(lines: list[bytes]) -> list[bytes]:
        return [dumps({name: line.decode("utf-8", "replace"), **add}, ensure_ascii=False).encode()
                for line in lines]
    return wrap


def _add_fields(step: Mapping[str, Any]) -> Step:
    fields = _json_fields(step, "fields", "add_fields")
    loads, dumps = json.loads, json.dumps

    def add(lines: list[bytes]) -> list[bytes]:
        out = []
        for line in lines:
            try:
                obj = loads(line)
            except ValueError:
                out.append(line)
                continue
            if isinstance(obj, dict):
                obj.update(fields)
                out.append(dumps(obj, ensure_ascii=False).encode())
            else:
                out.append(line)
        return out
    return add


OPS: dict[str, Callable[[Mapping[str, Any]], Step]] = {
    "strip": _strip, "drop_empty": _drop_empty, "grep": _grep, "exclude": _exclude, "replace": _replace,
    "prefix": _prefix, "suffix": _suffix, "truncate": _truncate, "wrap_json": _wrap_json,
    "add_fields": _add_fields,
}
_STEP_KEYS = {"op", "pattern", "with", "text", "bytes", "field", "add", "fields"}


class LinePipeline:
    """A source's compiled transforms and key extraction.

    ``raw`` is True when lines go out as read, without key: the emitter then skips ``run`` entirely.
    """

    __slots__ = ("steps", "key_path", "raw")

    def __init__(self, steps: Sequence[Step], key_path: tuple[str, ...]) -> None:
        self.steps = tuple(steps)
        self.key_path = key_path
        self.raw = not self.steps and not key_path

    def run(self, lines: list[bytes]) -> list[bytes]:
        for step in self.steps:
            lines = step(lines)
        return lines

    def keys(self, values: list[bytes]) -> tuple[list[bytes | None], int]:
        """One key per value (None where the line is not JSON or lacks the field) and how many got none."""
        path = self.key_path
        loads = json.loads
        keys: list[bytes | None] = []
        missing = 0
        for value in values:
            try:
                obj: Any = loads(value)
                for part in path:
                    obj = obj[part]
            except (ValueError, KeyError, TypeError, IndexError):
                keys.append(None)
                missing += 1
                continue
            if isinstance(obj, str):
                keys.append(obj.encode())
            elif obj is None:
                keys.append(None)
                missing += 1
            else:
                keys.append(json.dumps(obj, separators=(",", ":")).encode())
        return keys, missing


def compile_transforms(transforms: Sequence[Mapping[str, Any]], key_field: str = "") -> LinePipeline:
    """Validate and compile a source's ``transforms`` and ``key_field``; TransformError says what is wrong."""
    steps = []
    for i, step in enumerate(transforms):
        if not isinstance(step, Mapping):
            raise TransformError(f"transform #{i + 1}: must be a table")
        op = step.get("op")
        if op not in OPS:
            raise TransformError(f"transform #{i + 1}: op must be one of {', '.join(sorted(OPS))}, got {op!r}")
        unknown = set(step) - _STEP_KEYS
        if unknown:
            raise TransformError(f"transform #{i + 1} ({op}): unknown key(s) {', '.join(sorted(unknown))}")
        steps.append(OPS[op](step))
    if not isinstance(key_field, str):
        raise TransformError("key_field must be a string")
    key_path = tuple(key_field.split(".")) if key_field else ()
    if any(not part for part in key_path):
        raise TransformError(f"key_field {key_field!r}: empty name between dots")
    return LinePipeline(steps, key_path)
