"""``kqactors ingest`` attached to a shared runtime (``-X kqactors.runtime.dir=DIR``): its workers start no actor
hosts of their own, every line reaches the topic, and SIGTERM drains and exits 0 with the runtime left running;
a daemon started before its runtime keeps retrying the attach and goes on once the runtime is up.

Runs in: the pytest process; the runtime and the daemon are child processes; lines are read back with
confluent-kafka (tests/integration/test_ingest_files.py's helpers).
"""

from __future__ import annotations

import signal

import psutil
import pytest
from integration_helpers import make_topic
from shared_runtime_helpers import start_runtime, stop_runtime
from support.waiting import wait_until
from test_ingest_files import Daemon, committed, read_topic

pytest.importorskip("confluent_kafka")

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


def _hosts_under(pid: int) -> list[str]:
    """The kqactors actor hosts among ``pid``'s descendants."""
    found = []
    for child in psutil.Process(pid).children(recursive=True):
        try:
            if "kqactors.runtime.host_process" in " ".join(child.cmdline()):
                found.append(" ".join(child.cmdline()))
        except psutil.NoSuchProcess:
            pass
    return found


def test_the_daemon_attaches_to_a_shared_runtime(tansu, unique_topic, tmp_path):
    make_topic(tansu, unique_topic, 2)
    logs = [tmp_path / "a.log", tmp_path / "b.log"]
    for n, path in enumerate(logs):
        path.write_bytes(b"".join(b"%d-%d\n" % (n, i) for i in range(2000)))
    daemon = Daemon(["-b", tansu.bootstrap, "-t", unique_topic, "--state-dir", str(tmp_path / "state"),
                     "-X", f"kqactors.runtime.dir={tmp_path / 'rt'}", *map(str, logs)], tmp_path / "d.log")
    runtime = None
    try:
        wait_until(lambda: any(e.get("event") == "producer_attach_error" for e in daemon.events()), 60,
                   "the worker tried to attach before the runtime ran")
        runtime = start_runtime(str(tmp_path / "rt"), hosts=1)
        assert _hosts_under(runtime.pid), "the runtime runs the actor hosts"
        wait_until(lambda: all(committed(tmp_path / "state", p) == p.stat().st_size for p in logs), 90,
                   "every line checkpointed once the runtime is up")
        assert _hosts_under(daemon.proc.pid) == [], "an attached daemon starts no hosts of its own"
        daemon.signal(signal.SIGTERM)
        assert daemon.wait(60) == 0
        values = sorted(m.value() for m in read_topic(tansu.bootstrap, unique_topic, 4000))
        assert values == sorted(b"%d-%d" % (n, i) for n in range(2) for i in range(2000))
        assert runtime.poll() is None, "the runtime outlives the daemon"
    finally:
        daemon.stop()
        if runtime is not None:
            stop_runtime(runtime)
