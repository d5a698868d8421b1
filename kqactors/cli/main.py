"""The ``kqactors`` command: argparse front door that dispatches to one module per subcommand.

Runs in: the user's shell process. Owns only argument parsing and dispatch; each subcommand module exposes
``add_parser(subparsers)`` (registering its options and setting ``handler``) so new subcommands (e.g.
``perf produce``) plug in without touching the others.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from kqactors import __version__
from kqactors.cli import admin_cmd, broker, cat, ingest, perf, runtime_cmd

_SUBCOMMANDS = (broker, perf, runtime_cmd, ingest, cat, admin_cmd)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kqactors", description="kqactors: a Kafka client with librdkafka's semantics, on processes."
    )
    parser.add_argument("--version", action="version", version=f"kqactors {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module in _SUBCOMMANDS:
        module.add_parser(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    options = parser.parse_args(argv)
    handler = getattr(options, "handler", None)
    if handler is None:
        parser.print_help(sys.stderr)
        return 2
    try:
        return int(handler(options) or 0)
    except KeyboardInterrupt:  # Ctrl-C where a subcommand does not handle it itself: no traceback
        print(file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
