"""The admin methods' keyword options, parsed as confluent-kafka parses them.

Runs in: the app process (inside AdminClient calls). Owns the option table: which method takes which keyword
(any other is a TypeError naming it), the C argument types (a float for the timeouts: a str is a TypeError; a
strict bool for the flags; a C int for ``broker``), seconds → milliseconds and librdkafka's ranges (a value
out of range is a ValueError with librdkafka's wording). Unset timeouts default to socket.timeout.ms, as
librdkafka's admin.request_timeout_ms does.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Any

from kqactors.admin._topic import c_int

_MAX_MS = 3600 * 1000


@dataclass
class Options:
    """One call's options, in milliseconds."""

    request_timeout_ms: int
    operation_timeout_ms: int
    validate_only: bool = False
    broker: int = -1
    require_stable: bool = False
    include_authorized_operations: bool = False
    isolation_level: int = 0


def c_float(value: Any) -> float:
    """``value`` as CPython's "f" argument format takes it."""
    if isinstance(value, (int, float)):
        return float(value)
    if hasattr(type(value), "__float__"):
        return float(value)
    if hasattr(type(value), "__index__"):
        return float(operator.index(value))
    raise TypeError(f"must be real number, not {type(value).__name__}")


def c_bool(value: Any, name: str) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"Expected {name} to be bool type, not {type(value).__name__}")
    return value


def _ranged(name: str, value_ms: int, low: int, high: int) -> int:
    if not low <= value_ms <= high:
        raise ValueError(f'Invalid value type for "{name}": expecting integer in range {low}..{high}')
    return value_ms


def parse(kwargs: dict[str, Any], allowed: tuple[str, ...], default_timeout_ms: int) -> Options:
    """Check ``kwargs`` against the method's ``allowed`` keywords and return the options they set."""
    for name in kwargs:
        if name not in allowed:
            raise TypeError(f"'{name}' is an invalid keyword argument for this function")
    options = Options(default_timeout_ms, default_timeout_ms)
    if "validate_only" in kwargs:
        options.validate_only = c_bool(kwargs["validate_only"], "validate_only")
    if "require_stable" in kwargs:
        options.require_stable = c_bool(kwargs["require_stable"], "require_stable")
    if "include_authorized_operations" in kwargs:
        options.include_authorized_operations = c_bool(kwargs["include_authorized_operations"],
                                                       "include_authorized_operations")
    request_timeout = kwargs.get("request_timeout")
    operation_timeout = kwargs.get("operation_timeout")
    broker = kwargs.get("broker")
    if "request_timeout" in kwargs:
        request_timeout = c_float(request_timeout)
    if "operation_timeout" in kwargs:
        operation_timeout = c_float(operation_timeout)
    if "broker" in kwargs:
        broker = c_int(broker)
    if "isolation_level_value" in kwargs:
        options.isolation_level = _ranged("isolation_level", c_int(kwargs["isolation_level_value"]), 0, 1)
    if request_timeout is not None:
        options.request_timeout_ms = _ranged("request_timeout", int(request_timeout * 1000), 0, _MAX_MS)
    if operation_timeout is not None:
        options.operation_timeout_ms = _ranged("operation_timeout", int(operation_timeout * 1000), -1, _MAX_MS)
    if broker is not None:
        options.broker = _ranged("broker", broker, 0, 2**31 - 1)
    return options
