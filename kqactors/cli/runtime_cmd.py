"""``kqactors runtime --dir DIR``: run a shared runtime in the foreground (SIGTERM or Ctrl+C stops it).

Runs in: the user's shell process, which becomes the shared runtime's server (kqactors/runtime/shared.py).
Clients created with ``"kqactors.runtime.dir": DIR`` attach to it instead of starting their own hosts; producers
with the same settings share one group of actors (broker connections, toppars). ``--status`` prints a running
runtime's state.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from typing import Any


def add_parser(subparsers: Any) -> None:
    cmd = subparsers.add_parser(
        "runtime", help="run a shared runtime that clients attach to (kqactors.runtime.dir)",
        description="Run a shared actor runtime in the foreground. Producers and consumers created with "
                    "\"kqactors.runtime.dir\": DIR attach to it in milliseconds instead of starting their own "
                    "host processes. SIGTERM or Ctrl+C stops it.")
    cmd.add_argument("--dir", required=True, help="the runtime's directory (created 0700, 0770 with --group)")
    cmd.add_argument("--hosts", type=int, default=max(1, (os.cpu_count() or 1) - 1),
                     help="toppar host processes besides the main host (default: cores - 1; 0 = main only)")
    cmd.add_argument("--group", default=None, help="also let this group's members attach (directory 0770)")
    cmd.add_argument("--group-linger", type=float, default=0.0, metavar="SECONDS",
                     help="keep a shared producer group (its broker connections, toppars) this long after its "
                          "last client left, for the next one (default 0: stop it at once)")
    cmd.add_argument("--log-level", default="WARNING", help="the hosts' Python log level (default WARNING)")
    cmd.add_argument("--status", action="store_true",
                     help="print the running runtime's state as JSON (attached clients, hosts, shared groups) "
                          "and exit")
    cmd.set_defaults(handler=run)


def run(options: argparse.Namespace) -> int:
    from kqactors.runtime.op import ActorError
    from kqactors.runtime.shared import RuntimeServer, runtime_status

    if options.status:
        try:
            print(json.dumps(runtime_status(options.dir), indent=2, sort_keys=True))
        except ActorError as exc:
            print(f"kqactors runtime: {exc.message or exc.code}", file=sys.stderr)
            return 1
        return 0

    logging.basicConfig(level=options.log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if options.group_linger < 0:
        print("kqactors runtime: --group-linger must be >= 0", file=sys.stderr)
        return 2
    server = RuntimeServer(options.dir, hosts=options.hosts, group=options.group, log_level=options.log_level,
                           group_linger=options.group_linger)
    try:
        print(f"kqactors runtime: serving {os.path.abspath(options.dir)} (pid {os.getpid()}, "
              f"{options.hosts} toppar hosts)", file=sys.stderr, flush=True)
        return server.run()
    except (RuntimeError, KeyError, PermissionError) as exc:
        print(f"kqactors runtime: {exc}", file=sys.stderr)
        return 1
