"""``kqactors ingest``: the ingestion daemon's command line.

Runs in: the user's shell process, which becomes the daemon's supervisor (``kqactors.ingest.supervisor``).
Owns the options and how they merge with a ``--config`` TOML file (the command line wins), ``--check-config``
(print the parsed configuration and its worker groups as JSON, exit 0; exit 2 on an error).

    kqactors ingest -b HOST:PORT -t TOPIC --state-dir DIR PATH...      follow files ("-" reads stdin)
    kqactors ingest --config /etc/kqactors/ingest/app.toml             the full form (docs: kqactors.ingest)
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

__all__ = ["add_parser", "run", "build_overrides"]

_SECRET_WORDS = ("password", "secret", "jaas", "token")


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "ingest", help="follow files, stdin and line listeners into Kafka (at-least-once)",
        description="Send every line of the given files (followed across appends, rotation and copytruncate) "
        "or stdin ('-') to a Kafka topic, one message per line. A file's position is saved in --state-dir once "
        "its lines are delivered, so a restart resumes there. --config FILE gives the full form: several "
        "sources (files/globs, stdin, tcp, udp, http), per-source topics, keys, transforms and rate limits.",
    )
    parser.add_argument("paths", nargs="*", metavar="PATH", help="files or globs to follow; '-' for stdin")
    parser.add_argument("-b", "--bootstrap", default=None, help="bootstrap.servers")
    parser.add_argument("-t", "--topic", default=None, help="topic (the default for every source)")
    parser.add_argument("--state-dir", default=None, help="where file positions are checkpointed")
    parser.add_argument("-c", "--config", default=None, metavar="FILE", help="TOML configuration file")
    parser.add_argument("-X", dest="properties", action="append", default=[], metavar="PROP=VAL",
                        help="producer property (librdkafka name, e.g. statistics.interval.ms=5000); repeatable")
    parser.add_argument("--workers", default=None, help="worker processes: a number or 'auto' (default)")
    parser.add_argument("--metrics-port", type=int, default=None, help="serve Prometheus metrics on this port")
    parser.add_argument("--metrics-host", default=None, help="address for the metrics (default 0.0.0.0)")
    parser.add_argument("--once", action="store_true", default=None,
                        help="read the files (and stdin) to their end, deliver, checkpoint and exit")
    parser.add_argument("--log-format", choices=("json", "text"), default=None, help="log format (default json)")
    parser.add_argument("--log-level", default=None, help="DEBUG, INFO (default), WARNING or ERROR")
    progress = parser.add_mutually_exclusive_group()
    progress.add_argument("--progress", dest="progress", action="store_true", default=None,
                          help="draw the progress line even when stderr is not a terminal")
    progress.add_argument("--no-progress", dest="progress", action="store_false",
                          help="no progress line (default: drawn when stderr is a terminal)")
    parser.add_argument("--check-config", action="store_true",
                        help="print the parsed configuration and worker groups as JSON and exit")
    parser.set_defaults(handler=run)


def build_overrides(options: argparse.Namespace) -> dict[str, Any]:
    """The command line's settings, in the shape ``parse_config`` takes (None: not given)."""
    properties: dict[str, str] = {}
    for item in options.properties:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"-X expects PROP=VALUE, got {item!r}")
        properties[key.strip()] = value
    workers: Any = options.workers
    if workers is not None and workers != "auto":
        try:
            workers = int(workers)
        except ValueError:
            raise ValueError(f"--workers expects a number or 'auto', got {workers!r}") from None
    return {"bootstrap": options.bootstrap, "topic": options.topic, "state_dir": options.state_dir,
            "properties": properties, "paths": options.paths, "workers": workers,
            "metrics_port": options.metrics_port, "metrics_host": options.metrics_host, "once": options.once,
            "log_format": options.log_format, "log_level": options.log_level, "progress": options.progress}


def run(options: argparse.Namespace) -> int:
    from kqactors.ingest.config import ConfigError, load_config, parse_config, worker_groups

    try:
        overrides = build_overrides(options)
    except ValueError as exc:
        print(f"kqactors ingest: {exc}", file=sys.stderr)
        return 2

    def load() -> Any:
        if options.config:
            return load_config(options.config, overrides)
        return parse_config({}, overrides)

    try:
        config = load()
    except ConfigError as exc:
        print(f"kqactors ingest: {exc}", file=sys.stderr)
        return 2
    if options.check_config:
        workers = [g.to_dict() for g in worker_groups(config)]
        for worker in workers:
            kafka = worker["settings"]["kafka"]
            for key in kafka:
                if any(word in key for word in _SECRET_WORDS):
                    kafka[key] = "[redacted]"
        print(json.dumps({"workers": workers}, indent=2, default=str))
        return 0
    from kqactors.ingest.supervisor import Supervisor

    return Supervisor(config, reload=load if options.config else None).run()
