"""Runs in: a developer shell (the driver); kcat and ``kqactors ingest`` run as its child processes.

Ingestion benchmark: ``kqactors ingest`` against ``kcat -P -l`` on the same file and the same broker (an embedded
Tansu unless --bootstrap), and a crash run.

Cases, each repeated (alternating the order of the tools) on a fresh 3-partition topic:
- ``kcat``: ``kcat -P -b B -t T -l FILE`` (librdkafka; exits after its final flush).
- ``ingest --once``: ``kqactors ingest -b B -t T --state-dir D --once FILE`` (reads to the end, waits for every
  delivery report, checkpoints, exits).
- ``ingest follow``: the daemon as it normally runs (no --once); timed until its state file says the whole file
  is delivered (positions are checkpointed only after the delivery reports), then SIGTERM.
- ``2 files``: the same lines in two files of half the size, ``--once`` with ``--workers 1`` and ``--workers 2``
  (one worker process per file, each with its own producer).
Time = from starting the command to every line being in the topic; the lines are then counted by consuming the
topic with confluent-kafka (Tansu's ListOffsets(latest) can undercount the log end). CPU = user+system of the
command's whole process tree (benchmarks/harness.TreeSampler) plus, separately, the broker's.

The crash run: a writer appends the lines to app.log at --crash-rate lines/s, renaming it (rotation) every quarter;
the daemon (its whole process group) is killed with SIGKILL twice and restarted a second later; at the end every line
is looked up in the topic: missing (must be 0) and duplicated are printed.

kcat: Debian's kcat 1.7.1 links librdkafka 2.0.2, whose ApiVersions request Tansu answers in a way it cannot read
("Read underflow"); when that happens kcat is run with the librdkafka 2.16 of the confluent-kafka wheel
(LD_LIBRARY_PATH), which is what confluent-kafka uses too.

    PYTHONPATH=. python benchmarks/bench_ingest.py                    # 1M lines, 3 repeats, crash run
    PYTHONPATH=. python benchmarks/bench_ingest.py --lines 200000 --repeats 1
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import psutil

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
sys.path.insert(0, str(BENCH_DIR))
from harness import TreeSampler, broker_for_run  # noqa: E402

PARTITIONS = 3
WORDS = ("alpha beta gamma delta user login logout GET POST /api/v1/items status=200 status=500 "
         "latency_ms").split()


def make_file(path: Path, lines: int, start: int = 0, seed: int = 1) -> int:
    """Log-like lines of ~90 bytes, each ending with its number; returns the file's size."""
    rng = random.Random(seed)
    with open(path, "w") as f:
        for i in range(start, start + lines):
            f.write(f"2024-05-01T12:00:{i % 60:02d}Z host{i % 7} app[{i % 1000}]: "
                    + " ".join(rng.choice(WORDS) for _ in range(6)) + f" seq={i}\n")
    return path.stat().st_size


# ---- kcat ------------------------------------------------------------------------------------------------
def kcat_env(bootstrap: str, workdir: Path) -> tuple[dict[str, str], str]:
    """The environment kcat works with against this broker, and which librdkafka that is."""
    probe = subprocess.run(["kcat", "-L", "-b", bootstrap, "-m", "5"], capture_output=True, text=True, timeout=30)
    if probe.returncode == 0:
        return dict(os.environ), "the system's librdkafka"
    import confluent_kafka

    libs = Path(confluent_kafka.__file__).parent.parent / "confluent_kafka.libs"
    candidates = sorted(libs.glob("librdkafka*.so*"))
    if not candidates:
        raise SystemExit(f"kcat cannot talk to {bootstrap} and no bundled librdkafka was found:\n{probe.stderr}")
    libdir = workdir / "rdkafka"
    libdir.mkdir(exist_ok=True)
    link = libdir / "librdkafka.so.1"
    if not link.exists():
        link.symlink_to(candidates[0])
    env = dict(os.environ, LD_LIBRARY_PATH=str(libdir))
    version = subprocess.run(["kcat", "-V"], env=env, capture_output=True, text=True).stdout
    lib = next((part for part in version.split("(")[-1].split() if part[:1].isdigit()), "?")
    return env, f"librdkafka {lib} from the confluent-kafka wheel (LD_LIBRARY_PATH)"


# ---- measuring -------------------------------------------------------------------------------------------
def count_topic(bootstrap: str, topic: str, expected: int, timeout: float = 120.0) -> collections.Counter:
    """Values in ``topic`` read from the start, until ``expected`` arrived and 1 s passed quietly."""
    import confluent_kafka as ck
    from confluent_kafka.admin import AdminClient

    partitions = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=10).topics[topic].partitions
    consumer = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": f"count-{topic}", "enable.auto.commit": False,
                            "fetch.max.bytes": 52428800})
    consumer.assign([ck.TopicPartition(topic, p, ck.OFFSET_BEGINNING) for p in partitions])
    seen: collections.Counter = collections.Counter()
    total = 0
    deadline = time.monotonic() + timeout
    quiet_until = None
    try:
        while time.monotonic() < deadline:
            batch = consumer.consume(10_000, 0.2)
            for m in batch:
                if m.error() is None:
                    seen[m.value()] += 1
                    total += 1
            if total >= expected:
                quiet_until = quiet_until or time.monotonic() + 1.0
                if time.monotonic() > quiet_until:
                    break
    finally:
        consumer.close()
    return seen


class Measured:
    """A command's wall time (start → the ``done`` condition), its tree's CPU, and the broker's CPU."""

    def __init__(self, broker_pid: int | None) -> None:
        self.broker = psutil.Process(broker_pid) if broker_pid else None

    def run(self, command: list[str], env: dict[str, str] | None = None,
            done: Any = None, timeout: float = 600.0) -> dict[str, float]:
        broker_cpu = self._broker_cpu()
        started = time.perf_counter()
        proc = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                start_new_session=True)
        sampler = TreeSampler(proc.pid, 0.02).start()
        try:
            if done is None:
                _, err = proc.communicate(timeout=timeout)
                if proc.returncode != 0:
                    raise SystemExit(f"{command[0]} failed ({proc.returncode}): {err.decode()[-2000:]}")
            else:
                deadline = time.monotonic() + timeout
                while not done():
                    if proc.poll() is not None or time.monotonic() > deadline:
                        raise SystemExit(f"{command} ended or timed out: {proc.stderr.read().decode()[-2000:]}")
                    time.sleep(0.005)
            elapsed = time.perf_counter() - started
            cpu = sampler.cpu_since_baseline()
            processes = sampler.max_processes
        finally:
            sampler.stop()
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                proc.wait(60)
        return {"elapsed_s": elapsed, "cpu_s": cpu, "broker_cpu_s": self._broker_cpu() - broker_cpu,
                "processes": processes}

    def _broker_cpu(self) -> float:
        if self.broker is None:
            return 0.0
        t = self.broker.cpu_times()
        return t.user + t.system


def ingest_command(bootstrap: str, topic: str, state: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "kqactors.cli.main", "ingest", "-b", bootstrap, "-t", topic, "--state-dir",
            str(state), "--log-level", "WARNING", "--no-progress", *args]


def state_done(state: Path, files: list[Path]) -> bool:
    """Every file's saved position is its size (all of its lines delivered)."""
    want = {str(f): f.stat().st_size for f in files}
    got = {}
    for path in state.glob("file-*.json"):
        try:
            data = json.loads(path.read_text())
        except ValueError:
            continue
        if data.get("streams"):
            got[data["path"]] = data["streams"][-1]["pos"]
    return all(got.get(p) == size for p, size in want.items())


# ---- the crash run -----------------------------------------------------------------------------------------
def crash_run(bootstrap: str, create_topic: Any, workdir: Path, lines: int, rate: int) -> dict[str, Any]:
    """A writer appends ``lines`` numbered lines at ``rate`` lines/s to app.log and renames it every quarter (a
    new app.log follows); the daemon follows app.log and is killed (SIGKILL to its process group) at 30 % and
    65 % of the writing, each time restarted 1 s later. Then every number is looked up in the topic."""
    topic = f"ingest-crash-{os.getpid()}-{int(time.time())}"
    create_topic(topic, PARTITIONS)
    logdir = workdir / "crash"
    logdir.mkdir()
    log, state = logdir / "app.log", logdir / "state"
    quarter = lines // 4
    written = [0]
    rotations = [0]
    batch = max(1, rate // 100)

    def writer() -> None:
        rng = random.Random(7)
        started = time.monotonic()
        while written[0] < lines:
            n = min(batch, lines - written[0])
            with open(log, "ab") as f:
                f.write("".join(f"K{written[0] + i:08d} " + " ".join(rng.choice(WORDS) for _ in range(6)) + "\n"
                                for i in range(n)).encode())
            before, written[0] = written[0], written[0] + n
            if before // quarter != written[0] // quarter and written[0] < lines:
                os.rename(log, logdir / f"app.log.{rotations[0]}")
                rotations[0] += 1
            time.sleep(max(0.0, started + written[0] / rate - time.monotonic()))

    def start() -> subprocess.Popen:
        return subprocess.Popen(ingest_command(bootstrap, topic, state, str(log)), stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, start_new_session=True)

    thread = threading.Thread(target=writer, daemon=True)
    daemon = start()
    time.sleep(1.0)
    thread.start()
    kills = 0
    lags: list[int] = []
    for fraction in (0.3, 0.65):
        while written[0] < lines * fraction:
            time.sleep(0.01)
        os.killpg(daemon.pid, signal.SIGKILL)
        daemon.wait()
        kills += 1
        lags.append(saved_lag(state, log))
        time.sleep(1.0)
        daemon = start()
    thread.join()
    seen = count_topic(bootstrap, topic, lines, timeout=300)
    daemon.send_signal(signal.SIGTERM)
    code = daemon.wait(60)
    expected = {f"K{i:08d}".encode() for i in range(lines)}
    numbers = collections.Counter(v.split(b" ", 1)[0] for v in seen.elements())
    missing = len(expected - set(numbers))
    duplicated = sum(numbers.values()) - len(numbers)
    return {"lines": lines, "rate": rate, "kills": kills, "rotations": rotations[0], "missing": missing,
            "duplicated": duplicated, "in_topic": sum(numbers.values()), "sigterm_exit": code,
            "bytes_after_the_saved_position_at_each_kill": lags}


def saved_lag(state: Path, log: Path) -> int:
    """Bytes of the followed file past its saved position (read or not), right after a kill."""
    try:
        size = log.stat().st_size
    except OSError:
        return -1
    for path in state.glob("file-*.json"):
        data = json.loads(path.read_text())
        for stream in data.get("streams", []):
            if stream["ino"] == log.stat().st_ino:
                return size - stream["pos"]
    return size


# ---- driver ------------------------------------------------------------------------------------------------
def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[1])
    parser.add_argument("--lines", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--bootstrap", default=None, help="an existing broker (default: embedded Tansu)")
    parser.add_argument("--cases", default="kcat,once,follow,two-files", help="comma-separated")
    parser.add_argument("--no-crash", action="store_true", help="skip the kill -9 / rotation run")
    parser.add_argument("--crash-rate", type=int, default=100_000, help="lines/s written in the crash run")
    args = parser.parse_args()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p))
    cases = [c for c in args.cases.split(",") if c]
    results: dict[str, list[dict[str, float]]] = collections.defaultdict(list)
    with tempfile.TemporaryDirectory(prefix="bench-ingest-") as tmp, broker_for_run(args.bootstrap) as broker:
        workdir = Path(tmp)
        data = workdir / "lines.log"
        size = make_file(data, args.lines)
        halves = [workdir / "half0.log", workdir / "half1.log"]
        make_file(halves[0], args.lines // 2)
        make_file(halves[1], args.lines - args.lines // 2, start=args.lines // 2)
        kcat, kcat_lib = kcat_env(broker.bootstrap, workdir)
        pid = getattr(getattr(broker, "broker", None), "pid", None)
        if pid is None:
            pid = next((p.pid for p in psutil.Process().children(recursive=True) if "tansu" in p.name()), None)
        measure = Measured(pid)
        print(f"{args.lines:,} lines, {size / 1e6:.1f} MB, broker {broker.kind} at {broker.bootstrap}; "
              f"kcat with {kcat_lib}", file=sys.stderr)
        for repeat in range(args.repeats):
            order = cases if repeat % 2 == 0 else list(reversed(cases))
            for case in order:
                topic = f"ingest-{case}-{repeat}-{os.getpid()}"
                broker.create_topic(topic, PARTITIONS)
                state = workdir / f"state-{case}-{repeat}"
                if case == "kcat":
                    r = measure.run(["kcat", "-P", "-b", broker.bootstrap, "-t", topic, "-l", str(data)], env=kcat)
                    results["kcat"].append(r | {"in_topic": sum(count_topic(broker.bootstrap, topic,
                                                                            args.lines).values())})
                elif case == "once":
                    r = measure.run(ingest_command(broker.bootstrap, topic, state, "--once", str(data)), env=env)
                    results["ingest --once"].append(r | {"in_topic": sum(count_topic(broker.bootstrap, topic,
                                                                                     args.lines).values())})
                elif case == "follow":
                    r = measure.run(ingest_command(broker.bootstrap, topic, state, str(data)), env=env,
                                    done=lambda state=state: state_done(state, [data]))
                    results["ingest follow"].append(r | {"in_topic": sum(count_topic(broker.bootstrap, topic,
                                                                                     args.lines).values())})
                elif case == "two-files":
                    for workers in ("1", "2"):
                        t = f"{topic}-w{workers}"
                        broker.create_topic(t, PARTITIONS)
                        r = measure.run(ingest_command(broker.bootstrap, t, Path(f"{state}-w{workers}"), "--once",
                                                       "--workers", workers, *map(str, halves)), env=env)
                        results[f"ingest --once, 2 files, {workers} worker(s)"].append(
                            r | {"in_topic": sum(count_topic(broker.bootstrap, t, args.lines).values())})
                print(f"repeat {repeat} {case} done", file=sys.stderr)
        kcat_median = statistics.median(r["elapsed_s"] for r in results["kcat"]) if results.get("kcat") else None
        print(f"\n{args.lines:,} lines ({size / 1e6:.1f} MB), {args.repeats} repeat(s), medians; kcat: {kcat_lib}\n")
        print("| case | s to all in the topic | lines/s | CPU s (tree) | broker CPU s | processes | lines in topic "
              "| vs kcat |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|")
        for case, runs in results.items():
            elapsed = statistics.median(r["elapsed_s"] for r in runs)
            ratio = f"{kcat_median / elapsed:.2f}x" if kcat_median else "-"
            print(f"| {case} | {elapsed:.2f} | {args.lines / elapsed:,.0f} | "
                  f"{statistics.median(r['cpu_s'] for r in runs):.2f} | "
                  f"{statistics.median(r['broker_cpu_s'] for r in runs):.2f} | "
                  f"{max(r['processes'] for r in runs)} | {min(r['in_topic'] for r in runs):,} | {ratio} |")
        print("\nper run (s):", json.dumps({c: [round(r["elapsed_s"], 2) for r in runs] for c, runs in results.items()}))
        if not args.no_crash:
            crash = crash_run(broker.bootstrap, broker.create_topic, workdir, args.lines, args.crash_rate)
            print("\ncrash run:", json.dumps(crash))
    return 0


if __name__ == "__main__":
    sys.exit(main())
