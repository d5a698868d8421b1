"""Client configuration: the property table and the validated ``Config`` object.

Runs in: the app process (validation) and actor hosts (typed lookups on the shipped dict).
See ``properties`` for the table and ``config`` for parsing, validation and cross-property rules.
"""

from kqactors.config.config import Config, config_error, parse_value
from kqactors.config.properties import ALIASES, LIBRDKAFKA_ONLY, PROPERTIES, Property, resolve_name

__all__ = ["Config", "config_error", "parse_value", "Property", "PROPERTIES", "ALIASES", "LIBRDKAFKA_ONLY",
           "resolve_name"]
