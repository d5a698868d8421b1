"""Config: validated, typed client configuration built from a confluent-kafka style dict.

Runs in: the app process (``Config(conf, kind=...)`` validates user input) and actor hosts
(``Config.from_dict(config.to_dict())`` rebuilds the typed view without callables).  Owns value
parsing (librdkafka's string forms: "true", "100", "all"), range/enum checks, alias resolution,
``default.topic.config`` merging, and librdkafka's cross-property rules (idempotence, transactions,
fetch sizes, group protocol) with librdkafka's error wording.

Unknown names are rejected exactly like librdkafka (``No such configuration property: "foo"``).
librdkafka properties that kqactors does not implement (Kerberos, socket callbacks, legacy
offset-file settings, ...) are *accepted and ignored with a warning* on the configured logger, so
configurations written for confluent-kafka keep working; the security properties' rules (TLS, SASL, the
properties Python's ssl module cannot apply, secrets kept out of ``repr``) are ``kqactors.config.security``'s.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Iterator, Mapping
from typing import Any

from kqactors.config.librdkafka_table import TABLE as LIBRDKAFKA_TABLE
from kqactors.config.properties import (
    ALIASES,
    ASSIGNORS,
    BOOL,
    CALLBACK,
    DEDICATED,
    ENUM,
    FLAGS,
    FLOAT,
    INT,
    INTERNAL,
    LIBRDKAFKA_ONLY,
    PARTITIONER,
    POINTER,
    PROPERTIES,
    STRING,
    Property,
)
from kqactors.config.security import check_security, redact
from kqactors.errors import KafkaError, KafkaException

__all__ = ["Config", "config_error"]

KINDS = ("producer", "consumer", "admin")
_SCOPE_NAMES = {"P": "producer", "C": "consumer"}
_TRUE = frozenset({"true", "t", "1"})
_FALSE = frozenset({"false", "f", "0"})
_log = logging.getLogger("kqactors.config")
_ASSIGNORS = ("range", "roundrobin", "cooperative-sticky")

# Properties kqactors accepts whose librdkafka effect cannot apply to it: (name, does the value apply?, why
# not). Set explicitly to a value that does not apply, they are named in a warning when the client is created.
_NOT_APPLIED: tuple[tuple[str, Any, str], ...] = (
    ("api.version.request", bool,
     "kqactors always asks brokers for their API versions (brokers older than 0.10.0 are not supported), "
     "so api.version.request=false and broker.version.fallback have no effect"),
    ("fetch.queue.backoff.ms", lambda _value: False,
     "fetching of a partition resumes as soon as the application has consumed its prefetched messages "
     "(credit returned by poll()/consume()), without waiting for a backoff"),
)


def config_error(message: str) -> KafkaException:
    """KafkaException(_INVALID_ARG, message): the error every configuration problem raises."""
    return KafkaException(KafkaError(KafkaError._INVALID_ARG, message))


def _invalid(name: str) -> KafkaException:
    return config_error(f'Invalid value for configuration property "{name}"')


def _text(raw: Any) -> str:
    """The string librdkafka sees: confluent-kafka passes every non-str value through str()."""
    return raw if isinstance(raw, str) else str(raw)


# strtol(3) with base 0 and strtod(3): librdkafka reads the longest numeric prefix and ignores the rest
# ("10abc" is 10, "1.5" is 1 for an integer property); no prefix at all is an invalid value.
_STRTOL = re.compile(r"\s*([+-]?)(0[xX][0-9a-fA-F]+|0[0-7]*|[1-9][0-9]*)")
_STRTOD = re.compile(r"\s*[+-]?(?:(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|inf(?:inity)?|nan)", re.I)


def _parse_int(name: str, raw: Any) -> int:
    if isinstance(raw, int) and not isinstance(raw, bool):
        return raw
    match = _STRTOL.match(_text(raw))
    if match is None:
        raise _invalid(name)
    sign, digits = match.groups()
    if digits[:2] in ("0x", "0X"):
        value = int(digits, 16)
    elif len(digits) > 1 and digits[0] == "0":
        value = int(digits, 8)
    else:
        value = int(digits)
    return -value if sign == "-" else value


def _parse_float(name: str, raw: Any) -> float:
    if isinstance(raw, (int, float)) and not isinstance(raw, bool):
        value = float(raw)
    else:
        match = _STRTOD.match(_text(raw))
        if match is None:
            raise _invalid(name)
        value = float(match.group(0))
    if math.isnan(value):
        raise _invalid(name)
    return value


def _parse_bool(name: str, raw: Any) -> bool:
    if isinstance(raw, bool):
        return raw
    text = _text(raw).lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise config_error(f'Expected bool value for "{name}": true or false')


def _check_range(name: str, prop: Property, value: float) -> None:
    if (prop.min is not None and value < prop.min) or (prop.max is not None and value > prop.max):
        shown = int(value) if isinstance(value, float) and value.is_integer() else value
        lo, hi = (int(x) if isinstance(x, float) and x.is_integer() else x for x in (prop.min, prop.max))
        raise config_error(f'Configuration property "{name}" value {shown} is outside allowed range '
                           f"{lo}..{hi}\n")


# Empty values (None in the dict): librdkafka's words by type; string properties go back to their default.
_EMPTY = {INT: "Integer configuration property", FLOAT: "Float configuration property",
          BOOL: "Bool configuration property", ENUM: "Configuration property", FLAGS: "Configuration property"}


def parse_value(name: str, prop: Property, raw: Any) -> Any:
    """Typed, range-checked value of ``raw`` for ``prop``; errors name the property as librdkafka does
    (by its canonical name, whatever alias ``name`` the application used)."""
    kind = prop.type
    name = prop.name
    if raw is None and kind in _EMPTY:
        raise config_error(f'{_EMPTY[kind]} "{name}" cannot be set to empty value')
    if kind == INT:
        if prop.name == "request.required.acks" and isinstance(raw, str) and raw.strip().lower() == "all":
            return -1
        value = _parse_int(name, raw)
        _check_range(name, prop, value)
        return value
    if kind == FLOAT:
        value = _parse_float(name, raw)
        _check_range(name, prop, value)
        return value
    if kind == BOOL:
        return _parse_bool(name, raw)
    if kind == STRING:
        return prop.default if raw is None else _text(raw)
    if kind == ENUM:
        text = _text(raw).strip().lower()
        if text not in prop.choices:
            raise config_error(f'Invalid value "{raw}" for configuration property "{name}"')
        return text
    if kind == FLAGS:
        values = []
        for item in _text(raw).split(","):
            text = item.strip().lower()
            if not text:
                continue
            if text not in prop.choices:
                raise config_error(f'Invalid value "{item.strip()}" for configuration property "{name}"')
            if text not in values:
                values.append(text)
        return values
    if kind == ASSIGNORS:  # a string to librdkafka: the names are checked when a consumer is created
        values = []
        for item in _text(raw).split(","):
            text = item.lstrip()
            if text and text not in values:
                values.append(text)
        return values
    if kind == CALLBACK:
        if not callable(raw):
            if name in ("error_cb", "stats_cb"):
                raise TypeError(f"expected {name} property as a callable function")
            if name == "throttle_cb":
                raise ValueError(f"expected {name} property as a callable function")
            raise config_error(f"{name} requires a callable object")
        return raw
    if kind == PARTITIONER:
        if callable(raw):
            return raw
        text = _text(raw).strip()
        if text not in prop.choices:
            raise config_error(f'Invalid value for configuration property "{name}": {text}')
        return text
    if kind == POINTER:
        return raw
    raise AssertionError(f"unhandled property type {kind}")  # pragma: no cover - table is fixed


def _librdkafka_property(name: str) -> Property | None:
    """The librdkafka property ``name`` that kqactors accepts without implementing, for validation only."""
    row = LIBRDKAFKA_TABLE.get(name)
    if row is None:
        return None
    kind, scope, lo, hi, choices, topic = row
    type_ = {"int": INT, "float": FLOAT, "bool": BOOL, "enum": ENUM, "flags": FLAGS}.get(kind, POINTER)
    return Property(name, type_, scope, None, lo, hi, tuple(c.lower() for c in choices), topic)


class Config(Mapping[str, Any]):
    """Validated configuration of one client (``kind`` = producer, consumer or admin).

    ``conf`` is a confluent-kafka style dict; ``**overrides`` are applied after it (confluent-kafka's
    ``Producer(conf, **kwargs)``).  Lookups accept aliases and return typed values (defaults for
    properties not set).  Raises KafkaException(_INVALID_ARG) on any invalid input.
    """

    def __init__(self, conf: Mapping[str, Any] | None = None, kind: str = "producer", **overrides: Any) -> None:
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, not {kind!r}")
        if conf is not None and not isinstance(conf, Mapping):
            raise TypeError(f"configuration must be a dict, not {type(conf).__name__}")
        self.kind = kind
        self._values: dict[str, Any] = {}
        self._explicit: set[str] = set()
        self.ignored: dict[str, Any] = {}
        """librdkafka properties that were given but are not implemented by kqactors."""
        merged = dict(conf or {})
        merged.update(overrides)
        topic_conf = merged.pop("default.topic.config", None)
        if topic_conf is not None:
            if not isinstance(topic_conf, Mapping):
                raise config_error('"default.topic.config" must be a dict')
            for name, raw in topic_conf.items():
                self._set(name, raw, topic_only=True)
        for name, raw in merged.items():
            self._set(name, raw)
        self._finalize()

    # -- building ------------------------------------------------------------------------------------
    def _set(self, name: Any, raw: Any, topic_only: bool = False) -> None:
        # ``topic_only``: from "default.topic.config"; confluent-kafka sets those like top-level properties.
        if not isinstance(name, str):
            raise config_error(f"Configuration property names must be strings, not {type(name).__name__}")
        if name in INTERNAL:
            raise config_error(f'Internal property "{name}" not settable')
        if name in DEDICATED:
            raise config_error(f'Property "{name}" must be set through dedicated .._set_..() function')
        canonical = ALIASES.get(name, name)
        prop = PROPERTIES.get(canonical)
        if prop is None:
            if name not in LIBRDKAFKA_ONLY:
                raise config_error(f'No such configuration property: "{name}"')
            # librdkafka still checks the value of a property kqactors does not implement.
            shadow = _librdkafka_property(name)
            self.ignored[name] = parse_value(name, shadow, raw) if shadow and shadow.type != POINTER else raw
            return
        value = parse_value(name, prop, raw)
        if value is None and prop.type == STRING:
            self._values.pop(canonical, None)  # None resets a string property to its default
            self._explicit.discard(canonical)
            return
        self._values[canonical] = value
        self._explicit.add(canonical)

    def _warn(self, message: str) -> None:
        logger = self._values.get("logger")
        if logger is None:
            _log.warning(message)
        else:
            logger.log(logging.WARNING, message)

    def _finalize(self) -> None:
        for name in self.ignored:
            self._warn(f"Configuration property {name} is not supported by kqactors and will be ignored")
        for name, applies, reason in _NOT_APPLIED:
            in_scope = PROPERTIES[name].scope in ("*", self.kind[0].upper())
            if in_scope and self.is_set(name) and not applies(self[name]):
                self._warn(f"Configuration property {name} is not applied by kqactors: {reason}")
        if self.kind != "admin":
            for name in sorted(self._explicit):
                scope = PROPERTIES[name].scope
                if scope != "*" and _SCOPE_NAMES[scope] != self.kind:
                    self._warn(f"Configuration property {name} is a {_SCOPE_NAMES[scope]} property and will "
                               f"be ignored by this {self.kind} instance")
        check_security(self, self.is_set, self.ignored, self._values.get("oauth_cb") is not None, self._warn,
                       self._failed, config_error)
        if self["reconnect.backoff.max.ms"] < self["reconnect.backoff.ms"]:
            raise self._failed("`reconnect.backoff.max.ms` must be >= `reconnect.backoff.ms`")
        if self["retry.backoff.ms"] > self["retry.backoff.max.ms"]:
            self._warn("Configuration `retry.backoff.ms` is greater than `retry.backoff.max.ms`: a static "
                       "backoff of `retry.backoff.max.ms` will be applied")
        refresh = self["topic.metadata.refresh.interval.ms"]
        if not self.is_set("metadata.max.age.ms") and refresh > 0:
            self._values["metadata.max.age.ms"] = min(refresh * 3, 86400000)
        if self.kind == "producer" and not self.is_set("allow.auto.create.topics"):
            self._values["allow.auto.create.topics"] = True  # librdkafka's producer default (consumers: false)
        if self["compression.codec"] == "inherit":
            self._values["compression.codec"] = "none"
        if self.kind == "producer":
            self._finalize_producer()
        elif self.kind == "consumer":
            self._finalize_consumer()

    def _failed(self, reason: str) -> KafkaException:
        return config_error(f"Failed to create {self.kind}: {reason}")

    def _finalize_producer(self) -> None:
        if self["transactional.id"]:
            if self.is_set("enable.idempotence") and not self["enable.idempotence"]:
                raise self._failed("`transactional.id` requires `enable.idempotence=true`")
            self._values["enable.idempotence"] = True
            if not self.is_set("message.timeout.ms"):
                self._values["message.timeout.ms"] = self["transaction.timeout.ms"]
            elif self["message.timeout.ms"] > self["transaction.timeout.ms"]:
                raise self._failed("`message.timeout.ms` must be set <= `transaction.timeout.ms`")
        if self["enable.idempotence"]:
            if self.is_set("request.required.acks") and self["request.required.acks"] != -1:
                raise self._failed("`acks` must be set to `all` when `enable.idempotence` is true")
            self._values["request.required.acks"] = -1
            if self.is_set("max.in.flight.requests.per.connection"):
                if self["max.in.flight.requests.per.connection"] > 5:
                    raise self._failed("`max.in.flight` must be set <= 5 when `enable.idempotence` is true")
            else:
                self._values["max.in.flight.requests.per.connection"] = 5
            if self.is_set("message.send.max.retries") and self["message.send.max.retries"] < 1:
                raise self._failed("`retries` must be set >= 1 when `enable.idempotence` is true")
        if self["enable.gapless.guarantee"] and not self["enable.idempotence"]:
            raise self._failed("`enable.gapless.guarantee` requires `enable.idempotence` to be enabled")
        linger = self["queue.buffering.max.ms"]
        if self["message.timeout.ms"] != 0 and self["message.timeout.ms"] <= linger:
            raise self._failed("`message.timeout.ms` must be greater than `linger.ms`")
        if not self.is_set("sticky.partitioning.linger.ms"):
            self._values["sticky.partitioning.linger.ms"] = int(min(900000, 2 * linger))

    def _finalize_consumer(self) -> None:
        if not 1 <= self["fetch.min.bytes"] <= 100000000:
            raise self._failed('Configuration property "fetch.min.bytes" value is outside allowed range '
                               "1..100000000")
        if self["fetch.max.bytes"] < self["message.max.bytes"]:
            raise self._failed("`fetch.max.bytes` must be >= `message.max.bytes`")
        needed = self["fetch.max.bytes"] + 512
        if self.is_set("receive.message.max.bytes"):
            if self["receive.message.max.bytes"] < needed:
                raise self._failed("`receive.message.max.bytes` must be >= `fetch.max.bytes` + 512")
        else:
            self._values["receive.message.max.bytes"] = max(self["receive.message.max.bytes"], needed)
        if self["group.protocol"] == "consumer":
            for name in ("session.timeout.ms", "heartbeat.interval.ms"):
                if self.is_set(name):
                    raise self._failed(f"`{name}` is not supported for `group.protocol=consumer`. "
                                       "It is defined broker side")
            if self.is_set("group.protocol.type"):
                raise self._failed("`group.protocol.type` is not supported for `group.protocol=consumer`")
            if self.is_set("partition.assignment.strategy"):
                raise self._failed("`partition.assignment.strategy` is not supported for "
                                   "`group.protocol=consumer`. Use `group.remote.assignor` instead")
        else:
            if self["max.poll.interval.ms"] < self["session.timeout.ms"]:
                raise self._failed("`max.poll.interval.ms`must be >= `session.timeout.ms`")
            strategies = self["partition.assignment.strategy"]
            for strategy in strategies:
                if strategy not in _ASSIGNORS or self["group.protocol.type"] != "consumer":
                    raise self._failed(f"Unsupported partition.assignment.strategy: {strategy}")
            if not strategies:
                raise self._failed("partition.assignment.strategy must name at least one assignor")
            if "cooperative-sticky" in strategies and len(strategies) > 1:
                raise self._failed(f"All partition.assignment.strategy ({','.join(strategies)}) assignors must "
                                   "have the same protocol type, online migration between assignors with "
                                   "different protocol types is not supported")

    # -- lookups -------------------------------------------------------------------------------------
    def __getitem__(self, name: str) -> Any:
        canonical = ALIASES.get(name, name)
        try:
            return self._values[canonical]
        except KeyError:
            pass
        prop = PROPERTIES.get(canonical)
        if prop is None:
            raise KeyError(f'No such configuration property: "{name}"')
        default = prop.default
        return list(default) if isinstance(default, list) else default

    def get(self, name: str, default: Any = None) -> Any:
        """Typed value of ``name`` (an alias is fine); ``default`` only for names that are not properties."""
        try:
            return self[name]
        except KeyError:
            return default

    def __iter__(self) -> Iterator[str]:
        return iter(PROPERTIES)

    def __len__(self) -> int:
        return len(PROPERTIES)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and ALIASES.get(name, name) in PROPERTIES

    def is_set(self, name: str) -> bool:
        """True if the application set ``name`` (or one of its aliases) explicitly."""
        return ALIASES.get(name, name) in self._explicit

    def explicit_items(self) -> list[tuple[str, Any]]:
        """(name, value) of every property the application set, including the librdkafka ones kqactors
        ignores (librdkafka's ``conf`` debug context lists them)."""
        items = [(name, self._values[name]) for name in self._explicit if name in self._values]
        return items + list(self.ignored.items())

    def callbacks(self) -> dict[str, Any]:
        """The app-side objects that never leave the process: callbacks, logger, opaque, custom partitioner."""
        result = {name: value for name, value in self._values.items()
                  if not PROPERTIES[name].shippable and value is not None}
        if callable(self._values.get("partitioner")):
            result["partitioner"] = self._values["partitioner"]
        return result

    def to_dict(self) -> dict[str, Any]:
        """Every shippable property (defaults included) by canonical name: plain msgpack/pickle types.

        Callables stay in the app: a custom partitioner is shipped as ``"custom"``.
        """
        result: dict[str, Any] = {"kqactors.kind": self.kind}
        for name, prop in PROPERTIES.items():
            if prop.shippable:
                value = self[name]
                result[name] = "custom" if callable(value) else value
        result["kqactors.explicit"] = sorted(self._explicit)
        # broker actors read a throttle_time_ms that costs a decode (Produce) only when someone listens
        result["kqactors.throttle_cb"] = self._values.get("throttle_cb") is not None
        return result

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Config:
        """Rebuild a Config in an actor process from ``to_dict()`` output (already validated: no checks)."""
        self = cls.__new__(cls)
        self.kind = data.get("kqactors.kind", "producer")
        self.ignored = {}
        self._values = {name: (list(value) if isinstance(value, (list, tuple)) else value)
                        for name, value in data.items() if name in PROPERTIES}
        self._explicit = set(data.get("kqactors.explicit", ()))
        return self

    def __repr__(self) -> str:
        shown = {name: redact(name, self._values[name]) for name in sorted(self._explicit)}
        return f"Config(kind={self.kind!r}, {shown!r})"
