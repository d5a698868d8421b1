"""ACL bindings and filters (create_acls, describe_acls, delete_acls) and their enums.

Runs in: the app process. AclBinding and AclBindingFilter check and convert their fields on construction as
confluent-kafka's do (enum members, names or values; None and non-str values refused; the enum values a
binding or a filter may not hold raise ValueError), compare and hash by their seven fields and sort by them.
"""

from __future__ import annotations

import functools
from enum import Enum
from typing import Any

from kqactors.admin._resource import ResourcePatternType, ResourceType
from kqactors.admin._util import OrderedEnum, to_enum


class AclOperation(OrderedEnum):
    """What an ACL allows or denies."""

    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12


class AclPermissionType(OrderedEnum):
    """Whether an ACL allows or denies."""

    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


_FIELDS = ("restype", "name", "resource_pattern_type", "principal", "host", "operation", "permission_type")
_ENUMS = {"restype": ResourceType, "resource_pattern_type": ResourcePatternType, "operation": AclOperation,
          "permission_type": AclPermissionType}


@functools.total_ordering
class AclBinding:
    """An ACL: ``principal`` may (``permission_type``) perform ``operation`` from ``host`` on the resources
    of type ``restype`` named ``name`` (matched per ``resource_pattern_type``)."""

    _REQUIRED: tuple[str, ...] = _FIELDS
    _FORBIDDEN: dict[str, tuple[Enum, ...]] = {
        "restype": (ResourceType.ANY,),
        "resource_pattern_type": (ResourcePatternType.ANY, ResourcePatternType.MATCH),
        "operation": (AclOperation.ANY,),
        "permission_type": (AclPermissionType.ANY,),
    }

    def __init__(self, restype: ResourceType | str | int, name: str | None,
                 resource_pattern_type: ResourcePatternType | str | int, principal: str | None, host: str | None,
                 operation: AclOperation | str | int, permission_type: AclPermissionType | str | int) -> None:
        self.restype = restype
        self.name = name
        self.resource_pattern_type = resource_pattern_type
        self.principal = principal
        self.host = host
        self.operation = operation
        self.permission_type = permission_type
        for field in self._REQUIRED:
            if getattr(self, field) is None:
                raise ValueError(f"Expected {field} to be not None")
        for field in ("name", "principal", "host"):
            value = getattr(self, field)
            if value is not None and not isinstance(value, str):
                raise TypeError(f"Expected {field} to be a string")
        for field, enum_cls in _ENUMS.items():
            setattr(self, field, to_enum(getattr(self, field), enum_cls))
        for field, members in self._FORBIDDEN.items():
            value = getattr(self, field)
            if value in members:
                raise ValueError(f"Cannot use enum {field}, value {value.name} in this class")
        # the enums' values, as confluent-kafka's bindings carry them
        self.restype_int = int(self.restype.value)
        self.resource_pattern_type_int = int(self.resource_pattern_type.value)
        self.operation_int = int(self.operation.value)
        self.permission_type_int = int(self.permission_type.value)

    def _to_tuple(self) -> tuple[Any, ...]:
        return tuple(getattr(self, field) for field in _FIELDS)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({','.join(str(v) for v in self._to_tuple())})"

    def __hash__(self) -> int:
        return hash(self._to_tuple())

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, AclBinding):
            return NotImplemented
        return self._to_tuple() == other._to_tuple()

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, AclBinding):
            return NotImplemented
        return self._to_tuple() < other._to_tuple()


class AclBindingFilter(AclBinding):
    """A filter over ACL bindings: None strings match any value, the ANY members any member; a
    ResourcePatternType.MATCH pattern matches literal, wildcard and prefixed bindings of the name."""

    _REQUIRED = ("restype", "resource_pattern_type", "operation", "permission_type")
    _FORBIDDEN = {
        "restype": (ResourceType.UNKNOWN,),
        "resource_pattern_type": (ResourcePatternType.UNKNOWN,),
        "operation": (AclOperation.UNKNOWN,),
        "permission_type": (AclPermissionType.UNKNOWN,),
    }
