"""``kqactors perf produce`` and the benchmark harness against a real Tansu broker.

Runs in: the pytest process (plus the command or benchmark runner as a child process where noted). The
messages' arrival is checked independently with confluent-kafka (partition count, and every message read back).
"""

from __future__ import annotations

import argparse
import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from support.terminal import python_with_ctrl_c

from kqactors.cli import perf

ck = pytest.importorskip("confluent_kafka", reason="confluent-kafka checks what the command produced")
ck_admin = pytest.importorskip("confluent_kafka.admin")

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

REPO_ROOT = Path(__file__).resolve().parents[2]


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    perf.add_parser(parser.add_subparsers(dest="command"))
    return parser.parse_args(["perf", "produce", *argv])


def partition_counts(bootstrap: str, topic: str, expected: int, timeout: float = 30.0) -> tuple[int, int]:
    """(number of partitions, messages read back from the start) as confluent-kafka sees the topic.

    Messages are counted by consuming: Tansu's high watermark (memory storage) counts batches, not
    records. Reading stops at ``expected`` plus a short quiet period, so extra (duplicate) messages show.
    """
    admin = ck_admin.AdminClient({"bootstrap.servers": bootstrap})
    partitions = admin.list_topics(topic, timeout=10).topics[topic].partitions
    consumer = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": f"perf-check-{topic}",
                            "enable.auto.commit": False})
    consumer.assign([ck.TopicPartition(topic, p, ck.OFFSET_BEGINNING) for p in partitions])
    total = 0
    deadline = time.monotonic() + timeout
    quiet_until = None
    try:
        while time.monotonic() < deadline:
            batch = consumer.consume(10_000, 0.2)
            total += sum(1 for message in batch if message.error() is None)
            if total >= expected:
                quiet_until = quiet_until or time.monotonic() + 0.5
                if time.monotonic() > quiet_until:
                    break
    finally:
        consumer.close()
    return len(partitions), total


def tansu_children() -> set[int]:
    me = psutil.Process()
    return {p.pid for p in me.children(recursive=True) if "tansu" in p.name().lower()}


def test_perf_produce_creates_the_topic_and_delivers_every_message(tansu, unique_topic, capsys):
    args = parse("-b", tansu.bootstrap, "--topic", unique_topic, "--partitions", "3", "--count", "3000",
                 "--size", "512", "--compression", "zstd", "--acks", "1", "--json")
    assert perf.run_perf(args, producer_factory=ck.Producer) == 0
    out, err = capsys.readouterr()
    summary = json.loads(out)
    assert summary["delivered"] == 3000 and summary["failed"] == 0
    assert f"created topic '{unique_topic}' with 3 partitions" in err
    assert partition_counts(tansu.bootstrap, unique_topic, 3000) == (3, 3000)
    # A second run on the now-existing topic keeps its partitions and appends.
    assert perf.run_perf(parse("-b", tansu.bootstrap, "--topic", unique_topic, "--partitions", "5",
                               "--count", "100"), producer_factory=ck.Producer) == 0
    assert "exists; --partitions ignored" in capsys.readouterr().err
    assert partition_counts(tansu.bootstrap, unique_topic, 3100) == (3, 3100)


def test_embedded_broker_is_started_and_stopped(capsys):
    before = tansu_children()
    assert perf.run_perf(parse("--count", "500", "--json"), producer_factory=ck.Producer) == 0
    out, err = capsys.readouterr()
    summary = json.loads(out)
    assert summary["embedded_broker"] is True and summary["delivered"] == 500
    assert "embedded Tansu broker at 127.0.0.1:" in err
    assert tansu_children() == before


def test_kqactors_perf_produce_command_with_kqactors_producer(tansu, unique_topic):
    command = [sys.executable, "-m", "kqactors.cli.main", "perf", "produce", "-b", tansu.bootstrap,
               "--topic", unique_topic, "--partitions", "3", "--count", "4000", "--size", "100",
               "--linger-ms", "5", "--json", "-q"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=90, cwd=REPO_ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    assert summary["delivered"] == 4000 and summary["errors"] == {}
    assert summary["latency_p50_ms"] > 0
    assert partition_counts(tansu.bootstrap, unique_topic, 4000) == (3, 4000)


def test_ctrl_c_stops_perf_produce_promptly_with_a_partial_summary(tansu, unique_topic):
    command = python_with_ctrl_c("-m", "kqactors.cli.main", "perf", "produce", "-b", tansu.bootstrap,
                                 "--topic", unique_topic, "--count", "50000000", "--size", "100", "-q")
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO_ROOT)
    try:
        time.sleep(5)  # producing by now
        assert proc.poll() is None
        interrupted_at = time.monotonic()
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
        took = time.monotonic() - interrupted_at
    finally:
        proc.kill()
    assert proc.returncode == 130, err[-2000:]
    assert took < 3, f"took {took:.1f} s to stop"
    assert "Traceback" not in err
    lines = out.splitlines()
    assert lines[0] == "interrupted (Ctrl-C): partial results"
    delivered, produced = (int(n) for n in re.search(r": (\d+)/(\d+) messages", lines[1]).groups())
    assert 0 < delivered <= produced < 50000000


@pytest.mark.parametrize("client", [
    "confluent-kafka",
    "kqactors",
])
def test_benchmark_harness_measures_a_fresh_runner_process_tree(tansu, unique_topic, client):
    sys.path.insert(0, str(REPO_ROOT / "benchmarks"))
    try:
        from harness import run_client
    finally:
        sys.path.remove(str(REPO_ROOT / "benchmarks"))
    from kqactors.cli.perf_payload import create_topic

    assert create_topic(tansu.bootstrap, unique_topic, 3).status == "created"
    # Enough messages that the run spans several clock ticks: psutil's CPU times have 10 ms resolution.
    count = 30_000
    result = run_client(client, "smoke", 0, tansu.bootstrap, unique_topic, count=count, size=100,
                        compression="none", timeout_s=90)
    assert result.delivered == count and result.errors == {}
    assert result.cpu_s > 0 and result.peak_rss_mb > 5 and result.msgs_per_s > 0
    # PSS divides shared pages among the processes mapping them: never above RSS, and below it once the
    # tree's processes share libpython and the other libraries
    assert 0 < result.peak_pss_mb <= result.peak_rss_mb
    if client == "kqactors":
        assert result.processes > 1  # host processes are part of what is measured
        assert result.peak_pss_mb < result.peak_rss_mb
    # 10 warm-up messages plus the measured ones.
    assert partition_counts(tansu.bootstrap, unique_topic, count + 10) == (3, count + 10)
