"""``kqactors ingest`` on Tansu with files: a writer that keeps appending while the daemon is killed with SIGKILL
(the whole process group: supervisor, worker, producer hosts), restarted, rotated by rename (while down and while
running) and copytruncated; then every line must be in the topic (none missing; duplicates counted and bounded by
what was in flight). Also --once, stdin and SIGTERM's drain.

Runs in: the pytest process; the daemon is a child process (its own session, so a kill reaches all of it), the
lines are read back with confluent-kafka.
"""

from __future__ import annotations

import collections
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from integration_helpers import make_topic
from support.waiting import wait_until

ck = pytest.importorskip("confluent_kafka")

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

REPO = Path(__file__).resolve().parents[2]


class Daemon:
    """One ``kqactors ingest`` process (group leader of its own session); stderr (JSON logs) goes to a file."""

    def __init__(self, args: list[str], log: Path, stdin: object = subprocess.DEVNULL) -> None:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
        self.log = log
        with open(log, "ab") as err:
            self.proc = subprocess.Popen([sys.executable, "-m", "kqactors.cli.main", "ingest", *args], env=env,
                                         stdin=stdin, stdout=subprocess.PIPE, stderr=err, start_new_session=True)

    def kill9(self) -> None:
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)

    def signal(self, sig: int) -> None:
        self.proc.send_signal(sig)

    def wait(self, timeout: float = 60) -> int:
        return self.proc.wait(timeout)

    def events(self) -> list[dict]:
        out = []
        for line in self.log.read_text().splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                pass
        return out

    def stop(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait(10)


def read_topic(bootstrap: str, topic: str, expected: int, timeout: float = 60.0) -> list:
    """Every message of ``topic`` from the start (stops 1 s after ``expected`` arrived, to see duplicates)."""
    admin = ck.admin.AdminClient({"bootstrap.servers": bootstrap})
    partitions = admin.list_topics(topic, timeout=10).topics[topic].partitions
    consumer = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{topic}", "enable.auto.commit": False})
    consumer.assign([ck.TopicPartition(topic, p, ck.OFFSET_BEGINNING) for p in partitions])
    out: list = []
    deadline = time.monotonic() + timeout
    quiet_until = None
    try:
        while time.monotonic() < deadline:
            out.extend(m for m in consumer.consume(10_000, 0.2) if m.error() is None)
            if len(out) >= expected:
                quiet_until = quiet_until or time.monotonic() + 1.0
                if time.monotonic() > quiet_until:
                    break
    finally:
        consumer.close()
    return out


def saved_positions(state_dir: Path) -> dict[str, list[dict]]:
    out = {}
    for path in state_dir.glob("file-*.json"):
        data = json.loads(path.read_text())
        out[data["path"]] = data["streams"]
    return out


def committed(state_dir: Path, path: Path) -> int:
    streams = saved_positions(state_dir).get(str(path), [])
    return streams[-1]["pos"] if streams else -1


class Writer(threading.Thread):
    """Appends numbered lines to ``path`` (reopening it by name each batch, as a logger after rotation would)."""

    def __init__(self, path: Path, batch: int = 200, pause: float = 0.01) -> None:
        super().__init__(daemon=True)
        self.path, self.batch, self.pause = path, batch, pause
        self.written = 0
        self.hold = threading.Lock()
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.is_set():
            with self.hold, open(self.path, "ab") as f:
                f.write(b"".join(b"L%08d\n" % (self.written + i) for i in range(self.batch)))
                self.written += self.batch
            time.sleep(self.pause)


def test_sigkill_restart_rotation_and_copytruncate_lose_nothing(tansu, unique_topic, tmp_path):
    make_topic(tansu, unique_topic, 3)
    log, state = tmp_path / "app.log", tmp_path / "state"
    log.write_bytes(b"".join(b"L%08d\n" % i for i in range(50_000)))
    writer = Writer(log)
    writer.written = 50_000
    args = ["-b", tansu.bootstrap, "-t", unique_topic, "--state-dir", str(state), str(log),
            "-X", "queue.buffering.max.messages=20000"]
    daemon = Daemon(args, tmp_path / "daemon1.log")
    try:
        writer.start()
        wait_until(lambda: committed(state, log) > 0, 30, "a first checkpoint")
        time.sleep(0.3)
        daemon.kill9()                                        # crash while lines are in flight
        with writer.hold:                                     # rotation while the daemon is down
            os.rename(log, tmp_path / "app.log.1")
        time.sleep(0.2)
        daemon = Daemon(args, tmp_path / "daemon2.log")
        wait_until(lambda: any(e.get("event") == "resume_rotated" for e in daemon.events()), 30,
                   "the restarted daemon to finish the file renamed while it was down")
        time.sleep(0.3)
        with writer.hold:                                     # rotation while running
            os.rename(log, tmp_path / "app.log.2")
        time.sleep(0.3)
        with writer.hold:                                     # copytruncate once everything was read
            wait_until(lambda: committed(state, log) == log.stat().st_size, 30, "the daemon to catch up")
            shutil.copy(log, tmp_path / "app.log.3")
            with open(log, "r+b") as f:
                f.truncate(0)
        time.sleep(0.3)
        writer.stopped.set()
        writer.join(10)
        wait_until(lambda: committed(state, log) == log.stat().st_size, 30, "every line to be delivered")
        daemon.signal(signal.SIGTERM)
        assert daemon.wait(30) == 0
    finally:
        writer.stopped.set()
        daemon.stop()
    values = collections.Counter(m.value() for m in read_topic(tansu.bootstrap, unique_topic, writer.written))
    expected = {b"L%08d" % i for i in range(writer.written)}
    missing = expected - set(values)
    duplicates = sum(values.values()) - len(values)
    print(f"lines {writer.written} missing {len(missing)} duplicates {duplicates}")
    assert not missing, f"{len(missing)} lines missing, e.g. {sorted(missing)[:5]}"
    assert set(values) == expected
    # Only what was in flight at the kill is sent again: bounded by the producer's queue plus one read.
    assert duplicates <= 20_000 + 256 * 1024 // 10
    events = [e.get("event") for e in daemon.events()]
    assert "rotated" in events and "truncated" in events and "stopped" in events


def test_once_then_appends_resume_and_stdin(tansu, unique_topic, tmp_path):
    make_topic(tansu, unique_topic, 2)
    log, state = tmp_path / "a.log", tmp_path / "state"
    log.write_bytes(b"".join(b"a%d\n" % i for i in range(1000)))
    args = ["-b", tansu.bootstrap, "-t", unique_topic, "--state-dir", str(state), "--once", str(log)]
    assert Daemon(args, tmp_path / "d1.log").wait(60) == 0
    assert committed(state, log) == log.stat().st_size
    with open(log, "ab") as f:
        f.write(b"b0\nb1\nno-newline")
    assert Daemon(args, tmp_path / "d2.log").wait(60) == 0
    stdin = subprocess.Popen(["printf", "s0\\ns1\\ns2\\n"], stdout=subprocess.PIPE)
    daemon = Daemon(["-b", tansu.bootstrap, "-t", unique_topic, "-"], tmp_path / "d3.log", stdin=stdin.stdout)
    assert daemon.wait(60) == 0, "stdin at EOF ends the daemon"
    values = [m.value() for m in read_topic(tansu.bootstrap, unique_topic, 1006)]
    assert sorted(values) == sorted([b"a%d" % i for i in range(1000)] + [b"b0", b"b1", b"no-newline", b"s0", b"s1",
                                                                          b"s2"])
