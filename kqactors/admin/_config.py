"""Configuration resources and entries (describe_configs, alter_configs, incremental_alter_configs).

Runs in: the app process. ConfigResource hashes, compares and sorts by (restype, name), as confluent-kafka's,
so it keys the futures of a config call; ConfigEntry is one described or altered property.
"""

from __future__ import annotations

import functools
from enum import Enum
from typing import Any

from kqactors.admin._resource import ResourceType

CONFIG_SOURCE_UNKNOWN_CONFIG = 0
CONFIG_SOURCE_DYNAMIC_TOPIC_CONFIG = 1
CONFIG_SOURCE_DYNAMIC_BROKER_CONFIG = 2
CONFIG_SOURCE_DYNAMIC_DEFAULT_BROKER_CONFIG = 3
CONFIG_SOURCE_STATIC_BROKER_CONFIG = 4
CONFIG_SOURCE_DEFAULT_CONFIG = 5
CONFIG_SOURCE_GROUP_CONFIG = 8


class AlterConfigOpType(Enum):
    """An incremental_alter_configs operation on one property."""

    SET = 0  #: set the value
    DELETE = 1  #: revert to the default
    APPEND = 2  #: add values to a list property
    SUBTRACT = 3  #: remove values from a list property


class ConfigSource(Enum):
    """Where a described property's value comes from (the protocol's config sources)."""

    UNKNOWN_CONFIG = CONFIG_SOURCE_UNKNOWN_CONFIG
    DYNAMIC_TOPIC_CONFIG = CONFIG_SOURCE_DYNAMIC_TOPIC_CONFIG
    DYNAMIC_BROKER_CONFIG = CONFIG_SOURCE_DYNAMIC_BROKER_CONFIG
    DYNAMIC_DEFAULT_BROKER_CONFIG = CONFIG_SOURCE_DYNAMIC_DEFAULT_BROKER_CONFIG
    STATIC_BROKER_CONFIG = CONFIG_SOURCE_STATIC_BROKER_CONFIG
    DEFAULT_CONFIG = CONFIG_SOURCE_DEFAULT_CONFIG
    GROUP_CONFIG = CONFIG_SOURCE_GROUP_CONFIG


class ConfigEntry:
    """One configuration property: described (value, source, flags, synonyms) or to alter incrementally
    (``incremental_operation``)."""

    def __init__(self, name: str, value: str | None, source: ConfigSource = ConfigSource.UNKNOWN_CONFIG,
                 is_read_only: bool = False, is_default: bool = False, is_sensitive: bool = False,
                 is_synonym: bool = False, synonyms: dict[str, ConfigEntry] | None = None,
                 incremental_operation: AlterConfigOpType | None = None) -> None:
        self.name = name
        self.value = value
        self.source = source
        self.is_read_only = bool(is_read_only)
        self.is_default = bool(is_default)
        self.is_sensitive = bool(is_sensitive)
        self.is_synonym = bool(is_synonym)
        self.synonyms = {} if synonyms is None else synonyms
        self.incremental_operation = incremental_operation

    def __repr__(self) -> str:
        return f'ConfigEntry({self.name}="{self.value}")'

    def __str__(self) -> str:
        return f'{self.name}="{self.value}"'


@functools.total_ordering
class ConfigResource:
    """A resource with a configuration: ``restype`` (a ResourceType, its name in any case, or its value) and
    ``name`` (a broker's id for BROKER), with the properties to set (``set_config``, alter_configs) or the
    entries to alter (``incremental_configs``). ``configs`` and ``error`` are filled in results."""

    Type = ResourceType

    def __init__(self, restype: ResourceType | str | int, name: str, set_config: dict[str, str] | None = None,
                 described_configs: dict[str, ConfigEntry] | None = None, error: Any = None,
                 incremental_configs: list[ConfigEntry] | None = None) -> None:
        if name is None:
            raise ValueError("Expected resource name to be a string")
        if isinstance(restype, str):
            try:
                restype = ResourceType[restype.upper()]
            except KeyError:
                raise ValueError(f'Unknown resource type "{restype}": should be a ConfigResource.Type') from None
        elif isinstance(restype, int) and not isinstance(restype, Enum):
            restype = ResourceType(restype)
        self.restype = restype
        self.restype_int = int(restype.value)
        self.name = name
        self.set_config_dict: dict[str, str] = dict(set_config) if set_config is not None else {}
        self.incremental_configs: list[ConfigEntry] = list(incremental_configs or [])
        self.configs = described_configs
        self.error = error

    def __repr__(self) -> str:
        if self.error is not None:
            return f"ConfigResource({self.restype},{self.name},{self.error!r})"
        return f"ConfigResource({self.restype},{self.name})"

    def __hash__(self) -> int:
        return hash((self.restype, self.name))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ConfigResource):
            return NotImplemented
        return self.restype == other.restype and self.name == other.name

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, ConfigResource):
            return NotImplemented
        if self.restype < other.restype:
            return True
        return self.name < other.name

    def __len__(self) -> int:
        """The number of properties to set."""
        return len(self.set_config_dict)

    def set_config(self, name: str, value: str, overwrite: bool = True) -> None:
        """Set a property for alter_configs (which reverts every property it is not given to its default);
        with ``overwrite=False`` an already set property is kept."""
        if overwrite or name not in self.set_config_dict:
            self.set_config_dict[name] = value

    def add_incremental_config(self, config_entry: ConfigEntry) -> None:
        """Add an entry (with its ``incremental_operation``) for incremental_alter_configs."""
        self.incremental_configs.append(config_entry)
