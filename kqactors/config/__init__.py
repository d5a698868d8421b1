"""Client configuration: the property table and the validated ``Config`` object.

Runs in: the app process (validation) and actor hosts (typed lookups on the shipped dict).
See ``properties`` for the table and ``config`` for parsing, validation and cross-property rules.

The names below are loaded from their submodule at first use (PEP 562): a host that needs only
``config.security``'s rules (the main actor picking a broker's TLS/SASL settings) does not load the property
table.
"""

from __future__ import annotations

from kqactors._lazy import lazy_exports

_MODULE_OF = {"Config": "config", "config_error": "config", "parse_value": "config", "Property": "properties",
              "PROPERTIES": "properties", "ALIASES": "properties", "LIBRDKAFKA_ONLY": "properties",
              "resolve_name": "properties"}

__all__ = ["Config", "config_error", "parse_value", "Property", "PROPERTIES", "ALIASES", "LIBRDKAFKA_ONLY",
           "resolve_name"]


__getattr__, __dir__ = lazy_exports(__name__, _MODULE_OF, globals())
