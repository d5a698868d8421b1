"""``kqactors broker``: run an embedded Tansu broker on loopback until Ctrl+C or SIGTERM.

Runs in: the user's shell process (Tansu is its child). Owns the broker's lifetime for the command: it
prints one line ``bootstrap.servers=127.0.0.1:PORT`` once the broker answers, then waits for a signal and
stops the broker (the broker also dies if this process is killed, via PR_SET_PDEATHSIG).
"""

from __future__ import annotations

import argparse
import signal
import socket
import sys
import threading
from typing import Any

from kqactors.testing.tansu import TansuBroker, TansuNotFound

__all__ = ["add_parser", "run"]


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "broker",
        help="run a throw-away Tansu broker (in-memory) on 127.0.0.1",
        description="Start an in-memory Tansu broker on 127.0.0.1, print its bootstrap address, "
        "and run until interrupted (Ctrl+C or SIGTERM).",
    )
    parser.add_argument("--port", type=int, default=None, help="listen port (default: a free port)")
    parser.add_argument(
        "--startup-timeout", type=float, default=20.0, help="seconds to wait for the broker to answer"
    )
    parser.set_defaults(handler=run)


def port_taken(port: int, host: str = "127.0.0.1") -> str | None:
    """Why Tansu could not listen on ``host:port`` (e.g. "Address already in use"), or None when it can."""
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as Tansu binds: TIME_WAIT is no obstacle
        try:
            probe.bind((host, port))
        except OSError as exc:
            return exc.strerror or str(exc)
    return None


def _start_failure(exc: BaseException, port: int | None) -> str:
    """One line for a broker that did not start (Tansu's own output, e.g. a Rust panic, stays in its log)."""
    text = str(exc)
    if port is not None and ("AddrInUse" in text or "Address in use" in text):
        return f"port {port} on 127.0.0.1 is already in use (choose another --port, or omit it for a free one)"
    return text.splitlines()[0] if text else type(exc).__name__


def run(options: argparse.Namespace) -> int:
    if options.port is not None and not 0 < options.port < 65536:
        print(f"kqactors broker: --port must be 1..65535, got {options.port}", file=sys.stderr)
        return 2
    if options.port is not None:
        problem = port_taken(options.port)
        if problem is not None:
            hint = " (choose another --port, or omit it for a free one)" if "in use" in problem else ""
            print(f"kqactors broker: cannot listen on 127.0.0.1:{options.port}: {problem}{hint}", file=sys.stderr)
            return 1
    stop_requested = threading.Event()

    def _request_stop(signum: int, frame: object) -> None:
        stop_requested.set()

    previous = {sig: signal.signal(sig, _request_stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    broker = TansuBroker(port=options.port, startup_timeout=options.startup_timeout)
    try:
        try:
            broker.start()
        except (TansuNotFound, RuntimeError, TimeoutError) as exc:
            print(f"kqactors broker: {_start_failure(exc, options.port)}", file=sys.stderr)
            return 1
        print(f"bootstrap.servers={broker.bootstrap}", flush=True)
        while not stop_requested.is_set():
            if not broker.is_running():
                print("kqactors broker: Tansu exited unexpectedly", file=sys.stderr)
                return 1
            stop_requested.wait(0.5)
        return 0
    finally:
        broker.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
