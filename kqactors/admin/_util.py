"""Helpers of the admin value types: an enum from its member, name or value (confluent-kafka accepts all three).

Runs in: the app process.
"""

from __future__ import annotations

from enum import Enum
from typing import Any, TypeVar

E = TypeVar("E", bound=Enum)


def to_enum(value: Any, enum_cls: type[E]) -> E:
    """``value`` as a member of ``enum_cls``: a member, a case-insensitive name, or an int value."""
    if isinstance(value, str):
        try:
            return enum_cls[value.upper()]
        except KeyError:
            raise ValueError(f'Unknown value "{value}": should be a {enum_cls.__name__}') from None
    if isinstance(value, int) and not isinstance(value, Enum):
        return enum_cls(value)
    if not isinstance(value, enum_cls):
        raise TypeError(f'Unknown value "{value}": should be a {enum_cls.__name__}')
    return value


class OrderedEnum(Enum):
    """An Enum whose members order by value (confluent-kafka's admin enums define ``<``)."""

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, type(self)):
            return NotImplemented
        return self.value < other.value
