"""Runs in: tests. Hypothesis strategies built from the generated classes' field schemas.

For a message class and a version, every field present in that version (regular or tagged) gets a value
drawn from a strategy for its spec type and nullability; absent fields keep their defaults (which is what
a decoder reconstructs for them).
"""

from __future__ import annotations

from hypothesis import strategies as st

from kqactors.protocol.base import FieldSchema, Struct, in_range

_INT_BOUNDS = {
    "int8": (-(1 << 7), (1 << 7) - 1), "int16": (-(1 << 15), (1 << 15) - 1),
    "int32": (-(1 << 31), (1 << 31) - 1), "int64": (-(1 << 63), (1 << 63) - 1),
    "uint16": (0, (1 << 16) - 1), "uint32": (0, (1 << 32) - 1),
}
_TEXT = st.text(max_size=6)


def scalar_strategy(type_name: str) -> st.SearchStrategy:
    if type_name in _INT_BOUNDS:
        low, high = _INT_BOUNDS[type_name]
        return st.integers(low, high)
    if type_name == "bool":
        return st.booleans()
    if type_name == "float64":
        return st.floats(allow_nan=False)
    if type_name == "string":
        return _TEXT
    if type_name in ("bytes", "records"):
        return st.binary(max_size=8)
    if type_name == "uuid":
        return st.binary(min_size=16, max_size=16)
    raise ValueError(f"no strategy for {type_name}")


def field_strategy(schema: FieldSchema, version: int, flexible: bool, depth: int) -> st.SearchStrategy:
    nullable = in_range(version, schema.nullable)
    if schema.type.startswith("[]"):
        if schema.struct is not None:
            element = struct_strategy(schema.struct, version, flexible, depth + 1)
        else:
            element = scalar_strategy(schema.type[2:])
        base = st.lists(element, max_size=2 if depth else 3)
    elif schema.struct is not None:
        base = struct_strategy(schema.struct, version, flexible, depth + 1)
    else:
        base = scalar_strategy(schema.type)
        if schema.type == "records":
            nullable = True  # record sets are always encoded as nullable bytes
    return st.none() | base if nullable else base


def present(schema: FieldSchema, version: int, flexible: bool) -> bool:
    return in_range(version, schema.versions) or (flexible and in_range(version, schema.tagged))


def struct_strategy(cls: type[Struct], version: int, flexible: bool, depth: int = 0) -> st.SearchStrategy:
    fields = {f.name: field_strategy(f, version, flexible, depth) for f in cls._SCHEMA
              if present(f, version, flexible)}
    return st.fixed_dictionaries(fields).map(lambda kwargs: cls(**kwargs))


def message_strategy(cls, version: int) -> st.SearchStrategy:
    return struct_strategy(cls, version, cls.is_flexible(version))
