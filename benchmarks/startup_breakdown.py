"""Where a kqactors producer's first delivery report goes: one run of benchmarks/clients/startup_runner.py
(``--producer-only``) under ``strace -f`` (system calls of the runner and its hosts, wall-clock stamped), cut into
phases. Runs in: the benchmark driver (bench_startup.py ``--breakdown``), which owns the broker.

The phases come from events a system-call trace shows without touching the client: the host's ``execve`` (the
process is spawned), its first ``ioctl`` (the interpreter's core is up: stdio's isatty check), the ``bind`` of its
inbox socket (``host_process``'s imports are done: READY follows at once), each TCP ``connect`` to a broker (main
was spawned, its and the broker actor's modules imported), and each Kafka request written (``sendmsg``/``sendto``:
the API key and correlation id are in its first bytes) and the first bytes of its response read; the runner itself
stamps the Producer() call and the delivery report on the same clock. With ``opens``, file opens too: the first
kqactors file and main's and the toppar's modules. strace slows every traced call (tens of µs each); without
``opens`` a run has a few hundred of them, with it every import pays several: its import phases read long.
"""

from __future__ import annotations

import json
import re
import subprocess
import tempfile
from pathlib import Path

API_NAMES = {0: "Produce", 1: "Fetch", 2: "ListOffsets", 3: "Metadata", 10: "FindCoordinator", 18: "ApiVersions",
             22: "InitProducerId"}
_LINE = re.compile(r"^(\d+)\s+(\d+\.\d+)\s+(.*)$")
_HEX = re.compile(r'"((?:\\x[0-9a-f]{2})*)"')
_MAIN = re.compile(r"kqactors/actors/(__pycache__/)?main\.")
_TOPPAR = re.compile(r"kqactors/actors/(__pycache__/)?toppar\.")
_TRACED = "execve,ioctl,bind,connect,sendto,sendmsg,recvfrom"


def _bytes(text: str) -> bytes:
    """The bytes of every ``"\\x.."`` string in a strace argument list (``-xx``), concatenated."""
    return b"".join(bytes.fromhex(m.replace("\\x", "")) for m in _HEX.findall(text))


def trace_run(runner: list[str], env: dict[str, str] | None = None,
              opens: bool = False) -> tuple[dict, list[tuple[float, str]]]:
    """Run ``runner`` under strace; return the runner's JSON result and the events (wall time, text), in order.
    ``opens``: trace every file open too (marks when the host imports main's and the toppar's modules), which
    slows each import several-fold under strace: the import phases then read long."""
    traced = _TRACED + (",openat" if opens else "")
    with tempfile.TemporaryDirectory() as tmp:
        trace = Path(tmp) / "trace"
        command = ["strace", "-f", "-ttt", "-xx", "-s", "160", "-qq", "--seccomp-bpf", "-e", f"trace={traced}",
                   "-o", str(trace), *runner]
        done = subprocess.run(command, capture_output=True, text=True, timeout=120, env=env)
        if done.returncode != 0 or not done.stdout.strip():
            raise RuntimeError(f"traced run failed ({done.returncode}): {done.stderr[-2000:]}")
        result = json.loads(done.stdout.strip().splitlines()[-1])
        return result, _events(trace.read_text(errors="replace").splitlines())


def _events(lines: list[str]) -> list[tuple[float, str]]:
    events: list[tuple[float, str]] = []
    hosts: dict[int, str] = {}  # pid → host key
    seen_kq: set[int] = set()
    seen_stdio: set[int] = set()
    seen_main: set[int] = set()
    seen_toppar: set[int] = set()
    tcp: dict[tuple[int, int], str] = {}  # (pid, fd) → broker address
    pending: dict[tuple[int, int], dict[int, str]] = {}  # correlation id → API name, per connection
    unfinished: dict[int, str] = {}
    for raw in lines:
        match = _LINE.match(raw)
        if match is None:
            continue
        pid, when, call = int(match.group(1)), float(match.group(2)), match.group(3)
        if call.endswith("<unfinished ...>"):
            unfinished[pid] = call[: -len("<unfinished ...>")]
            continue
        if call.startswith("<... "):
            call = unfinished.pop(pid, "") + call.split("resumed>", 1)[-1]
        if call.startswith("execve("):
            argv = [bytes.fromhex(m.replace("\\x", "")) for m in _HEX.findall(call)]
            if b"kqactors.runtime.host_process" in argv:
                key = argv[argv.index(b"--key") + 1].decode() if b"--key" in argv[:-1] else "?"
                hosts[pid] = key
                events.append((when, f"host {key} process started (execve)"))
            continue
        if pid not in hosts:
            continue
        host = hosts[pid]
        if call.startswith("ioctl(") and pid not in seen_stdio:
            seen_stdio.add(pid)  # the first: create_stdio's isatty check, once the interpreter core is up
            events.append((when, f"host {host}: interpreter initialised (stdio set up)"))
        elif call.startswith("openat("):
            path = _bytes(call.split(",", 2)[1]).decode(errors="replace")
            if "kqactors" in path and pid not in seen_kq:
                seen_kq.add(pid)
                events.append((when, f"host {host}: interpreter up (first kqactors import)"))
            elif _MAIN.search(path) and pid not in seen_main:
                seen_main.add(pid)
                events.append((when, f"host {host}: main's SPAWN served (imports actors.main)"))
            elif _TOPPAR.search(path) and pid not in seen_toppar:
                seen_toppar.add(pid)
                events.append((when, f"host {host}: toppar's SPAWN served (imports actors.toppar)"))
        elif call.startswith("bind(") and "sa_family=AF_UNIX" in call:
            events.append((when, f"host {host}: inbox bound (host_process imported; READY next)"))
        elif call.startswith("connect(") and "AF_INET" in call:
            fd = int(call[len("connect("):].split(",", 1)[0])
            port = re.search(r"htons\((\d+)\)", call)
            tcp[(pid, fd)] = f"port {port.group(1) if port else '?'}"
            pending[(pid, fd)] = {}
            events.append((when, f"host {host}: TCP connect #{len(tcp)} to the broker (fd {fd})"))
        elif call.startswith(("sendmsg(", "sendto(")):
            fd = int(call.split("(", 1)[1].split(",", 1)[0])
            if (pid, fd) not in tcp:
                continue
            data = _bytes(call)
            if len(data) >= 12:
                api = int.from_bytes(data[4:6], "big")
                corr = int.from_bytes(data[8:12], "big")
                name = API_NAMES.get(api, f"api {api}")
                pending[(pid, fd)][corr] = name
                events.append((when, f"host {host}: {name} request written (fd {fd})"))
        elif call.startswith("recvfrom("):
            fd = int(call.split("(", 1)[1].split(",", 1)[0])
            if (pid, fd) not in tcp or call.rstrip().endswith(("EAGAIN (Resource temporarily unavailable)",)):
                continue
            data = _bytes(call)
            if len(data) >= 8:
                corr = int.from_bytes(data[4:8], "big")
                name = pending[(pid, fd)].pop(corr, None)
                if name is not None:
                    events.append((when, f"host {host}: {name} response read (fd {fd})"))
    return events


def breakdown(runner: list[str], env: dict[str, str] | None = None, opens: bool = False) -> str:
    """One traced run as a table: each event's time from the Producer() call and the step from the last."""
    result, events = trace_run(runner, env, opens)
    start = result["epoch_producer"]
    events = sorted([(start, "app: Producer() called"),
                     (start + result["producer_ctor_ms"] / 1e3, "app: Producer() returned"),
                     (result["epoch_dr"], "app: delivery report served (poll)"), *events])
    rows = ["| event | at ms | step ms |", "|---|---:|---:|"]
    last = start
    for when, text in events:
        rows.append(f"| {text} | {(when - start) * 1e3:.1f} | {(when - last) * 1e3:.1f} |")
        last = when
    return "\n".join(rows)

