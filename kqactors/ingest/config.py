"""The ingestion daemon's configuration: a TOML file and/or the command line → ``IngestConfig``.

Runs in: the supervisor process (parsing, validation, grouping) and the worker processes (``from_dict`` of the
spec the supervisor hands them). Owns the schema: the daemon's settings (top-level keys), the producer's
properties (``[kafka]``, librdkafka names, ``-X`` wins), and the sources (``[[source]]``: file/glob, stdin, tcp,
udp, http), and which worker process runs which sources (``worker_groups``). Pure: no sockets, no processes.

Unknown keys are errors (a typo must not silently drop a setting); every error names the source and the key.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kqactors.ingest.transform import TransformError, compile_transforms

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised only on Python 3.10
    import tomli as tomllib

__all__ = ["ConfigError", "IngestConfig", "SourceSpec", "WorkerSpec", "load_config", "parse_config",
           "worker_groups", "SOURCE_TYPES"]

SOURCE_TYPES = ("file", "stdin", "tcp", "udp", "http")
LOG_FORMATS = ("json", "text")
START_AT = ("beginning", "end")
DELIVERY_ERROR_POLICIES = ("retry", "drop")

#: Producer properties the daemon sets when the configuration does not: idempotence keeps a partition's lines
#: in order and free of duplicates from the producer's own retries; the queue bounds are the daemon's memory
#: bound (a source stops reading when produce() raises BufferError).
PRODUCER_DEFAULTS: dict[str, Any] = {
    "enable.idempotence": True,
    "queue.buffering.max.messages": 100_000,
    "queue.buffering.max.kbytes": 65_536,
}


class ConfigError(ValueError):
    """The configuration cannot be used; the message says where and why."""


@dataclass(frozen=True)
class SourceSpec:
    """One source: where lines come from and what becomes of them."""

    name: str
    type: str
    topic: str
    paths: tuple[str, ...] = ()
    start_at: str = "beginning"
    listen: str = ""
    http_path: str = "/"
    max_body_bytes: int = 16 * 1024 * 1024
    max_connections: int = 256
    key_field: str = ""
    headers: tuple[tuple[str, str], ...] = ()
    transforms: tuple[Mapping[str, Any], ...] = ()
    rate_limit: float = 0.0
    rate_burst: int = 0
    max_line_bytes: int = 1024 * 1024
    group: str = ""
    on_delivery_error: str = "retry"

    @property
    def host_port(self) -> tuple[str, int]:
        host, _, port = self.listen.rpartition(":")
        return host.strip("[]") or "0.0.0.0", int(port)

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["paths"] = list(self.paths)
        out["headers"] = [list(h) for h in self.headers]
        out["transforms"] = [dict(t) for t in self.transforms]
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SourceSpec:
        values = dict(data)
        values["paths"] = tuple(values.get("paths", ()))
        values["headers"] = tuple(tuple(h) for h in values.get("headers", ()))
        values["transforms"] = tuple(dict(t) for t in values.get("transforms", ()))
        return cls(**values)


@dataclass(frozen=True)
class IngestConfig:
    """The daemon's whole configuration (after the command line was merged in)."""

    sources: tuple[SourceSpec, ...]
    kafka: Mapping[str, Any]
    state_dir: str = ""
    workers: int = 0                    # 0: one per source (or group), at most the number of cores
    checkpoint_interval_ms: int = 100
    drain_timeout_s: float = 30.0
    poll_interval_ms: int = 250
    rotate_wait_s: float = 5.0
    glob_interval_s: float = 2.0
    read_bytes: int = 256 * 1024
    chunk_lines: int = 256
    fsync: bool = True
    retry_backoff_ms: int = 1000
    metrics_port: int = 0               # 0: no Prometheus endpoint
    metrics_host: str = "0.0.0.0"
    metrics_interval_s: float = 0.5
    log_format: str = "json"
    log_level: str = "INFO"
    progress: bool | None = None        # None: when stderr is a terminal
    once: bool = False
    config_path: str = ""

    def settings(self) -> dict[str, Any]:
        """The worker-wide settings, as plain data (what a worker needs besides its sources)."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name not in ("sources",)}
        out["kafka"] = dict(self.kafka)
        return out


@dataclass(frozen=True)
class WorkerSpec:
    """What one worker process runs: its group's sources and the shared settings."""

    group: str
    sources: tuple[SourceSpec, ...]
    settings: Mapping[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return {"group": self.group, "sources": [s.to_dict() for s in self.sources],
                "settings": dict(self.settings)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> WorkerSpec:
        return cls(data["group"], tuple(SourceSpec.from_dict(s) for s in data["sources"]), dict(data["settings"]))


# ---- parsing -----------------------------------------------------------------------------------------------
_TOP_KEYS = {f.name for f in dataclasses.fields(IngestConfig)} - {"sources", "kafka", "config_path"}
_TOP_KEYS |= {"topic", "kafka", "source"}
_SOURCE_KEYS = {f.name for f in dataclasses.fields(SourceSpec)} | {"path"}


def load_config(path: str, overrides: Mapping[str, Any] | None = None) -> IngestConfig:
    """Read a TOML file; ``overrides`` (from the command line) win over the file."""
    try:
        with open(path, "rb") as f:
            data = tomllib.load(f)
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    return parse_config(data, overrides, config_path=os.path.abspath(path))


def parse_config(data: Mapping[str, Any], overrides: Mapping[str, Any] | None = None, *,
                 config_path: str = "") -> IngestConfig:
    """A parsed TOML document (or any mapping of the same shape) plus command-line overrides → IngestConfig.

    ``overrides`` may hold: ``bootstrap`` (bootstrap.servers), ``topic`` (default topic), ``state_dir``,
    ``properties`` (-X pairs), ``paths`` (positional PATHs: file sources, ``-`` for stdin), and any top-level
    setting by name (``workers``, ``metrics_port``, ``once``, ``log_format``, ...). None values are ignored.
    """
    overrides = {k: v for k, v in (overrides or {}).items() if v is not None}
    unknown = set(data) - _TOP_KEYS
    if unknown:
        raise ConfigError(f"unknown top-level key(s): {', '.join(sorted(unknown))}")
    kafka = dict(_table(data.get("kafka", {}), "[kafka]"))
    for key, value in kafka.items():
        if not isinstance(value, (str, int, float, bool)):
            raise ConfigError(f"[kafka] {key}: a property value must be a string, number or boolean")
    if "bootstrap" in overrides:
        kafka["bootstrap.servers"] = overrides["bootstrap"]
    kafka.update(overrides.get("properties", {}))
    if not kafka.get("bootstrap.servers"):
        raise ConfigError("no bootstrap servers: give -b HOST:PORT or bootstrap.servers in [kafka]")
    for key, value in PRODUCER_DEFAULTS.items():
        kafka.setdefault(key, value)

    top: dict[str, Any] = {k: v for k, v in data.items() if k not in ("kafka", "source", "topic")}
    for key in _TOP_KEYS - {"kafka", "source", "topic"}:
        if key in overrides:
            top[key] = overrides[key]
    default_topic = overrides.get("topic", data.get("topic", ""))
    if default_topic and not isinstance(default_topic, str):
        raise ConfigError("topic: must be a string")

    raw_sources = data.get("source", [])
    if not isinstance(raw_sources, list):
        raise ConfigError("source: must be an array of tables ([[source]])")
    raw_sources = list(raw_sources)
    for path in overrides.get("paths", ()):
        raw_sources.append({"type": "stdin", "name": "stdin"} if path == "-"
                           else {"type": "file", "paths": [path], "name": path})
    if not raw_sources:
        raise ConfigError("no sources: give PATH arguments or [[source]] tables in the config file")
    sources = tuple(_parse_source(raw, i, default_topic) for i, raw in enumerate(raw_sources))
    _check_sources(sources)

    settings = _parse_settings(top)
    if any(s.type == "file" for s in sources) and not settings["state_dir"]:
        raise ConfigError("file sources need a state directory: give --state-dir DIR or state_dir")
    if settings["once"] and any(s.type not in ("file", "stdin") for s in sources):
        raise ConfigError("--once reads files and stdin to their end; it cannot be used with tcp/udp/http sources")
    return IngestConfig(sources=sources, kafka=kafka, config_path=config_path, **settings)


def _table(value: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ConfigError(f"{where}: must be a table")
    return value


def _parse_settings(top: Mapping[str, Any]) -> dict[str, Any]:
    defaults = {f.name: f.default for f in dataclasses.fields(IngestConfig)
                if f.name not in ("sources", "kafka", "config_path")}
    out = dict(defaults)
    for key, value in top.items():
        default = defaults[key]
        out[key] = _coerce(value, default, key)
    if isinstance(out["workers"], str):
        if out["workers"] != "auto":
            raise ConfigError("workers: a number of processes or \"auto\"")
        out["workers"] = 0
    positive = ("checkpoint_interval_ms", "poll_interval_ms", "read_bytes", "chunk_lines", "metrics_interval_s")
    for key in positive:
        if out[key] <= 0:
            raise ConfigError(f"{key}: must be > 0")
    for key in ("workers", "drain_timeout_s", "rotate_wait_s", "glob_interval_s", "retry_backoff_ms"):
        if out[key] < 0:
            raise ConfigError(f"{key}: must be >= 0")
    if not 0 <= out["metrics_port"] <= 65535:
        raise ConfigError("metrics_port: must be 0..65535")
    if out["log_format"] not in LOG_FORMATS:
        raise ConfigError(f"log_format: one of {', '.join(LOG_FORMATS)}")
    out["log_level"] = str(out["log_level"]).upper()
    if out["log_level"] not in ("DEBUG", "INFO", "WARNING", "ERROR"):
        raise ConfigError("log_level: DEBUG, INFO, WARNING or ERROR")
    if out["state_dir"]:
        out["state_dir"] = os.path.abspath(os.path.expanduser(out["state_dir"]))
    return out


def _coerce(value: Any, default: Any, key: str) -> Any:
    """A setting's value checked against its default's type (ints accepted for floats)."""
    if key == "workers" and isinstance(value, str):
        return value
    if key == "progress":
        if value is None or isinstance(value, bool):
            return value
        raise ConfigError("progress: true or false")
    if isinstance(default, bool):
        if not isinstance(value, bool):
            raise ConfigError(f"{key}: true or false")
        return value
    if isinstance(default, int):
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{key}: must be an integer")
        return value
    if isinstance(default, float):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{key}: must be a number")
        return float(value)
    if not isinstance(value, str):
        raise ConfigError(f"{key}: must be a string")
    return value


def _parse_source(raw: Any, index: int, default_topic: str) -> SourceSpec:
    raw = dict(_table(raw, f"source #{index + 1}"))
    where = f"source #{index + 1}" + (f" ({raw['name']!r})" if isinstance(raw.get("name"), str) else "")
    unknown = set(raw) - _SOURCE_KEYS
    if unknown:
        raise ConfigError(f"{where}: unknown key(s): {', '.join(sorted(unknown))}")
    if "path" in raw:
        if "paths" in raw:
            raise ConfigError(f"{where}: give path or paths, not both")
        raw["paths"] = [raw.pop("path")]
    kind = raw.get("type", "file" if raw.get("paths") else "")
    if kind not in SOURCE_TYPES:
        raise ConfigError(f"{where}: type must be one of {', '.join(SOURCE_TYPES)}")
    raw["type"] = kind
    raw.setdefault("name", f"{kind}-{index + 1}")
    raw.setdefault("topic", default_topic)
    defaults = {f.name: f.default for f in dataclasses.fields(SourceSpec) if f.default is not dataclasses.MISSING}
    values: dict[str, Any] = {}
    for key, value in raw.items():
        if key == "paths":
            if isinstance(value, str) or not isinstance(value, Sequence) or \
                    not all(isinstance(p, str) and p for p in value):
                raise ConfigError(f"{where}: paths must be a list of non-empty strings")
            values["paths"] = tuple(value)
        elif key == "headers":
            if not isinstance(value, Mapping) or not all(isinstance(v, str) for v in value.values()):
                raise ConfigError(f"{where}: headers must be a table of strings")
            values["headers"] = tuple((str(k), v) for k, v in value.items())
        elif key == "transforms":
            if not isinstance(value, list):
                raise ConfigError(f"{where}: transforms must be an array of tables")
            values["transforms"] = tuple(dict(_table(t, f"{where} transforms")) for t in value)
        elif key in ("name", "type", "topic"):
            if not isinstance(value, str):
                raise ConfigError(f"{where}: {key} must be a string")
            values[key] = value
        else:
            try:
                values[key] = _coerce(value, defaults[key], key)
            except ConfigError as exc:
                raise ConfigError(f"{where}: {exc}") from None
    spec = SourceSpec(**values)
    _check_source(spec, where)
    return spec


def _check_source(spec: SourceSpec, where: str) -> None:
    if not spec.name:
        raise ConfigError(f"{where}: name must not be empty")
    if not spec.topic:
        raise ConfigError(f"{where}: no topic: give -t TOPIC, a top-level topic or the source's topic")
    if spec.type == "file" and not spec.paths:
        raise ConfigError(f"{where}: a file source needs paths")
    if spec.type != "file" and spec.paths:
        raise ConfigError(f"{where}: paths are for file sources")
    if spec.type in ("tcp", "udp", "http"):
        host, sep, port = spec.listen.rpartition(":")
        if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
            raise ConfigError(f"{where}: listen must be HOST:PORT (e.g. 0.0.0.0:5170)")
    elif spec.listen:
        raise ConfigError(f"{where}: listen is for tcp, udp and http sources")
    if spec.start_at not in START_AT:
        raise ConfigError(f"{where}: start_at must be one of {', '.join(START_AT)}")
    if spec.on_delivery_error not in DELIVERY_ERROR_POLICIES:
        raise ConfigError(f"{where}: on_delivery_error must be one of {', '.join(DELIVERY_ERROR_POLICIES)}")
    if not spec.http_path.startswith("/"):
        raise ConfigError(f"{where}: http_path must start with /")
    for key in ("max_body_bytes", "max_connections", "max_line_bytes"):
        if getattr(spec, key) <= 0:
            raise ConfigError(f"{where}: {key} must be > 0")
    if spec.rate_limit < 0 or spec.rate_burst < 0:
        raise ConfigError(f"{where}: rate_limit and rate_burst must be >= 0")
    try:
        compile_transforms(spec.transforms, spec.key_field)
    except TransformError as exc:
        raise ConfigError(f"{where}: {exc}") from None


def _check_sources(sources: Sequence[SourceSpec]) -> None:
    names = [s.name for s in sources]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ConfigError(f"source names must be unique: {', '.join(duplicates)}")
    if sum(s.type == "stdin" for s in sources) > 1:
        raise ConfigError("at most one stdin source")
    seen: dict[tuple[str, str], str] = {}
    for s in sources:
        if s.type in ("tcp", "udp", "http"):
            proto = "udp" if s.type == "udp" else "tcp"
            port = s.listen.rpartition(":")[2]
            if port != "0" and (proto, port) in seen:
                raise ConfigError(f"sources {seen[(proto, port)]!r} and {s.name!r} listen on the same {proto} port")
            seen[(proto, port)] = s.name


# ---- grouping ----------------------------------------------------------------------------------------------
def worker_groups(config: IngestConfig, cpu_count: int | None = None) -> list[WorkerSpec]:
    """Sources → worker processes. Sources naming a ``group`` share that group's worker; the others are dealt
    round-robin over ``workers`` processes (minus the named groups), or, with ``workers`` 0 ("auto"), one worker
    each up to the number of cores. Stable for an unchanged configuration (a reload restarts only the groups
    whose spec changed)."""
    cores = cpu_count or os.cpu_count() or 1
    named: dict[str, list[SourceSpec]] = {}
    loose: list[SourceSpec] = []
    for s in config.sources:
        if s.group:
            named.setdefault(s.group, []).append(s)
        else:
            loose.append(s)
    if loose:
        slots = config.workers - len(named) if config.workers else min(len(loose), cores)
        slots = max(1, min(slots, len(loose)))
    else:
        slots = 0
    groups: list[tuple[str, list[SourceSpec]]] = [(name, members) for name, members in named.items()]
    auto: list[list[SourceSpec]] = [[] for _ in range(slots)]
    for i, s in enumerate(loose):
        auto[i % slots].append(s)
    groups.extend((f"w{i}", members) for i, members in enumerate(auto))
    settings = config.settings()
    kafka = dict(settings["kafka"])
    if "kqactors.hosts" not in kafka:
        # Each worker runs its own producer. A worker's app thread (read, produce, delivery reports) and its main
        # host (broker connection) take about a core each; toppar hosts only pay off on the cores left over
        # (on 2 cores with the broker beside it, 0 hosts ran 1M lines in 1.8 s, 1 host 2.7 s, 2 hosts 2.9 s).
        kafka["kqactors.hosts"] = max(0, cores // max(1, len(groups)) - 2)
    settings["kafka"] = kafka
    return [WorkerSpec(name, tuple(members), settings) for name, members in groups]
