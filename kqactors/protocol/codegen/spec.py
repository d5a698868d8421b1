"""Runs in: the code generator (developer tool). Owns parsing the Kafka JSON message specs into a model.

The specs are JSON with ``//`` comments; this module strips the comments, resolves nested and common
structs, and turns version strings ("0+", "3-5", "none") into inclusive ranges.
"""

from __future__ import annotations

import json
import keyword
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

MAX_VERSION = 0x7FFF
PRIMITIVES = ("bool", "int8", "int16", "uint16", "int32", "uint32", "int64", "float64", "uuid", "string",
              "bytes", "records")
FIXED_CODES = {"bool": "?", "int8": "b", "int16": "h", "uint16": "H", "int32": "i", "uint32": "I",
               "int64": "q", "float64": "d"}
FIXED_SIZES = {"?": 1, "b": 1, "h": 2, "H": 2, "i": 4, "I": 4, "q": 8, "d": 8}

Span = tuple[int, int] | None


def parse_versions(text: str | None) -> Span:
    """'0+' → (0, MAX), '3-5' → (3, 5), '4' → (4, 4), 'none'/None → None."""
    if text is None:
        return None
    text = text.strip()
    if text == "none" or not text:
        return None
    if text.endswith("+"):
        return int(text[:-1]), MAX_VERSION
    if "-" in text:
        low, high = text.split("-", 1)
        return int(low), int(high)
    return int(text), int(text)


def in_span(version: int, span: Span) -> bool:
    return span is not None and span[0] <= version <= span[1]


def strip_comments(text: str) -> str:
    """Remove // comments that are outside JSON strings."""
    out: list[str] = []
    in_string = escaped = False
    i = 0
    while i < len(text):
        ch = text[i]
        if in_string:
            out.append(ch)
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
            out.append(ch)
        elif ch == "/" and text.startswith("//", i):
            newline = text.find("\n", i)
            i = len(text) if newline < 0 else newline
            continue
        else:
            out.append(ch)
        i += 1
    return "".join(out)


def snake_case(name: str) -> str:
    name = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1_\2", name)
    name = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", name).lower()
    return name + "_" if keyword.iskeyword(name) else name


@dataclass
class StructSpec:
    name: str  # spec name
    fields: list[FieldSpec]
    class_name: str = ""  # unique python class name within the generated module


@dataclass
class FieldSpec:
    name: str
    attr: str
    type: str  # as in the spec, e.g. "[]int32", "Foo", "string"
    versions: Span
    nullable: Span
    tagged: Span
    tag: int | None
    ignorable: bool
    default_text: str | None
    flexible_override: Span | str  # "inherit" or an explicit span (e.g. ClientId: none)
    struct: StructSpec | None = None

    @property
    def is_array(self) -> bool:
        return self.type.startswith("[]")

    @property
    def element_type(self) -> str:
        return self.type[2:] if self.is_array else self.type

    @property
    def is_struct(self) -> bool:
        return self.struct is not None


@dataclass
class MessageSpec:
    name: str
    message_type: str  # request / response / header / data
    api_key: int | None
    valid: tuple[int, int]
    flexible: Span
    root: StructSpec
    structs: list[StructSpec] = field(default_factory=list)  # all nested structs, definition order

    def versions(self) -> range:
        return range(self.valid[0], self.valid[1] + 1)


def load_spec(path: Path) -> MessageSpec:
    raw = json.loads(strip_comments(path.read_text(encoding="utf-8")))
    common = {s["name"]: s for s in raw.get("commonStructs", [])}
    structs: dict[str, StructSpec] = {}

    def build_fields(field_dicts: list[dict]) -> list[FieldSpec]:
        return [build_field(fd) for fd in field_dicts]

    def build_struct(name: str, field_dicts: list[dict] | None) -> StructSpec:
        if name in structs:
            return structs[name]
        if field_dicts is None:
            if name not in common:
                raise ValueError(f"{path.name}: struct {name} has no definition")
            field_dicts = common[name]["fields"]
        spec = StructSpec(name, [])
        structs[name] = spec
        spec.fields = build_fields(field_dicts)
        return spec

    def build_field(fd: dict) -> FieldSpec:
        ftype = fd["type"]
        flex = fd.get("flexibleVersions")
        spec = FieldSpec(
            name=fd["name"], attr=snake_case(fd["name"]), type=ftype,
            versions=parse_versions(fd.get("versions")), nullable=parse_versions(fd.get("nullableVersions")),
            tagged=parse_versions(fd.get("taggedVersions")), tag=fd.get("tag"),
            ignorable=bool(fd.get("ignorable", False)), default_text=fd.get("default"),
            flexible_override="inherit" if flex is None else parse_versions(flex),
        )
        element = ftype[2:] if ftype.startswith("[]") else ftype
        if element not in PRIMITIVES:
            spec.struct = build_struct(element, fd.get("fields"))
        return spec

    root = StructSpec(raw["name"], build_fields(raw.get("fields", [])))
    return MessageSpec(
        name=raw["name"], message_type=raw["type"], api_key=raw.get("apiKey"),
        valid=parse_versions(raw["validVersions"]) or (0, 0), flexible=parse_versions(raw.get("flexibleVersions")),
        root=root, structs=list(structs.values()),
    )


def default_specs_dir() -> Path:
    """KQ_PROTOCOL_SPECS, else <repo>/../shared/kafka-protocol/message."""
    env = os.environ.get("KQ_PROTOCOL_SPECS")
    if env:
        return Path(env)
    repo = Path(__file__).resolve().parents[3]
    return repo.parent / "shared" / "kafka-protocol" / "message"
