"""The broker fixtures themselves: Tansu, the librdkafka mock cluster and ``kqactors broker``.

Runs in: the pytest process, with real brokers as children. confluent-kafka is the independent client on
the other end, so these tests check the brokers (and the fault controls) without relying on kqactors'
own client.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path

import psutil
import pytest

from kqactors.errors import KafkaError, KafkaException
from kqactors.testing._process import sweep_orphan_workdirs
from kqactors.testing.librdkafka import LibrdkafkaNotFound, find_librdkafka
from kqactors.testing.mock_cluster import MockCluster
from kqactors.testing.probe import api_versions
from kqactors.testing.tansu import TansuBroker, TansuNotFound, find_tansu_binary

ck = pytest.importorskip("confluent_kafka", reason="confluent-kafka is the reference client for these tests")
ck_admin = pytest.importorskip("confluent_kafka.admin")

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

PRODUCE, METADATA, API_VERSIONS = 0, 3, 18
REPO_ROOT = Path(__file__).resolve().parents[2]


def _host_port(bootstrap: str) -> tuple[str, int]:
    host, _, port = bootstrap.split(",")[0].rpartition(":")
    return host, int(port)


def _produce(bootstrap: str, topic: str, values: list[bytes], **config: object) -> list[tuple]:
    """Produce ``values`` to partition 0 and return the delivery reports as (error, offset, value)."""
    reports: list[tuple] = []
    producer = ck.Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, **config})
    for value in values:
        producer.produce(topic, value=value, partition=0,
                         on_delivery=lambda err, msg: reports.append((err, msg.offset(), msg.value())))
    remaining = producer.flush(20)
    assert remaining == 0, f"{remaining} messages never got a delivery report"
    return reports


def _consume(bootstrap: str, topic: str, count: int, timeout: float = 20.0) -> list[bytes]:
    consumer = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{topic}",
                            "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    consumer.assign([ck.TopicPartition(topic, 0, ck.OFFSET_BEGINNING)])
    got: list[bytes] = []
    deadline = time.monotonic() + timeout
    try:
        while len(got) < count and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                got.append(message.value())
    finally:
        consumer.close()
    return got


def _leader(bootstrap: str, topic: str, partition: int) -> int:
    admin = ck_admin.AdminClient({"bootstrap.servers": bootstrap})
    return admin.list_topics(topic, timeout=10).topics[topic].partitions[partition].leader


def _gone(pid: int, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.05)
    return False


# -- Tansu --------------------------------------------------------------------------------------------
def test_tansu_answers_api_versions(tansu):
    ranges = api_versions(*_host_port(tansu.bootstrap))
    assert {PRODUCE, 1, METADATA, API_VERSIONS} <= ranges.keys()
    assert ranges == tansu.api_versions
    assert tansu.bootstrap == f"127.0.0.1:{tansu.port}"


def test_tansu_produce_and_consume_with_confluent_kafka(tansu, unique_topic):
    admin = ck_admin.AdminClient({"bootstrap.servers": tansu.bootstrap})
    admin.create_topics([ck_admin.NewTopic(unique_topic, 2, 1)])[unique_topic].result(10)
    assert len(admin.list_topics(unique_topic, timeout=10).topics[unique_topic].partitions) == 2
    values = [b"tansu-%d" % i for i in range(5)]
    reports = _produce(tansu.bootstrap, unique_topic, values)
    assert [(err, offset) for err, offset, _ in reports] == [(None, i) for i in range(5)]
    assert _consume(tansu.bootstrap, unique_topic, 5) == values


def test_tansu_stop_leaves_no_process_or_temp_files():
    _require(find_tansu_binary)
    broker = TansuBroker().start()
    pid, workdir = broker.pid, broker.log_path.parent
    assert workdir.is_dir() and psutil.pid_exists(pid)
    broker.stop()
    assert _gone(pid, 1.0)
    assert not workdir.exists()
    broker.stop()  # idempotent


def test_tansu_startup_failure_reports_log_and_cleans_up(tmp_path):
    fake = tmp_path / "fake-tansu"
    fake.write_text("#!/bin/sh\necho 'address already in use (simulated)' >&2\nexit 3\n")
    fake.chmod(0o755)
    broker = TansuBroker(binary=str(fake), startup_timeout=5)
    with pytest.raises(RuntimeError, match="simulated"):
        broker.start()
    assert not broker.is_running() and broker.log_path is None


def test_tansu_binary_override_must_be_executable(monkeypatch, tmp_path):
    monkeypatch.setenv("KQ_TANSU_BIN", str(tmp_path / "missing"))
    with pytest.raises(TansuNotFound, match="KQ_TANSU_BIN"):
        find_tansu_binary()


# -- librdkafka mock cluster --------------------------------------------------------------------------
def test_mock_cluster_every_broker_answers_api_versions(mock_cluster):
    addresses = mock_cluster.bootstrap.split(",")
    assert len(addresses) == 3
    for broker_id in (1, 2, 3):
        host, port = mock_cluster.broker_address(broker_id)
        assert f"{host}:{port}" == addresses[broker_id - 1]
        ranges = api_versions(host, port)
        assert ranges[API_VERSIONS] == (0, 2)
        assert PRODUCE in ranges and METADATA in ranges


def test_mock_cluster_produce_and_consume_with_confluent_kafka(mock_cluster, unique_topic):
    mock_cluster.create_topic(unique_topic, partition_cnt=3, replication_factor=3)
    values = [b"mock-%d" % i for i in range(5)]
    reports = _produce(mock_cluster.bootstrap, unique_topic, values)
    assert [(err, offset) for err, offset, _ in reports] == [(None, i) for i in range(5)]
    assert _consume(mock_cluster.bootstrap, unique_topic, 5) == values


def test_mock_non_retriable_produce_error_reaches_delivery_report(mock_cluster_factory, unique_topic):
    cluster = mock_cluster_factory()
    cluster.create_topic(unique_topic, 1, 1)
    cluster.push_request_errors(PRODUCE, ["TOPIC_AUTHORIZATION_FAILED"])
    reports = _produce(cluster.bootstrap, unique_topic, [b"denied"])
    assert len(reports) == 1
    error = reports[0][0]
    assert error is not None and error.code() == ck.KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_mock_retriable_produce_errors_are_retried(mock_cluster_factory, unique_topic):
    cluster = mock_cluster_factory()
    cluster.create_topic(unique_topic, 1, 1)
    cluster.start_request_tracking()
    cluster.push_request_errors(PRODUCE, ["NOT_ENOUGH_REPLICAS", "NOT_ENOUGH_REPLICAS"])
    reports = _produce(cluster.bootstrap, unique_topic, [b"eventually"], **{"retry.backoff.ms": 10})
    assert [(err, offset) for err, offset, _ in reports] == [(None, 0)]
    produce_requests = [r for r in cluster.get_requests() if r.api_key == PRODUCE]
    assert len(produce_requests) == 3  # two failures, then the success


def test_mock_broker_set_down_refuses_connections_until_up(mock_cluster_factory):
    cluster = mock_cluster_factory()
    host, port = cluster.broker_address(2)
    cluster.broker_set_down(2)
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection((host, port), timeout=2).close()
    api_versions(*cluster.broker_address(1))  # the other brokers stay up
    cluster.broker_set_up(2)
    assert API_VERSIONS in api_versions(host, port)


def test_mock_leader_move_visible_in_metadata(mock_cluster_factory, unique_topic):
    cluster = mock_cluster_factory()
    cluster.create_topic(unique_topic, partition_cnt=2, replication_factor=3)
    before = _leader(cluster.bootstrap, unique_topic, 0)
    target = 3 if before != 3 else 1
    cluster.partition_set_leader(unique_topic, 0, target)
    assert _leader(cluster.bootstrap, unique_topic, 0) == target


def test_mock_request_tracking_records_requests(mock_cluster_factory):
    cluster = mock_cluster_factory()
    cluster.start_request_tracking()
    started_us = time.monotonic_ns() // 1000
    api_versions(*cluster.broker_address(3))
    api_versions(*cluster.broker_address(1))
    requests = cluster.get_requests()
    assert [(r.broker_id, r.api_key) for r in requests] == [(3, API_VERSIONS), (1, API_VERSIONS)]
    assert requests[0].timestamp_us <= requests[1].timestamp_us
    assert abs(requests[0].timestamp_us - started_us) < 60_000_000  # librdkafka's clock is monotonic
    cluster.clear_requests()
    assert cluster.get_requests() == []
    cluster.stop_request_tracking()
    api_versions(*cluster.broker_address(2))
    assert cluster.get_requests() == []


def test_mock_broker_rtt_delays_responses(mock_cluster_factory):
    cluster = mock_cluster_factory(num_brokers=1)
    address = cluster.broker_address(1)
    cluster.broker_set_rtt(1, 400)
    started = time.monotonic()
    api_versions(*address)
    assert time.monotonic() - started >= 0.35
    cluster.broker_set_rtt(1, 0)
    cluster.broker_push_request_error_rtts(1, API_VERSIONS, [(0, 300)])
    started = time.monotonic()
    api_versions(*address)
    assert time.monotonic() - started >= 0.25


def test_mock_set_apiversion_changes_advertised_range(mock_cluster_factory):
    cluster = mock_cluster_factory(num_brokers=1)
    cluster.set_apiversion(PRODUCE, 3, 5)
    assert api_versions(*cluster.broker_address(1))[PRODUCE] == (3, 5)


def test_mock_bad_arguments_raise_clear_errors(mock_cluster):
    with pytest.raises(TypeError):
        mock_cluster.create_topic("", 1, 1)
    with pytest.raises(ValueError, match="unknown Kafka error name"):
        mock_cluster.push_request_errors(PRODUCE, ["NOT_A_REAL_ERROR"])
    with pytest.raises(ValueError):
        mock_cluster.coordinator_set("consumer", "g", 1)
    with pytest.raises(KafkaException) as caught:
        mock_cluster.broker_set_down(99)
    assert caught.value.error.code() != 0
    mock_cluster.coordinator_set("group", "some-group", 2)  # valid call still works afterwards


def test_mock_cluster_stop_leaves_no_process_or_temp_files(mock_cluster_factory):
    cluster = mock_cluster_factory(num_brokers=1)
    pid, workdir, (host, port) = cluster.pid, cluster._workdir, cluster.broker_address(1)
    cluster.stop()
    assert _gone(pid, 1.0)
    assert not workdir.exists()
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection((host, port), timeout=2).close()
    with pytest.raises(RuntimeError, match="not running"):
        cluster.broker_set_up(1)


def test_mock_cluster_library_errors_are_clear(monkeypatch, tmp_path):
    monkeypatch.setenv("KQ_LIBRDKAFKA", str(tmp_path / "missing.so"))
    with pytest.raises(LibrdkafkaNotFound, match="KQ_LIBRDKAFKA"):
        MockCluster(1).start()
    libc_path = next((p for p in ("/lib/x86_64-linux-gnu/libc.so.6", "/lib64/libc.so.6") if Path(p).exists()), None)
    if libc_path is None:
        pytest.skip("no libc path to stand in for a library without the mock symbols")
    monkeypatch.setenv("KQ_LIBRDKAFKA", libc_path)
    with pytest.raises(RuntimeError, match="lacks mock-cluster symbols"):
        MockCluster(1).start()


def test_mock_cluster_started_in_a_worker_thread_outlives_the_thread(mock_cluster_factory):
    """PR_SET_PDEATHSIG follows the forking thread, so it must not be armed off the main thread."""
    started = []
    worker = threading.Thread(target=lambda: started.append(mock_cluster_factory(num_brokers=1)))
    worker.start()
    worker.join(30)
    time.sleep(0.3)
    cluster = started[0]
    assert cluster.is_running()
    assert API_VERSIONS in api_versions(*cluster.broker_address(1))


def test_mock_cluster_hung_child_times_out_instead_of_hanging():
    _require(find_librdkafka)
    cluster = MockCluster(num_brokers=1, call_timeout=0.5).start()
    try:
        pid = cluster.pid
        os.kill(pid, signal.SIGSTOP)
        started = time.monotonic()
        with pytest.raises(KafkaException) as caught:
            cluster.create_topic("never", 1, 1)
        assert caught.value.error.code() == KafkaError._TIMED_OUT
        assert time.monotonic() - started < 3
        assert not cluster.is_running() and _gone(pid, 2.0)
    finally:
        cluster.stop()


def test_brokers_die_with_their_parent_process(tmp_path, monkeypatch):
    """SIGKILL the process that started Tansu and a mock cluster: both children must go too, and the
    temp dirs it could not remove are swept by the next launcher."""
    _require(find_tansu_binary)
    # A private temp root, so that launchers in other processes on this machine cannot sweep these dirs first.
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    script = textwrap.dedent("""
        import sys, time
        from kqactors.testing import MockCluster, TansuBroker
        tansu = TansuBroker().start()
        mock = MockCluster(1).start()
        print(tansu.pid, mock.pid, tansu.log_path.parent, mock._workdir, flush=True)
        time.sleep(60)
    """)
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True,
                              cwd=REPO_ROOT, env={**os.environ, "TMPDIR": str(tmp_path)})
    try:
        tansu_pid, mock_pid, tansu_dir, mock_dir = parent.stdout.readline().split()
        assert psutil.pid_exists(int(tansu_pid)) and psutil.pid_exists(int(mock_pid))
        parent.kill()
        parent.wait(5)
        assert _gone(int(tansu_pid)) and _gone(int(mock_pid))
        assert Path(tansu_dir).is_dir() and Path(mock_dir).is_dir()  # nobody could clean up...
        assert Path(tansu_dir) in sweep_orphan_workdirs("tansu")  # ...until the next start sweeps
        assert Path(mock_dir) in sweep_orphan_workdirs("mock")
        assert not Path(tansu_dir).exists() and not Path(mock_dir).exists()
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait(5)
        parent.stdout.close()


# -- kqactors broker (CLI) ----------------------------------------------------------------------------
def _cli(*args: str, **popen: object) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "kqactors.cli.main", *args], cwd=REPO_ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen)


def test_cli_version():
    proc = _cli("--version")
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0 and out.startswith("kqactors ")


@pytest.mark.parametrize("stop_signal", [signal.SIGINT, signal.SIGTERM])
def test_cli_broker_runs_until_signalled(stop_signal):
    _require(find_tansu_binary)
    proc = _cli("broker")
    try:
        line = proc.stdout.readline().strip()
        assert line.startswith("bootstrap.servers=127.0.0.1:"), proc.stderr.read() if not line else line
        host, port = _host_port(line.split("=", 1)[1])
        assert API_VERSIONS in api_versions(host, port)
        children = psutil.Process(proc.pid).children()
        assert len(children) == 1
        os.kill(proc.pid, stop_signal)
        assert proc.wait(15) == 0
        assert _gone(children[0].pid, 1.0)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)
        proc.stdout.close()
        proc.stderr.close()


def test_cli_broker_rejects_bad_port():
    proc = _cli("broker", "--port", "70000")
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 2 and "--port" in err


def _require(locate) -> None:
    try:
        locate()
    except FileNotFoundError as exc:
        pytest.skip(str(exc))
