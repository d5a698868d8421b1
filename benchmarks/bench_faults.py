"""The fault suite's scenarios with bigger volumes: one accounting row per scenario, as a markdown table.

Runs in: this process, which runs tests/fault/test_fault_suite.py under pytest with ``KQ_FAULT_MESSAGES`` /
``KQ_FAULT_RATE`` raised (the CI run uses 2,000 messages at 2,000 msg/s) and ``KQ_FAULT_TABLE`` pointing at
the table it prints; the brokers (mock cluster, Tansu behind the fault proxy) and clients are child processes.
Every scenario's assertions still hold at these volumes (a failing one is reported by pytest's summary).

    python benchmarks/bench_faults.py --messages 20000 --rate 5000 [--table /tmp/fault-table.md] [-k leader]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HEADER = ("| scenario | client | config | fault | sent | acked | lost | duplicated | failed | unresolved | skips "
          "| repeats | stall s |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--rate", type=int, default=5_000, help="messages per second")
    parser.add_argument("--table", default=None, help="write the table here too")
    parser.add_argument("-k", default=None, help="pytest -k expression: a subset of the scenarios")
    args = parser.parse_args()
    rows = Path(tempfile.mkstemp(suffix=".md")[1])
    env = dict(os.environ, KQ_FAULT_MESSAGES=str(args.messages), KQ_FAULT_RATE=str(args.rate),
               KQ_FAULT_TABLE=str(rows),
               PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    command = [sys.executable, "-m", "pytest", str(ROOT / "tests/fault/test_fault_suite.py"), "-q",
               "-p", "no:cacheprovider", "-o", "timeout=900"]
    if args.k:
        command += ["-k", args.k]
    started = time.monotonic()
    done = subprocess.run(command, env=env, cwd=ROOT, capture_output=True, text=True)
    table = HEADER + rows.read_text()
    rows.unlink()
    summary = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else done.stderr[-500:]
    print(f"{args.messages} messages at {args.rate} msg/s per scenario; {time.monotonic() - started:.0f} s; "
          f"pytest: {summary}\n")
    print(table)
    if args.table:
        Path(args.table).write_text(table)
    if done.returncode not in (0,):
        print(done.stdout[-4000:])
    return done.returncode


if __name__ == "__main__":
    sys.exit(main())
