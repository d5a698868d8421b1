"""Shared plumbing of the per-client produce runners: arguments, payloads, and the harness handshake.

Runs in: one fresh benchmark runner process per measured run (started by benchmarks/harness.py). Owns the
line protocol on stdin/stdout that lets the harness measure only the produce phase:

    runner: READY            (client created, connected, topic metadata known, warm-up delivered)
    harness: GO
    runner: RESULT {json}    (all delivery reports in; the client is still open, so its processes live)
    harness: EXIT            (the runner closes the client and exits)
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from kqactors.cli.perf_payload import make_payloads

#: Messages delivered before READY so connection set-up and metadata are outside the measurement.
WARMUP_MESSAGES = 10
COMPRESSIONS = ("none", "gzip", "snappy", "lz4", "zstd")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="one produce benchmark run (driven by the harness)")
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--count", type=int, required=True)
    parser.add_argument("--size", type=int, required=True)
    parser.add_argument("--compression", choices=COMPRESSIONS, default="none")
    parser.add_argument("--batch-size", type=int, default=None,
                        help="batch size in bytes for kafka-python/aiokafka (default: the runner's choice)")
    parser.add_argument("--linger-ms", type=int, default=5,
                        help="every producer's linger (default 5, librdkafka's default written out)")
    args = parser.parse_args(argv)
    if args.count < 1 or args.size < 0:
        parser.error("--count must be >= 1 and --size >= 0")
    return args


def payloads_for(args: argparse.Namespace) -> list[bytes]:
    """The same payload set for every client (deterministic, semi-compressible)."""
    return make_payloads(args.size)


def announce_ready_and_wait() -> None:
    """Tell the harness set-up is done, then block until it says GO (it snapshots CPU in between)."""
    print("READY", flush=True)
    line = sys.stdin.readline().strip()
    if line != "GO":
        raise SystemExit(f"runner: expected GO from the harness, got {line!r}")


def report_and_wait(client: str, args: argparse.Namespace, delivered: int, errors: dict[str, int],
                    elapsed_s: float, **extra: Any) -> None:
    """Print the RESULT line, then wait for EXIT (or EOF) before the caller closes its client."""
    result = {"client": client, "count": args.count, "size": args.size, "compression": args.compression,
              "delivered": delivered, "errors": errors, "elapsed_s": elapsed_s, **extra}
    print("RESULT " + json.dumps(result), flush=True)
    sys.stdin.readline()


def error_name(error: Any) -> str:
    """A short grouping name for a delivery error of any client."""
    name = getattr(error, "name", None)
    if callable(name):
        name = name()
    return str(name) if name else type(error).__name__
