"""Benchmark harness: run one client runner in a fresh process and measure its whole process tree.

Runs in: the benchmark driver process (benchmarks/bench_produce.py); each measured run is a child process
(benchmarks/clients/<client>_produce.py), plus whatever that child spawns (kqactors' host processes).

What is measured, per run:
- msgs/s and MB/s: from the runner's own clock, first produce → last delivery report (MB = 10^6 bytes of
  message values).
- CPU seconds: user+system time of the runner and all its descendants, between GO and RESULT (see the
  handshake in clients/_common.py). A sampler thread reads every process of the tree every ~50 ms and keeps
  each pid's latest cumulative CPU, so a child that exits mid-run still counts up to its last sample.
- Peak RSS: the largest sum of RSS over the tree seen by the sampler, over the runner's whole life. RSS counts
  every page a process maps, so pages several processes share (libpython, libzmq, the interpreter's own) count
  once per process: a client of several processes looks bigger than it is.
- Peak PSS (proportional set size, /proc/<pid>/smaps_rollup): each shared page divided among the processes
  that map it, so the sum over the tree is what the tree costs the machine; the fair comparison between a
  one-process client and one of several processes. Both are reported.

Fairness (what each client gets):
- confluent-kafka and kqactors: the same config dict: acks=1, linger.ms=5 (librdkafka's default, written
  out), compression.type; everything else at its default (batch.size 1,000,000, 100k-message queue).
- kafka-python and aiokafka: acks=1, linger_ms=5 (the same wait as librdkafka) and the batch size that
  was fastest for each in a 16 KiB / 256 KiB / 1 MiB sweep on this harness (bench_produce.PEER_BATCH_BYTES):
  kafka-python 1 MiB (librdkafka's batch.size); aiokafka 256 KiB for 1 KiB zstd (3-4x faster than with
  16 KiB) and its 16 KiB default for 100 B and 1 KiB lz4 (its high-level lz4 slows down with big batches).
- Everyone produces the same pre-built payloads (deterministic, log-line-like text) with no key, so each
  client's default partitioner spreads them over the 3 partitions of a fresh topic per run.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import psutil

BENCH_DIR = Path(__file__).resolve().parent
CLIENTS_DIR = BENCH_DIR / "clients"
SAMPLE_INTERVAL_S = 0.05
#: client name → runner script in benchmarks/clients/
RUNNERS = {
    "kqactors": "kqactors_produce.py",
    "confluent-kafka": "confluent_kafka_produce.py",
    "kafka-python": "kafka_python_produce.py",
    "aiokafka": "aiokafka_produce.py",
}


class RunFailed(RuntimeError):
    """A runner exited, printed something unexpected, or timed out; the message carries its stderr tail."""


class TreeSampler:
    """Samples CPU time, RSS and PSS of a process and all its descendants on a background thread."""

    def __init__(self, pid: int, interval: float = SAMPLE_INTERVAL_S) -> None:
        self._root = psutil.Process(pid)
        self._interval = interval
        self._lock = threading.Lock()
        self._cpu_by_pid: dict[int, float] = {}
        self._baseline: dict[int, float] = {}
        self.peak_rss = 0
        #: peak of the tree's summed PSS; 0 where smaps_rollup cannot be read (not Linux, another user's process)
        self.peak_pss = 0
        self.max_processes = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="tree-sampler", daemon=True)

    def start(self) -> TreeSampler:
        self.sample()
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _loop(self) -> None:
        while not self._stop.wait(self._interval):
            self.sample()

    def _processes(self) -> list[psutil.Process]:
        try:
            return [self._root, *self._root.children(recursive=True)]
        except psutil.Error:
            return []

    def sample(self) -> None:
        """Read every live process of the tree once; remember per-pid CPU and update the RSS and PSS peaks."""
        rss_total = pss_total = 0
        seen: dict[int, float] = {}
        for process in self._processes():
            try:
                with process.oneshot():
                    times = process.cpu_times()
                    rss = process.memory_info().rss
                pss = _pss(process)
            except psutil.Error:
                continue
            seen[process.pid] = times.user + times.system
            rss_total += rss
            pss_total += pss
        with self._lock:
            self._cpu_by_pid.update(seen)
            self.peak_rss = max(self.peak_rss, rss_total)
            self.peak_pss = max(self.peak_pss, pss_total)
            self.max_processes = max(self.max_processes, len(seen))

    def mark_baseline(self) -> None:
        """Take a fresh sample and remember it as the zero point for :meth:`cpu_since_baseline`."""
        self.sample()
        with self._lock:
            self._baseline = dict(self._cpu_by_pid)

    def cpu_since_baseline(self) -> float:
        """CPU seconds used by the tree since the baseline (processes born later count from zero)."""
        self.sample()
        with self._lock:
            return sum(cpu - self._baseline.get(pid, 0.0) for pid, cpu in self._cpu_by_pid.items())


def cpu_seconds(pids: dict[str, int]) -> dict[str, float]:
    """{label: user+system CPU seconds so far} of the labelled processes (gone ones left out)."""
    seen: dict[str, float] = {}
    for label, pid in pids.items():
        try:
            times = psutil.Process(pid).cpu_times()
            seen[label] = times.user + times.system
        except psutil.Error:
            pass
    return seen


def _pss(process: psutil.Process) -> int:
    """The process's PSS in bytes (psutil reads /proc/<pid>/smaps_rollup), 0 where it cannot be read."""
    try:
        return int(getattr(process.memory_full_info(), "pss", 0))
    except psutil.AccessDenied:
        return 0


@dataclass
class RunResult:
    client: str
    case: str
    repeat: int
    count: int
    size: int
    delivered: int
    errors: dict[str, int]
    elapsed_s: float
    msgs_per_s: float
    mb_per_s: float
    cpu_s: float
    peak_rss_mb: float
    processes: int
    extra: dict[str, Any] = field(default_factory=dict)
    peak_pss_mb: float = 0.0


@dataclass
class RunBroker:
    """Where a benchmark runs, and how it makes a topic there."""

    bootstrap: str
    kind: str
    create_topic: Callable[[str, int], Any]


BROKER_KINDS = ("tansu", "mock")


@contextmanager
def broker_for_run(bootstrap: str | None, kind: str = "tansu") -> Iterator[RunBroker]:
    """The given bootstrap, or an embedded broker started for the run and stopped after it: Tansu, or the
    librdkafka mock cluster (one broker; it answers an empty Fetch at once instead of holding it, so the
    clients' own latency shows, and it offers no CreateTopics, so topics are made through its control)."""
    from kqactors.cli.perf_payload import create_topic

    if bootstrap is not None:
        yield RunBroker(bootstrap, "given", lambda topic, partitions: create_topic(bootstrap, topic, partitions))
        return
    if kind == "mock":
        from kqactors.testing.mock_cluster import MockCluster

        with MockCluster(num_brokers=1) as cluster:
            print(f"embedded librdkafka mock cluster at {cluster.bootstrap}", file=sys.stderr)
            yield RunBroker(cluster.bootstrap, "librdkafka mock cluster",
                            lambda topic, partitions: cluster.create_topic(topic, partitions))
        return
    from kqactors.testing.tansu import TansuBroker

    with TansuBroker() as broker:
        print(f"embedded Tansu broker at {broker.bootstrap}", file=sys.stderr)
        yield RunBroker(broker.bootstrap, "embedded Tansu",
                        lambda topic, partitions: create_topic(broker.bootstrap, topic, partitions))


def run_client(client: str, case: str, repeat: int, bootstrap: str, topic: str, count: int, size: int,
               compression: str, timeout_s: float = 300.0, extra_args: tuple[str, ...] = ()) -> RunResult:
    """Run one measured produce in a fresh ``client`` process and return what it and the sampler saw."""
    script = CLIENTS_DIR / RUNNERS[client]
    command = [sys.executable, str(script), "--bootstrap", bootstrap, "--topic", topic,
               "--count", str(count), "--size", str(size), "--compression", compression, *extra_args]
    stderr_path = BENCH_DIR / "out" / f"stderr-{client}-{os.getpid()}.log"
    stderr_path.parent.mkdir(parents=True, exist_ok=True)
    with open(stderr_path, "w+b") as stderr_file:
        proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr_file,
                                text=True, bufsize=1, cwd=str(CLIENTS_DIR))
        sampler = TreeSampler(proc.pid).start()
        deadline = time.monotonic() + timeout_s
        watchdog = threading.Timer(timeout_s, proc.kill)  # a silent, hung runner must not block readline
        watchdog.daemon = True
        watchdog.start()
        try:
            _expect(proc, "READY", deadline, stderr_file)
            sampler.mark_baseline()
            _send(proc, "GO")
            line = _expect(proc, "RESULT ", deadline, stderr_file)
            cpu_s = sampler.cpu_since_baseline()
            _send(proc, "EXIT")
            proc.wait(timeout=max(1.0, deadline - time.monotonic()))
        except (RunFailed, subprocess.TimeoutExpired) as exc:
            proc.kill()
            proc.wait()
            raise RunFailed(f"{client} run failed: {exc}\n{_tail(stderr_file)}") from exc
        finally:
            watchdog.cancel()
            sampler.stop()
    stderr_path.unlink(missing_ok=True)
    report = json.loads(line[len("RESULT "):])
    elapsed = max(float(report["elapsed_s"]), 1e-9)
    delivered = int(report["delivered"])
    known = {"client", "count", "size", "compression", "delivered", "errors", "elapsed_s"}
    return RunResult(
        client=client, case=case, repeat=repeat, count=count, size=size, delivered=delivered,
        errors=dict(report["errors"]), elapsed_s=elapsed, msgs_per_s=delivered / elapsed,
        mb_per_s=delivered * size / elapsed / 1e6, cpu_s=cpu_s, peak_rss_mb=sampler.peak_rss / 2**20,
        processes=sampler.max_processes, extra={k: v for k, v in report.items() if k not in known},
        peak_pss_mb=sampler.peak_pss / 2**20,
    )


def _send(proc: subprocess.Popen, word: str) -> None:
    assert proc.stdin is not None
    try:
        proc.stdin.write(word + "\n")
        proc.stdin.flush()
    except BrokenPipeError as exc:
        raise RunFailed(f"runner closed its stdin before {word}") from exc


def _expect(proc: subprocess.Popen, prefix: str, deadline: float, stderr_file: Any) -> str:
    """Read stdout lines until one starts with ``prefix``; other lines are runner chatter and are skipped."""
    assert proc.stdout is not None
    while True:
        if time.monotonic() > deadline:
            raise RunFailed(f"timed out waiting for {prefix.strip()}")
        line = proc.stdout.readline()
        if not line:
            status = proc.wait()
            reason = "killed after the timeout" if time.monotonic() >= deadline else f"exited (status {status})"
            raise RunFailed(f"runner {reason} before {prefix.strip()}")
        if line.startswith(prefix):
            return line.rstrip("\n")


def _tail(stderr_file: Any, limit: int = 2000) -> str:
    stderr_file.flush()
    stderr_file.seek(0)
    return stderr_file.read().decode(errors="replace")[-limit:]


# -- aggregation and output ---------------------------------------------------------------------------


@dataclass
class CaseSummary:
    """Medians over repeats for one (case, client)."""

    case: str
    client: str
    runs: int
    msgs_per_s: float
    mb_per_s: float
    cpu_s: float
    cpu_us_per_msg: float
    peak_rss_mb: float
    errors: int
    peak_pss_mb: float = 0.0


def summarise(results: list[RunResult]) -> list[CaseSummary]:
    groups: dict[tuple[str, str], list[RunResult]] = {}
    for result in results:
        groups.setdefault((result.case, result.client), []).append(result)
    summaries = []
    for (case, client), runs in groups.items():
        cpu = statistics.median(r.cpu_s for r in runs)
        messages = statistics.median(r.delivered for r in runs) or 1
        summaries.append(CaseSummary(
            case=case, client=client, runs=len(runs),
            msgs_per_s=statistics.median(r.msgs_per_s for r in runs),
            mb_per_s=statistics.median(r.mb_per_s for r in runs),
            cpu_s=cpu, cpu_us_per_msg=cpu / messages * 1e6,
            peak_rss_mb=statistics.median(r.peak_rss_mb for r in runs),
            errors=sum(sum(r.errors.values()) for r in runs),
            peak_pss_mb=statistics.median(r.peak_pss_mb for r in runs),
        ))
    return summaries


def markdown_table(summaries: list[CaseSummary], cases: list[str], clients: list[str],
                   reference: str = "kqactors") -> str:
    """One row per (case, client); the last column is the reference client's msgs/s over this client's."""
    by_key = {(s.case, s.client): s for s in summaries}
    lines = [
        f"| case | client | msgs/s | MB/s | CPU s | CPU µs/msg | peak RSS MiB | peak PSS MiB | errors | "
        f"{reference}/peer msgs/s |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for case in cases:
        ref = by_key.get((case, reference))
        for client in clients:
            row = by_key.get((case, client))
            if row is None:
                lines.append(f"| {case} | {client} | pending | | | | | | | |")
                continue
            if client == reference:
                ratio = "—"
            elif ref is None:
                ratio = "pending"
            else:
                ratio = f"{ref.msgs_per_s / row.msgs_per_s:.2f}"
            lines.append(
                f"| {case} | {client} | {row.msgs_per_s:,.0f} | {row.mb_per_s:.1f} | {row.cpu_s:.2f} | "
                f"{row.cpu_us_per_msg:.1f} | {row.peak_rss_mb:.0f} | {row.peak_pss_mb:.0f} | {row.errors} | {ratio} |"
            )
    return "\n".join(lines)


def write_json(path: Path, meta: dict[str, Any], results: list[RunResult], summaries: list[CaseSummary]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    document = {"meta": meta, "runs": [asdict(r) for r in results], "medians": [asdict(s) for s in summaries]}
    path.write_text(json.dumps(document, indent=2) + "\n")


def write_chart(path: Path, summaries: list[CaseSummary], cases: list[str], clients: list[str]) -> None:
    """Grouped bars: median msgs/s and CPU µs per message, per case and client (small PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    by_key = {(s.case, s.client): s for s in summaries}
    present = [c for c in clients if any((case, c) in by_key for case in cases)]
    figure, (rate_axis, cpu_axis) = plt.subplots(1, 2, figsize=(9, 3.2), dpi=80)
    width = 0.8 / max(1, len(present))
    for offset, client in enumerate(present):
        xs = [i + offset * width for i in range(len(cases))]
        rates = [by_key[(case, client)].msgs_per_s / 1000 if (case, client) in by_key else 0 for case in cases]
        cpus = [by_key[(case, client)].cpu_us_per_msg if (case, client) in by_key else 0 for case in cases]
        rate_axis.bar(xs, rates, width, label=client)
        cpu_axis.bar(xs, cpus, width, label=client)
    for axis, title in ((rate_axis, "throughput (k msgs/s, higher is better)"),
                        (cpu_axis, "CPU µs per message (lower is better)")):
        axis.set_xticks([i + width * (len(present) - 1) / 2 for i in range(len(cases))], cases, fontsize=8)
        axis.set_title(title, fontsize=9)
        axis.tick_params(axis="y", labelsize=8)
    rate_axis.legend(fontsize=7)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path)
    plt.close(figure)
