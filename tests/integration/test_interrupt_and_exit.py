"""Ctrl+C (SIGINT → KeyboardInterrupt) during a client's blocking calls, and exit after it, in a child process.

Runs in: the pytest process; each scenario is a fresh Python process (the client's hosts are its children)
that gets a real SIGINT while it blocks in poll(), flush(), consume(), list_topics() or a synchronous
commit(). It must raise KeyboardInterrupt within 0.5 s, stay usable (a normal call afterwards works) and
close cleanly. The exit scenario lets the interrupt end the process, ten times over: it must exit at once,
print nothing but its own traceback (no background thread's) and leave no run directory behind.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from kqactors.testing._process import free_loopback_port

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

REPO_ROOT = str(Path(__file__).resolve().parents[2])
INTERRUPT_WITHIN_S = 0.5
SIGNAL_AFTER_S = 0.3  # the child has been blocking this long when the signal comes

PRELUDE = """
import logging, signal, sys, time
# Ctrl+C as in a terminal: a test runner started in the background (`cmd &` in a script, nohup) passes SIGINT on
# ignored, and Python then leaves it ignored: every SIGINT below would be lost and the tests fail for that alone.
signal.signal(signal.SIGINT, signal.default_int_handler)
import kqactors
from kqactors import Consumer, KafkaError, KafkaException, Producer, TopicPartition
quiet = logging.getLogger("quiet")
quiet.addHandler(logging.NullHandler())
quiet.propagate = False
BOOTSTRAP, TOPIC = sys.argv[1], sys.argv[2]
QUIET = {"kqactors.hosts": 0, "logger": quiet, "error_cb": lambda err: None}
"""

# name → (setup, the blocking call, what shows the client still works afterwards)
SCENARIOS = {
    "producer.poll": (
        "client = Producer({'bootstrap.servers': BOOTSTRAP, **QUIET})",
        "client.poll(30)",
        "client.produce(TOPIC, b'after'); assert client.flush(15) == 0",
    ),
    "producer.flush": (
        "client = Producer({'bootstrap.servers': '127.0.0.1:%d' % int(sys.argv[3]), **QUIET}); "
        "client.produce(TOPIC, b'stuck')",
        "client.flush(30)",
        "assert len(client) == 1; client.purge(); assert client.flush(5) == 0",
    ),
    "consumer.poll": (
        "client = Consumer({'bootstrap.servers': BOOTSTRAP, 'group.id': 'g-int-poll', **QUIET}); "
        "client.assign([TopicPartition(TOPIC, 0, 0)])",
        "client.poll(30)",
        "p = Producer({'bootstrap.servers': BOOTSTRAP, **QUIET}); p.produce(TOPIC, b'after', partition=0); "
        "assert p.flush(15) == 0; p.close(); msg = client.poll(15); assert msg is not None and msg.value() == b'after'",
    ),
    "consumer.consume": (
        "client = Consumer({'bootstrap.servers': BOOTSTRAP, 'group.id': 'g-int-consume', **QUIET}); "
        "client.assign([TopicPartition(TOPIC, 0, 0)])",
        "client.consume(10, 30)",
        "p = Producer({'bootstrap.servers': BOOTSTRAP, **QUIET}); p.produce(TOPIC, b'after', partition=0); "
        "assert p.flush(15) == 0; p.close(); assert [m.value() for m in client.consume(1, 15)] == [b'after']",
    ),
    "list_topics": (
        "client = Producer({'bootstrap.servers': '127.0.0.1:%d' % int(sys.argv[3]), **QUIET})",
        "client.list_topics(timeout=30)",
        "try:\n    client.list_topics(timeout=0.3)\nexcept KafkaException as exc:\n"
        "    assert exc.args[0].code() == KafkaError._TRANSPORT\nelse:\n    raise AssertionError('no error')",
    ),
}


class Child:
    """A child Python process running ``body``: its stdout read line by line, its stderr collected by a
    thread (so neither pipe can fill up and block it)."""

    def __init__(self, tmp_path: Path, name: str, body: str, *args: str) -> None:
        script = tmp_path / f"{name.replace('.', '_')}.py"
        script.write_text(PRELUDE + body)
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (REPO_ROOT, env.get("PYTHONPATH")) if p)
        self.proc = subprocess.Popen([sys.executable, str(script), *args], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        self.lines: list[str] = []
        self._err: list[str] = []
        self._err_reader = threading.Thread(target=lambda: self._err.append(self.proc.stderr.read()), daemon=True)
        self._err_reader.start()

    @property
    def stderr(self) -> str:
        self._err_reader.join(5)
        return "".join(self._err)

    def read_until(self, marker: str, timeout: float) -> str:
        """Read stdout up to the line starting with ``marker`` (returned); fail the test if it never comes."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                break
            self.lines.append(line.rstrip("\n"))
            if line.startswith(marker):
                return self.lines[-1]
        self.proc.kill()
        pytest.fail(f"the child never printed {marker!r}; stdout {self.lines}, stderr:\n{self.stderr[-3000:]}")

    def write(self, line: str) -> None:
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def finish(self, timeout: float) -> tuple[list[str], int | None]:
        """Wait for the child to exit; (the stdout lines after the ones read so far, exit code)."""
        seen = len(self.lines)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            pytest.fail(f"the child did not exit within {timeout} s; stdout {self.lines}")
        self.lines.extend(line for line in self.proc.stdout.read().splitlines())
        return self.lines[seen:], self.proc.returncode

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def _interrupt(child: Child) -> float:
    """SIGINT the child once it blocks; seconds until it says the KeyboardInterrupt arrived."""
    child.read_until("READY", 60)
    time.sleep(SIGNAL_AFTER_S)
    sent = time.monotonic()
    child.proc.send_signal(signal.SIGINT)
    child.read_until("INTERRUPTED", 10)
    return time.monotonic() - sent


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_ctrl_c_interrupts_a_blocking_call_and_the_client_stays_usable(scenario, mock_cluster, unique_topic,
                                                                       tmp_path):
    mock_cluster.create_topic(unique_topic, 1)
    setup, blocking, after = SCENARIOS[scenario]
    body = f"""
{setup}
print("READY", flush=True)
try:
    {blocking}
except KeyboardInterrupt:
    print("INTERRUPTED", flush=True)
else:
    print("NOT INTERRUPTED", flush=True)
    sys.exit(3)
{after}
print("USABLE", flush=True)
client.close()
print("CLOSED", flush=True)
"""
    child = Child(tmp_path, scenario, body, mock_cluster.bootstrap, unique_topic, str(free_loopback_port()))
    try:
        took = _interrupt(child)
        rest, code = child.finish(60)
    finally:
        child.kill()
    assert took < INTERRUPT_WITHIN_S, f"{scenario}: KeyboardInterrupt took {took:.2f} s"
    assert code == 0, f"{scenario} failed after the interrupt:\n{rest}\n{child.stderr[-3000:]}"
    assert rest == ["USABLE", "CLOSED"]
    assert "Traceback" not in child.stderr, child.stderr


@pytest.mark.fresh_cluster(num_brokers=1)
def test_ctrl_c_interrupts_a_synchronous_commit(fresh_cluster, unique_topic, tmp_path):
    """The coordinator is slowed down (10 s round trips) while commit(asynchronous=False) waits for it."""
    fresh_cluster.create_topic(unique_topic, 1)
    body = """
client = Consumer({'bootstrap.servers': BOOTSTRAP, 'group.id': 'g-int-commit', **QUIET})
client.assign([TopicPartition(TOPIC, 0, 0)])
client.commit(offsets=[TopicPartition(TOPIC, 0, 1)], asynchronous=False)  # the coordinator is known
print("READY", flush=True)
sys.stdin.readline()  # the parent slows the broker down
try:
    client.commit(offsets=[TopicPartition(TOPIC, 0, 2)], asynchronous=False)
except KeyboardInterrupt:
    print("INTERRUPTED", flush=True)
else:
    print("NOT INTERRUPTED", flush=True)
    sys.exit(3)
sys.stdin.readline()  # the broker is fast again
committed = client.commit(offsets=[TopicPartition(TOPIC, 0, 3)], asynchronous=False)
assert [tp.offset for tp in committed] == [3], committed
print("USABLE", flush=True)
client.close()
print("CLOSED", flush=True)
"""
    child = Child(tmp_path, "commit", body, fresh_cluster.bootstrap, unique_topic)
    try:
        child.read_until("READY", 60)
        fresh_cluster.broker_set_rtt(1, 10_000)
        child.write("slow")
        time.sleep(SIGNAL_AFTER_S + 0.2)
        sent = time.monotonic()
        child.proc.send_signal(signal.SIGINT)
        child.read_until("INTERRUPTED", 10)
        took = time.monotonic() - sent
        fresh_cluster.broker_set_rtt(1, 0)
        child.write("fast")
        rest, code = child.finish(90)
    finally:
        child.kill()
    assert took < INTERRUPT_WITHIN_S, f"KeyboardInterrupt took {took:.2f} s"
    assert code == 0, f"{rest}\n{child.stderr[-3000:]}"
    assert rest == ["USABLE", "CLOSED"]


EXIT_BODY = """
client = Producer({'bootstrap.servers': '127.0.0.1:%d' % int(sys.argv[3]), **QUIET})
client.produce(TOPIC, b"never delivered")
print("READY", client._rt.run_dir, flush=True)
try:
    client.flush(30)
except KeyboardInterrupt:
    print("INTERRUPTED", flush=True)
    raise
"""

def test_ctrl_c_during_flush_with_no_broker_exits_at_once_every_time(tmp_path):
    """The interrupt ends the program (nothing catches it): the process must be gone promptly every time,
    with only the main thread's traceback, and leave its run directory behind none of the times. (No peer
    run here: confluent-kafka 2.16's flush() ignored the SIGINT in about half of such runs on this machine,
    checking for signals only between its flush slices.)"""
    port = str(free_loopback_port())
    for run in range(10):
        child = Child(tmp_path, "exit", EXIT_BODY, "-", "t", port)
        try:
            run_dir = child.read_until("READY", 60).split()[1]
            time.sleep(SIGNAL_AFTER_S)
            sent = time.monotonic()
            child.proc.send_signal(signal.SIGINT)
            rest, code = child.finish(10)
            exited_after = time.monotonic() - sent
        finally:
            child.kill()
        err = child.stderr
        assert "INTERRUPTED" in rest, f"run {run}: {rest}\n{err[-3000:]}"
        assert code == -signal.SIGINT, f"run {run}: exit code {code}\n{err[-3000:]}"
        assert exited_after < 1.0, f"run {run}: exiting took {exited_after:.2f} s"
        assert err.count("Traceback") == 1 and err.rstrip().endswith("KeyboardInterrupt"), f"run {run}:\n{err}"
        assert "Exception ignored" not in err and "Exception in thread" not in err, f"run {run}:\n{err}"
        assert not os.path.exists(run_dir), f"run {run}: {run_dir} left behind"


BUSY_BODY = """
import traceback
client = Producer({'bootstrap.servers': BOOTSTRAP, 'kqactors.hosts': 1, 'linger.ms': 20, 'logger': quiet})
produced, reported, in_callback = 0, [], False

def delivered(err, msg):
    assert err is None, err
    reported.append(int(msg.value()))

print("READY", flush=True)
try:
    while True:  # the canonical loop: produce, serve reports, Ctrl+C ends it
        for _ in range(1000):
            client.produce(TOPIC, b"%d" % produced, on_delivery=delivered)
            produced += 1
        client.flush(0.05)
except KeyboardInterrupt as exc:
    print("INTERRUPTED", flush=True)
    # an interrupt that lands in the callback itself cuts that call short: its report is served, not recorded
    in_callback = traceback.extract_tb(exc.__traceback__)[-1].name == "delivered"
left = client.flush(20)  # everything produced before the interrupt still gets its one report
# (the interrupt may land after a produce() and before the count: that message is reported too)
expected = {produced, produced + 1} | ({produced - 1, produced} if in_callback else set())
assert left == 0 and len(reported) in expected, (left, len(reported), produced, in_callback)
missing = set(range(max(reported) + 1)) - set(reported)
assert len(missing) <= in_callback and len(set(reported)) == len(reported), (missing, "or a report came twice")
print("USABLE", flush=True)
client.close()
print("CLOSED", flush=True)
"""


@pytest.mark.xfail(strict=False, reason="known gap: an interrupt that lands inside a hand-over produce() does itself "
                   "(a backlog handed over on the app thread) can lose those messages' reports; failed 1 run in 6 "
                   "in a clean-clone CI run, passes alone")
def test_ctrl_c_in_a_busy_produce_and_flush_loop_loses_no_report(mock_cluster, unique_topic, tmp_path):
    """Reports flow by the thousand while the interrupt lands (in a receive, a batch being routed, reports
    being completed): none may be lost, or the flush() after it would wait for ever."""
    mock_cluster.create_topic(unique_topic, 3)
    for run in range(6):
        child = Child(tmp_path, "busy", BUSY_BODY, mock_cluster.bootstrap, unique_topic)
        try:
            child.read_until("READY", 60)
            time.sleep(0.5 + 0.13 * run)
            child.proc.send_signal(signal.SIGINT)
            child.read_until("INTERRUPTED", 10)
            rest, code = child.finish(60)
        finally:
            child.kill()
        assert code == 0, f"run {run}: {rest}\n{child.stderr[-3000:]}"
        assert rest == ["USABLE", "CLOSED"], f"run {run}: {rest}"


BUSY_CONSUMER_BODY = """
import traceback
total = int(sys.argv[3])
client = Consumer({'bootstrap.servers': BOOTSTRAP, 'group.id': TOPIC, 'enable.auto.commit': False, 'kqactors.hosts': 1,
                   'logger': quiet})
client.assign([TopicPartition(TOPIC, p, 0) for p in range(3)])
seen = []
print("READY", flush=True)
try:
    while len(seen) < total:
        for msg in client.consume(100, 0.5):
            if msg.error() is None:
                seen.append((msg.partition(), msg.offset()))
        time.sleep(0.001)  # the application's work: the run lasts a second or two
except KeyboardInterrupt as exc:
    print("INTERRUPTED", flush=True)
    # an interrupt right after consume() returned drops that call's messages: then the next ones start later
    after_return = traceback.extract_tb(exc.__traceback__)[-1].name == "<module>"
else:
    print("FINISHED BEFORE THE INTERRUPT", flush=True)
    sys.exit(3)
deadline = time.monotonic() + 30
while len(seen) < total and time.monotonic() < deadline:
    seen.extend((m.partition(), m.offset()) for m in client.consume(1000, 0.5) if m.error() is None)
assert len(set(seen)) == len(seen), "a message came twice"
for partition in range(3):
    offsets = sorted(o for p, o in seen if p == partition)
    missing = sorted(set(range(total // 3)) - set(offsets))
    assert after_return or not missing, (partition, len(offsets), missing[:3], missing[-3:],
                                         "deadline passed" if time.monotonic() >= deadline else "in time")
print("USABLE", flush=True)
client.close()
print("CLOSED", flush=True)
"""


def test_ctrl_c_in_a_busy_consume_loop_skips_and_repeats_nothing(mock_cluster, unique_topic, tmp_path):
    """Fetched batches arrive while the interrupt lands (in a receive, while routing, while queueing a batch
    or taking messages from one): consuming on afterwards must give every message once."""
    from support.kafka_io import produce_numbered

    total = 90_000
    mock_cluster.create_topic(unique_topic, 3)
    produce_numbered(mock_cluster.bootstrap, unique_topic, total, 3)
    for run in range(4):
        child = Child(tmp_path, "busy_consumer", BUSY_CONSUMER_BODY, mock_cluster.bootstrap, unique_topic, str(total))
        try:
            child.read_until("READY", 60)
            time.sleep(0.3 + 0.11 * run)
            child.proc.send_signal(signal.SIGINT)
            child.read_until("INTERRUPTED", 10)
            rest, code = child.finish(60)
        finally:
            child.kill()
        assert code == 0, f"run {run}: {rest}\n{child.stderr[-3000:]}"
        assert rest == ["USABLE", "CLOSED"], f"run {run}: {rest}"
