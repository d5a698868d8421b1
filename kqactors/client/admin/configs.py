"""The AdminClient's configuration methods: describe_configs, alter_configs, incremental_alter_configs.

Runs in: the app process. Routing is librdkafka's: a call with a BROKER resource goes to that broker (one BROKER
resource per call at most: more fail the futures with _CONFLICT), otherwise to the ``broker`` option's broker or
the controller. Results are keyed by the caller's ConfigResource objects; a described property is a ConfigEntry
whose ``source`` is the protocol's int (as confluent-kafka gives it) and whose ``synonyms`` map name → entry.
"""

from __future__ import annotations

import concurrent.futures
import re
import warnings
from typing import Any

from kqactors.admin._config import (
    CONFIG_SOURCE_DEFAULT_CONFIG,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
)
from kqactors.admin._resource import RESOURCE_BROKER
from kqactors.client.admin import results as res
from kqactors.client.admin.base import AdminBase
from kqactors.client.admin.dispatch import Outcome
from kqactors.client.admin.options import Options
from kqactors.errors import KafkaError
from kqactors.ops import admin as aops

__all__ = ["ConfigsMixin"]

_STRTOL = re.compile(r"\s*([+-]?\d+)")


def _resource_fields(resource: ConfigResource) -> tuple[int, str]:
    """(restype value, name) as confluent-kafka's C layer reads them (a non-str name is a TypeError)."""
    name = resource.name
    if not isinstance(name, str):
        raise TypeError(f"Expected .name to be str type, not {type(name).__name__}")
    restype = resource.restype_int
    if not isinstance(restype, int):
        raise TypeError(f"Expected .restype_int to be int type, not {type(restype).__name__}")
    if not name or restype < 0:
        raise ValueError(f"Invalid ConfigResource({restype},{name})")
    return restype, name


def _target(resources: list[tuple[int, str]], options: Options) -> list[Any] | KafkaError:
    """Where a config call goes: its BROKER resource's broker, else the ``broker`` option, else the
    controller; or the KafkaError that fails the call (librdkafka's checks)."""
    broker = None
    for restype, name in resources:
        if restype != RESOURCE_BROKER:
            continue
        if broker is not None:
            return KafkaError(KafkaError._CONFLICT, "Only one ConfigResource of type BROKER is allowed per call")
        match = _STRTOL.match(name)
        if match is None or int(match.group(1)) < 0 or int(match.group(1)) >= 2**31:
            return KafkaError(KafkaError._INVALID_ARG,
                              f"Expected an int32 broker_id for ConfigResource(type=BROKER, name={name})")
        broker = int(match.group(1))
    if broker is not None:
        return ["broker", broker]
    if options.broker >= 0:
        return ["broker", options.broker]
    return ["controller"]


def _entry(config: dict[str, Any], version: int) -> ConfigEntry:
    if version == 0:
        is_default = bool(config.get("is_default"))
        source = CONFIG_SOURCE_DEFAULT_CONFIG if is_default else 0
    else:
        source = int(config.get("config_source", 0))
        is_default = source == CONFIG_SOURCE_DEFAULT_CONFIG
    synonyms = {s["name"]: ConfigEntry(s["name"], s.get("value"), source=int(s.get("source", 0)), is_synonym=True)
                for s in config.get("synonyms") or ()}
    return ConfigEntry(config["name"], config.get("value"), source=source, is_read_only=bool(config.get("read_only")),
                       is_default=is_default, is_sensitive=bool(config.get("is_sensitive")), synonyms=synonyms)


class ConfigsMixin(AdminBase):
    """Configuration methods of the AdminClient."""

    def _config_call(self, op_type: str, kind: str, resources: list[ConfigResource], options: Options,
                     fields: dict[str, Any], entries: list[Any], list_field: str,
                     futures: dict[ConfigResource, concurrent.futures.Future], describe: bool) -> None:
        keys = [_resource_fields(r) for r in resources]  # checked before anything is sent
        target = _target(keys, options)
        if isinstance(target, KafkaError):
            self._fail(futures.values(), res.exception(target.code(), target.str()))
            return
        args = {**fields, "resources": entries}

        def complete(outcomes: list[Outcome]) -> None:
            failure = res.outcome_exception(outcomes[0], kind.split(":")[-1])
            if failure is not None:
                self._fail(futures.values(), failure)
                return
            result = outcomes[0]["result"]
            version = int(result.get("_version", 0))
            found = {(int(r["resource_type"]), r["resource_name"]): r for r in result.get(list_field) or ()}
            for resource, future in futures.items():
                item = found.get((resource.restype_int, resource.name))
                if item is None:
                    future.set_exception(res.exception(KafkaError._FAIL, f"{resource} missing from the response"))
                elif int(item.get("error_code") or 0):
                    future.set_exception(res.exception(int(item["error_code"]), item.get("error_message")))
                elif describe:
                    future.set_result({c["name"]: _entry(c, version) for c in item.get("configs") or ()})
                else:
                    future.set_result(None)

        self._submit(op_type, [aops.call(target, kind, args)], options, complete, futures.values())

    def describe_configs(self, resources: list[ConfigResource], **kwargs: Any
                         ) -> dict[ConfigResource, concurrent.futures.Future]:
        """The configuration of each resource. Options: ``request_timeout``, ``broker``. Returns
        {ConfigResource: future of {name: ConfigEntry}}."""
        futures = self._futures(resources, ConfigResource)
        options = self._options(kwargs, ("request_timeout", "broker"))
        if not isinstance(resources, list) or not resources:
            raise ValueError("Expected non-empty list of ConfigResource objects")
        self._check_open()
        entries = []
        for resource in resources:
            restype, name = _resource_fields(resource)
            entries.append({"resource_type": restype, "resource_name": name, "configuration_keys": None})
        self._config_call(aops.DESCRIBECONFIGS, "admin:DescribeConfigs", resources, options,
                          {"include_synonyms": True}, entries, "results", futures, describe=True)
        return dict(futures)

    def alter_configs(self, resources: list[ConfigResource], **kwargs: Any
                      ) -> dict[ConfigResource, concurrent.futures.Future]:
        """Deprecated (use incremental_alter_configs): replace each resource's whole configuration by its
        ``set_config`` properties (every other one reverts to its default). Options: ``request_timeout``,
        ``validate_only``, ``broker``. Returns {ConfigResource: future} whose result is None."""
        warnings.warn("alter_configs has been deprecated. Use incremental_alter_configs instead.",
                      category=DeprecationWarning, stacklevel=2)
        futures = self._futures(resources, ConfigResource)
        options = self._options(kwargs, ("validate_only", "request_timeout", "broker"))
        if not isinstance(resources, list) or not resources:
            raise ValueError("Expected non-empty list of ConfigResource objects")
        self._check_open()
        entries = []
        for resource in resources:
            restype, name = _resource_fields(resource)
            settings = getattr(resource, "set_config_dict", None)
            if type(settings) is not dict:
                raise TypeError(f"Expected .set_config_dict to be dict type, not {type(settings).__name__}")
            entries.append({"resource_type": restype, "resource_name": name,
                            "configs": [{"name": str(k), "value": str(v)} for k, v in settings.items()]})
        self._config_call(aops.ALTERCONFIGS, "admin:AlterConfigs", resources, options,
                          {"validate_only": options.validate_only}, entries, "responses", futures, describe=False)
        return dict(futures)

    def incremental_alter_configs(self, resources: list[ConfigResource], **kwargs: Any
                                  ) -> dict[ConfigResource, concurrent.futures.Future]:
        """Alter only the given properties of each resource (its ``incremental_configs``: ConfigEntry objects
        with an ``incremental_operation``). Options: ``request_timeout``, ``validate_only``, ``broker``. Returns
        {ConfigResource: future} whose result is None."""
        futures = self._futures(resources, ConfigResource, TypeError)
        options = self._options(kwargs, ("validate_only", "request_timeout", "broker"))
        if not isinstance(resources, list) or not resources:
            raise ValueError("Expected non-empty list of ConfigResource objects")
        self._check_open()
        entries = []
        for resource in resources:
            restype, name = _resource_fields(resource)
            changes = getattr(resource, "incremental_configs", None)
            if type(changes) is not list:
                raise TypeError(f"Expected .incremental_configs to be list type, not {type(changes).__name__}")
            entries.append({"resource_type": restype, "resource_name": name, "configs": self._changes(changes)})
        seen: set[tuple[int, str]] = set()
        for entry in entries:
            key = (entry["resource_type"], entry["resource_name"])
            names = [c["name"] for c in entry["configs"]]
            problem = ("Duplicate ConfigEntry found" if len(set(names)) != len(names)
                       else "Duplicate ConfigResource found" if key in seen else None)
            if problem is not None:
                self._fail(futures.values(), res.exception(KafkaError._INVALID_ARG, problem))
                return dict(futures)
            seen.add(key)
        self._config_call(aops.INCREMENTALALTERCONFIGS, "admin:IncrementalAlterConfigs", resources, options,
                          {"validate_only": options.validate_only}, entries, "responses", futures, describe=False)
        return dict(futures)

    @staticmethod
    def _changes(changes: list[Any]) -> list[dict[str, Any]]:
        """The IncrementalAlterConfigs entries of a resource's ConfigEntry list (confluent-kafka's checks)."""
        if not changes:
            raise ValueError("expected non-empty list of ConfigEntry to alter incrementally in incremental_configs "
                             "field")
        out = []
        for index, entry in enumerate(changes):
            if not isinstance(entry, ConfigEntry):
                raise TypeError(f"expected ConfigEntry type in incremental_configs field, index {index}")
            operation = entry.incremental_operation
            value = getattr(operation, "value", None)
            if not isinstance(value, int):
                raise TypeError("Required attribute .value missing" if value is None
                                else f"Expected .value to be int type, not {type(value).__name__}")
            name = entry.name
            if not isinstance(name, str):
                raise TypeError(f"Expected .name to be str type, not {type(name).__name__}")
            text = entry.value
            if value != AlterConfigOpType.DELETE.value:
                if not isinstance(text, str):
                    raise TypeError(f"Expected .value to be str type, not {type(text).__name__}")
            problem = None
            if not 0 <= value <= 3:
                problem = "Invalid alter config operation type"
            elif not name:
                problem = "Config name mustn't be empty"
            if problem is not None:
                raise ValueError(f'setting config entry "{name}", index {index}, failed: {problem}')
            out.append({"name": name, "config_operation": value,
                        "value": text if value != AlterConfigOpType.DELETE.value else None})
        return out
