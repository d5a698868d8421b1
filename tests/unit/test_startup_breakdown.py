"""benchmarks/startup_breakdown.py: the phases it reads from a system-call trace (strace -f -ttt -xx lines)."""

from __future__ import annotations

import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def _hex(data: bytes) -> str:
    return "".join(f"\\x{b:02x}" for b in data)


def _events(lines: list[str]) -> list[tuple[float, str]]:
    sys.path.insert(0, str(BENCHMARKS))
    try:
        from startup_breakdown import _events as events
    finally:
        sys.path.remove(str(BENCHMARKS))
    return events(lines)


def test_a_hosts_start_and_its_kafka_requests_become_phases() -> None:
    request = (20).to_bytes(4, "big") + (18).to_bytes(2, "big") + (3).to_bytes(2, "big") + (7).to_bytes(4, "big")
    response = (30).to_bytes(4, "big") + (7).to_bytes(4, "big") + b"\x00" * 8
    metadata = (20).to_bytes(4, "big") + (3).to_bytes(2, "big") + (12).to_bytes(2, "big") + (8).to_bytes(4, "big")
    lines = [
        "100 1.000000 execve(\"" + _hex(b"/usr/bin/python") + "\", [\"" + _hex(b"app") + "\"], 0x1 /* 3 vars */) = 0",
        "100 1.001000 openat(AT_FDCWD, \"" + _hex(b"/w/kqactors/__init__.py") + "\", O_RDONLY) = 3",  # the app
        "200 1.010000 execve(\"" + _hex(b"/usr/bin/python") + "\", [" + ", ".join(
            f'"{_hex(word)}"' for word in (b"python", b"-S", b"-m", b"kqactors.runtime.host_process", b"--key", b"h0"))
        + "], 0x1 /* 3 vars */) = 0",
        "200 1.020000 openat(AT_FDCWD, \"" + _hex(b"/w/kqactors/__pycache__/__init__.pyc") + "\", O_RDONLY) = 3",
        "200 1.021000 openat(AT_FDCWD, \"" + _hex(b"/w/kqactors/runtime/op.pyc") + "\", O_RDONLY) = 3",
        "200 1.050000 bind(5, {sa_family=AF_UNIX, sun_path=\"" + _hex(b"/tmp/r/h0.sock") + "\"}, 110) = 0",
        "200 1.060000 openat(AT_FDCWD, \"" + _hex(b"/w/kqactors/actors/__pycache__/main.pyc") + "\", O_RDONLY) = 3",
        "200 1.090000 connect(9, {sa_family=AF_INET, sin_port=htons(4000), sin_addr=inet_addr(\"127.0.0.1\")}, 16)"
        " = -1 EINPROGRESS (Operation now in progress)",
        "200 1.091000 sendmsg(9, {msg_name=NULL, msg_namelen=0, msg_iov=[{iov_base=\"" + _hex(request[:4]) +
        "\", iov_len=4}, {iov_base=\"" + _hex(request[4:]) + "\", iov_len=8}], msg_iovlen=2}, 0) = 12",
        "200 1.092000 recvfrom(9, 0x7f, 65536, 0, NULL, NULL) = -1 EAGAIN (Resource temporarily unavailable)",
        "200 1.093000 recvfrom(9,  <unfinished ...>",
        "201 1.093500 sendto(4, \"\\x01\", 1, 0, NULL, 0) = 1",  # a zmq thread of another process: not traced
        "200 1.094000 <... recvfrom resumed>\"" + _hex(response) + "\", 65536, 0, NULL, NULL) = 16",
        "200 1.095000 sendto(9, \"" + _hex(metadata) + "\", 12, 0, NULL, 0) = 12",
        "200 1.099000 recvfrom(9, \"" + _hex((9).to_bytes(4, "big") + (8).to_bytes(4, "big")) + "\", 65536, 0, "
        "NULL, NULL) = 13",
    ]
    assert _events(lines) == [
        (1.01, "host h0 process started (execve)"),
        (1.02, "host h0: interpreter up (first kqactors import)"),
        (1.05, "host h0: inbox bound (host_process imported; READY next)"),
        (1.06, "host h0: main's SPAWN served (imports actors.main)"),
        (1.09, "host h0: TCP connect #1 to the broker (fd 9)"),
        (1.091, "host h0: ApiVersions request written (fd 9)"),
        (1.094, "host h0: ApiVersions response read (fd 9)"),
        (1.095, "host h0: Metadata request written (fd 9)"),
        (1.099, "host h0: Metadata response read (fd 9)"),
    ]
