"""Runs in: every Python process started with this directory on PYTHONPATH (benchmarks/profile_produce.py
--profile-hosts puts it there for kqactors' host processes). Owns nothing else: when KQACTORS_PROFILE_DIR is
set and this is a host process, profile its main thread with cProfile and dump the stats at exit to
``<dir>/<host key>.pstats``.
"""

from __future__ import annotations

import atexit
import cProfile
import os
import sys


def _start() -> None:
    out_dir = os.environ.get("KQACTORS_PROFILE_DIR")
    argv = getattr(sys, "orig_argv", sys.argv)
    if not out_dir or "kqactors.runtime.host_process" not in argv:
        return
    key = argv[argv.index("--key") + 1] if "--key" in argv else str(os.getpid())
    profiler = cProfile.Profile()
    profiler.enable()

    def dump() -> None:
        profiler.disable()
        profiler.dump_stats(os.path.join(out_dir, f"{key}-{os.getpid()}.pstats"))

    atexit.register(dump)


_start()
