"""Runs in: a developer shell (the driver, which also hosts the SparkSession; each baseline client runs in a
fresh child process).

Spark benchmark: rows/s of kqactors.spark against the kqactors clients alone, on the same data.

- read: a batch ``spark.read.format("kqactors")...count()`` of a pre-filled 3-partition topic (``--count`` x
  ``--size`` B, filled once by confluent-kafka) in local[2], against a kqactors Consumer alone reading the
  same topic by assign from the beginning (``consume(10000)`` loop) in a fresh process, with
  ``kqactors.hosts=0`` (what the Spark tasks use) and the default placement (one toppar host per core).
  "spark floor" is the same count over a Python source that yields prebuilt Arrow batches of the same schema
  and size (no Kafka at all): Spark's own cost of taking rows from Python, a ceiling for any Python source.
- write: ``df.write.format("kqactors")...save()`` of ``--count`` rows of ``--size`` B values (no key, two
  Spark partitions: one producer per core) against a kqactors Producer alone producing the same values,
  first produce() to flush() returned, hosts=0 and default.

The read ends at explicit ``endingOffsets`` (each partition's last delivered offset + 1, from the fill's
delivery reports) rather than at "latest": Tansu 0.6 answers ListOffsets(latest) below the log end.

Spark runs are timed as the action's wall time (planning, the driver's offset look-ups and the tasks). The
first query of a session (JVM warm-up, Python workers forking, task clients starting) is reported apart as
"cold"; the others reuse the workers and their idle clients (kqactors.spark.pool). CPU is per process group,
sampled like benchmarks/harness.py (the broker's own CPU is left out of every total).

    PYTHONPATH=. python benchmarks/bench_spark.py --repeats 3          # 1M x 100 B, embedded Tansu
    PYTHONPATH=. python benchmarks/bench_spark.py --quick              # 100k, one repeat

Prints a markdown table; writes benchmarks/out/spark.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import psutil

BENCH_DIR = Path(__file__).resolve().parent
PARTITIONS = 3


# ---- CPU by process group ---------------------------------------------------------------------------------------
def _group(process: psutil.Process) -> str:
    try:
        cmd = " ".join(process.cmdline())
    except psutil.Error:
        return "other"
    if "tansu" in cmd or "mock_server" in cmd:
        return "broker"
    if "java" in process.name() or "java" in cmd.split(" ")[0]:
        return "jvm"
    if "kqactors.runtime.host_process" in cmd:
        return "kqactors hosts"
    if "pyspark" in cmd or "daemon" in cmd:
        return "python workers"
    return "client"


class GroupSampler:
    """CPU seconds of a process tree by group, sampled every 50 ms (a process's last sample counts after it
    exits); the baseline is taken at start()."""

    def __init__(self, root_pid: int) -> None:
        self._root = psutil.Process(root_pid)
        self._cpu: dict[int, tuple[str, float]] = {}
        self._base: dict[int, float] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _sample(self) -> None:
        try:
            procs = [self._root, *self._root.children(recursive=True)]
        except psutil.Error:
            return
        for proc in procs:
            try:
                times = proc.cpu_times()
                key = self._cpu.get(proc.pid, (None, 0.0))[0] or _group(proc)
                with self._lock:
                    self._cpu[proc.pid] = (key, times.user + times.system)
            except psutil.Error:
                continue

    def _loop(self) -> None:
        while not self._stop.wait(0.05):
            self._sample()

    def start(self) -> GroupSampler:
        self._sample()
        with self._lock:
            self._base = {pid: cpu for pid, (_, cpu) in self._cpu.items()}
        self._thread.start()
        return self

    def stop(self) -> dict[str, float]:
        self._stop.set()
        self._thread.join()
        self._sample()
        out: dict[str, float] = {}
        with self._lock:
            for pid, (key, cpu) in self._cpu.items():
                out[key] = out.get(key, 0.0) + cpu - self._base.get(pid, 0.0)
        return {k: round(v, 2) for k, v in sorted(out.items())}


def _total(cpu: dict[str, float]) -> float:
    return round(sum(v for k, v in cpu.items() if k != "broker"), 2)


# ---- the data -----------------------------------------------------------------------------------------------------
def fill(bootstrap: str, topic: str, count: int, size: int) -> dict[int, int]:
    """``count`` values of ``size`` B round-robin over the partitions (confluent-kafka); the end offsets."""
    import confluent_kafka

    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 50})
    ends: dict[int, int] = {}

    def delivered(err: Any, msg: Any) -> None:
        if err is None:
            ends[msg.partition()] = max(ends.get(msg.partition(), 0), msg.offset() + 1)

    payload = b"x" * size
    for i in range(count):
        while True:
            try:
                producer.produce(topic, payload, partition=i % PARTITIONS, on_delivery=delivered)
                break
            except BufferError:
                producer.poll(0.1)
    assert producer.flush(120) == 0, "the fill was not delivered"
    return ends


# ---- baselines (child processes) ----------------------------------------------------------------------------------
def child_consume(bootstrap: str, topic: str, ends: dict[int, int], hosts: int | None) -> dict[str, float]:
    from kqactors import Consumer, TopicPartition

    conf: dict[str, Any] = {"bootstrap.servers": bootstrap, "group.id": "bench-spark", "enable.auto.commit": False}
    if hosts is not None:
        conf["kqactors.hosts"] = hosts
    t0 = time.perf_counter()
    consumer = Consumer(conf)
    t1 = time.perf_counter()
    consumer.assign([TopicPartition(topic, p, 0) for p in ends])
    want = sum(ends.values())
    got = 0
    while got < want:
        got += sum(1 for m in consumer.consume(10000, 1.0) if m.error() is None)
    t2 = time.perf_counter()
    consumer.close()
    return {"rows": got, "elapsed_s": t2 - t1, "with_start_s": t2 - t0}


def child_produce(bootstrap: str, topic: str, count: int, size: int, hosts: int | None) -> dict[str, float]:
    from kqactors import Producer

    conf: dict[str, Any] = {"bootstrap.servers": bootstrap, "partitioner": "murmur2_random"}
    if hosts is not None:
        conf["kqactors.hosts"] = hosts
    payload = b"x" * size
    t0 = time.perf_counter()
    producer = Producer(conf)
    t1 = time.perf_counter()
    for _ in range(count):
        while True:
            try:
                producer.produce(topic, payload)
                break
            except BufferError:
                producer.poll(0.05)
    left = producer.flush(120)
    t2 = time.perf_counter()
    producer.close()
    assert left == 0
    return {"rows": count, "elapsed_s": t2 - t1, "with_start_s": t2 - t0}


def run_child(args: list[str]) -> tuple[dict[str, float], dict[str, float]]:
    proc = subprocess.Popen([sys.executable, __file__, "--child", *args], stdout=subprocess.PIPE, text=True)
    sampler = GroupSampler(proc.pid).start()
    out, _ = proc.communicate(timeout=600)
    cpu = sampler.stop()
    if proc.returncode != 0:
        raise RuntimeError(f"child {args} failed ({proc.returncode})")
    return json.loads(out.strip().splitlines()[-1]), cpu


# ---- Spark ------------------------------------------------------------------------------------------------------------
def spark_session() -> Any:
    from pyspark.sql import SparkSession

    import kqactors.spark

    spark = (SparkSession.builder.master("local[2]").appName("bench-spark").config("spark.ui.enabled", "false")
             .config("spark.driver.memory", "2g").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    kqactors.spark.register(spark)
    return spark


def register_floor(spark: Any, count: int, size: int) -> None:
    """A Python data source of the same schema that yields prebuilt Arrow batches (no Kafka): what Spark
    itself costs to take ``count`` rows from Python workers, the ceiling for any Python source."""
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    class FloorReader(DataSourceReader):
        def partitions(self) -> list:
            return [InputPartition(p) for p in range(PARTITIONS)]

        def read(self, partition: Any) -> Any:
            import pyarrow as pa

            from kqactors.spark.partition_reader import ARROW_SCHEMA

            rows = 10_000
            columns = [pa.nulls(rows, pa.binary()), pa.array([b"x" * size] * rows, pa.binary()),
                       pa.array(["floor"] * rows), pa.repeat(pa.scalar(partition.value, pa.int32()), rows),
                       pa.array(range(rows), pa.int64()),
                       pa.array([1_700_000_000_000_000] * rows, pa.int64()).cast(ARROW_SCHEMA.field(5).type),
                       pa.repeat(pa.scalar(0, pa.int32()), rows)]
            batch = pa.RecordBatch.from_arrays(columns, schema=ARROW_SCHEMA)
            left = count // PARTITIONS + (1 if partition.value < count % PARTITIONS else 0)
            while left > 0:
                yield batch.slice(0, min(rows, left))
                left -= rows

    class FloorSource(DataSource):
        @classmethod
        def name(cls) -> str:
            return "kqactors_bench_floor"

        def schema(self) -> Any:
            from kqactors.spark.source import SCHEMA

            return SCHEMA

        def reader(self, schema: Any) -> Any:
            return FloorReader()

    spark.dataSource.register(FloorSource)


def spark_floor(spark: Any) -> tuple[dict[str, float], dict]:
    df = spark.read.format("kqactors_bench_floor").load()
    sampler = GroupSampler(os.getpid()).start()
    t0 = time.perf_counter()
    rows = df.count()
    return {"rows": rows, "elapsed_s": time.perf_counter() - t0}, sampler.stop()


def spark_read(spark: Any, bootstrap: str, topic: str, ends: dict[int, int]) -> tuple[dict[str, float], dict]:
    df = (spark.read.format("kqactors").option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
          .option("endingOffsets", json.dumps({topic: {str(p): e for p, e in ends.items()}})).load())
    sampler = GroupSampler(os.getpid()).start()
    t0 = time.perf_counter()
    rows = df.count()
    elapsed = time.perf_counter() - t0
    return {"rows": rows, "elapsed_s": elapsed}, sampler.stop()


def spark_write(spark: Any, bootstrap: str, topic: str, count: int, size: int) -> tuple[dict[str, float], dict]:
    df = spark.range(0, count, 1, 2).selectExpr(f"CAST(repeat('x', {size}) AS BINARY) AS value")
    sampler = GroupSampler(os.getpid()).start()
    t0 = time.perf_counter()
    df.write.format("kqactors").option("kafka.bootstrap.servers", bootstrap).option("topic", topic) \
        .mode("append").save()
    elapsed = time.perf_counter() - t0
    return {"rows": count, "elapsed_s": elapsed}, sampler.stop()


# ---- driver -----------------------------------------------------------------------------------------------------------
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[1], formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--count", type=int, default=1_000_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--cases", default="read,write")
    parser.add_argument("--bootstrap", default=None, help="an existing cluster (default: embedded Tansu)")
    parser.add_argument("--quick", action="store_true", help="100k rows, one repeat")
    parser.add_argument("--child", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        kind, bootstrap, topic, rest, hosts = args.child
        hosts_value = None if hosts == "default" else int(hosts)
        if kind == "consume":
            result = child_consume(bootstrap, topic, {int(k): v for k, v in json.loads(rest).items()}, hosts_value)
        else:
            count, size = json.loads(rest)
            result = child_produce(bootstrap, topic, count, size, hosts_value)
        print(json.dumps(result))
        return
    if args.quick:
        args.count, args.repeats = 100_000, 1
    cases = args.cases.split(",")
    sys.path.insert(0, str(BENCH_DIR))
    from harness import broker_for_run

    results: list[dict[str, Any]] = []

    def record(case: str, runner: str, repeat: int, run: dict[str, float], cpu: dict[str, float]) -> None:
        rate = run["rows"] / run["elapsed_s"]
        row = {"case": case, "runner": runner, "repeat": repeat, **run, "rows_per_s": rate, "cpu": cpu,
               "cpu_s": _total(cpu), "load": os.getloadavg()[0]}
        results.append(row)
        print(f"{case:5} {runner:28} {run['elapsed_s']:6.2f} s {rate:12,.0f} rows/s  CPU {_total(cpu):5.2f} s {cpu}",
              file=sys.stderr, flush=True)

    with broker_for_run(args.bootstrap, "tansu") as broker:
        tag = uuid.uuid4().hex[:6]
        topic = f"bench-spark-{tag}"
        broker.create_topic(topic, PARTITIONS)
        started = time.perf_counter()
        ends = fill(broker.bootstrap, topic, args.count, args.size)
        print(f"filled {topic}: {ends} in {time.perf_counter() - started:.1f} s", file=sys.stderr)
        warm = f"bench-spark-warm-{tag}"
        broker.create_topic(warm, PARTITIONS)
        warm_ends = fill(broker.bootstrap, warm, 3000, args.size)
        spark = spark_session()
        register_floor(spark, args.count, args.size)
        if "read" in cases:
            record("read", "spark, first query (cold)", 0, *spark_read(spark, broker.bootstrap, warm, warm_ends))
            spark_floor(spark)  # the floor's own first query (JIT, its planner worker) is not measured
        if "write" in cases:
            broker.create_topic(warm + "-w", PARTITIONS)
            record("write", "spark, first query (cold)", 0, *spark_write(spark, broker.bootstrap, warm + "-w",
                                                                           3000, args.size))
        for repeat in range(1, args.repeats + 1):
            if "read" in cases:
                for hosts in ("0", "default"):
                    record("read", f"Consumer alone, hosts={hosts}", repeat,
                           *run_child(["consume", broker.bootstrap, topic, json.dumps(ends), hosts]))
                record("read", "spark local[2]", repeat, *spark_read(spark, broker.bootstrap, topic, ends))
                record("read", "spark floor (no Kafka)", repeat, *spark_floor(spark))
            if "write" in cases:
                for hosts in ("0", "default"):
                    target = f"bench-spark-w{repeat}-{hosts}-{tag}"
                    broker.create_topic(target, PARTITIONS)
                    record("write", f"Producer alone, hosts={hosts}", repeat,
                           *run_child(["produce", broker.bootstrap, target, json.dumps([args.count, args.size]),
                                       hosts]))
                target = f"bench-spark-w{repeat}-spark-{tag}"
                broker.create_topic(target, PARTITIONS)
                record("write", "spark local[2]", repeat, *spark_write(spark, broker.bootstrap, target, args.count,
                                                                      args.size))
        spark.stop()
    out = BENCH_DIR / "out" / "spark.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=1))
    print(summary(results, args))


def summary(results: list[dict[str, Any]], args: argparse.Namespace) -> str:
    lines = [f"{args.count:,} x {args.size} B, {args.repeats} repeat(s), medians; CPU excludes the broker", "",
             "| case | runner | s | rows/s | CPU s | spark / runner |", "|---|---|---:|---:|---:|---:|"]
    for case in ("read", "write"):
        by_runner: dict[str, list[dict[str, Any]]] = {}
        for row in results:
            if row["case"] == case:
                by_runner.setdefault(row["runner"], []).append(row)
        spark_rate = statistics.median(r["rows_per_s"] for r in by_runner.get("spark local[2]", [])) \
            if "spark local[2]" in by_runner else None
        for runner, rows in by_runner.items():
            rate = statistics.median(r["rows_per_s"] for r in rows)
            ratio = "—" if spark_rate is None or runner.startswith("spark") else f"{spark_rate / rate:.2f}"
            shown = f"{rate:,.0f}" if "cold" not in runner else f"— ({rows[0]['rows']:,} rows)"
            lines.append(f"| {case} | {runner} | {statistics.median(r['elapsed_s'] for r in rows):.2f} | "
                         f"{shown} | {statistics.median(r['cpu_s'] for r in rows):.2f} | {ratio} |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
