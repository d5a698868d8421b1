"""Client configuration: the property table and the validated ``Config`` object.

Runs in: the app process (validation) and actor hosts (typed lookups on the shipped dict).
See ``properties`` for the table and ``config`` for parsing, validation and cross-property rules.

The names below are loaded from their submodule at first use (PEP 562): a host that needs only
``config.security``'s rules (the main actor picking a broker's TLS/SASL settings) does not load the property
table.
"""

from __future__ import annotations

import importlib
from typing import Any

_MODULE_OF = {"Config": "config", "config_error": "config", "parse_value": "config", "Property": "properties",
              "PROPERTIES": "properties", "ALIASES": "properties", "LIBRDKAFKA_ONLY": "properties",
              "resolve_name": "properties"}

__all__ = ["Config", "config_error", "parse_value", "Property", "PROPERTIES", "ALIASES", "LIBRDKAFKA_ONLY",
           "resolve_name"]


def __getattr__(name: str) -> Any:
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value  # later lookups are plain module attributes
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_MODULE_OF))
