"""The shared runtime (kqactors/runtime/shared.py): producers attach to `kqactors runtime --dir`, keep their own
delivery reports, survive another client's crash, and get an error (never a hang) when the runtime stops."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator

import pytest
from shared_runtime_helpers import ROOT, start_runtime, stop_runtime

from kqactors import KafkaError, KafkaException, Producer


@pytest.fixture
def runtime_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, subprocess.Popen]]:
    directory = str(tmp_path_factory.mktemp("srt") / "rt")
    proc = start_runtime(directory)
    yield directory, proc
    stop_runtime(proc)


def _produce(producer: Producer, topic: str, count: int, tag: bytes) -> list:
    reports: list = []
    for i in range(count):
        producer.produce(topic, tag + b"%d" % i, key=tag, partition=0,
                         on_delivery=lambda err, msg: reports.append((err, msg.value())))
        producer.poll(0)
    assert producer.flush(30) == 0
    return reports


def test_attached_producers_keep_their_own_reports(mock_cluster, unique_topic, runtime_dir) -> None:
    directory, server = runtime_dir
    assert stat.S_IMODE(os.stat(directory).st_mode) == 0o700
    conf = {"bootstrap.servers": mock_cluster.bootstrap, "kqactors.runtime.dir": directory}
    started = time.perf_counter()
    a = Producer(conf)
    b = Producer(conf)
    attach_s = time.perf_counter() - started
    assert attach_s < 10.0, f"attaching two clients took {attach_s:.2f}s"  # no hang; speed is the benchmark's
    try:
        ra = _produce(a, unique_topic, 300, b"a")
        rb = _produce(b, unique_topic, 300, b"b")
        assert [err for err, _ in ra + rb if err is not None] == []
        assert [v for _, v in ra] == [b"a%d" % i for i in range(300)]  # own reports, in order
        assert [v for _, v in rb] == [b"b%d" % i for i in range(300)]
    finally:
        a.close() if hasattr(a, "close") else None
        b.close() if hasattr(b, "close") else None
    assert server.poll() is None


def test_a_crashed_client_costs_the_others_nothing(mock_cluster, unique_topic, runtime_dir) -> None:
    directory, server = runtime_dir
    script = textwrap.dedent(f"""
        import os
        from kqactors import Producer
        p = Producer({{"bootstrap.servers": {mock_cluster.bootstrap!r}, "kqactors.runtime.dir": {directory!r}}})
        for i in range(100):
            p.produce({unique_topic!r}, b"x")
        p.flush(10)
        os._exit(9)
    """)
    env = dict(os.environ, PYTHONPATH=ROOT)
    assert subprocess.run([sys.executable, "-c", script], env=env, timeout=60).returncode == 9
    p = Producer({"bootstrap.servers": mock_cluster.bootstrap, "kqactors.runtime.dir": directory})
    try:
        reports = _produce(p, unique_topic, 100, b"c")
        assert len(reports) == 100 and all(err is None for err, _ in reports)
    finally:
        p.flush(5)
    assert server.poll() is None


def test_runtime_stop_gives_an_error_not_a_hang(mock_cluster, unique_topic, tmp_path) -> None:
    directory = str(tmp_path / "rt")
    server = start_runtime(directory)
    conf = {"bootstrap.servers": mock_cluster.bootstrap, "kqactors.runtime.dir": directory}
    errors: list = []
    try:
        p = Producer({**conf, "error_cb": errors.append})
        other = Producer(conf)  # a second member of the same group
        assert len(_produce(p, unique_topic, 10, b"d")) == 10
        assert len(_produce(other, unique_topic, 10, b"o")) == 10
        stop_runtime(server)
        started = time.monotonic()
        while not errors and time.monotonic() - started < 10:
            p.poll(0.1)
        assert [(e.code(), e.fatal()) for e in errors] == [(KafkaError._TRANSPORT, True)]  # said, not hung
        outcome = []
        try:
            for _ in range(50):
                p.produce(unique_topic, b"after", on_delivery=lambda err, msg: outcome.append(err))
            p.flush(10)
        except (KafkaException, BufferError) as exc:
            outcome.append(exc)
        assert outcome and time.monotonic() - started < 15
        with pytest.raises(KafkaException):
            Producer(conf)  # no runtime: an error at once
        server = start_runtime(directory)  # the runtime is back: a new client works
        q = Producer(conf)
        assert all(err is None for err, _ in _produce(q, unique_topic, 10, b"e"))
        q.close()
    finally:
        stop_runtime(server)
