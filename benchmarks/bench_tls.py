"""TLS benchmark: kqactors and confluent-kafka produce and consume through the same stunnel (TLS terminated in
front of Tansu, kqactors.testing.stunnel), 100 B and 1 KiB values, in one run; and where the CPU goes, per
process (the app, each kqactors host, stunnel, Tansu) between GO and RESULT.

Runs in: the driver (this file, no arguments beyond its options) and, with ``--runner``, the measured runner
processes harness.run_client starts: the shared produce/consume loops of benchmarks/clients
(_rdkafka_style, _rdkafka_consume) with the TLS settings added to their config dict, and the runner's
GO → RESULT CPU per process reported in the RESULT line.

    python benchmarks/bench_tls.py [--count 200000] [--repeats 2] [--hosts 1]

kqactors runs with its default process layout (kqactors.hosts, default 1: the app, the main host with the
broker actors — where TLS is done — and one toppar host); ``--hosts 0`` puts the toppars on the main host.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR.parent))

SIZES = (100, 1024)
PARTITIONS = 3
CLIENTS = ("kqactors", "confluent-kafka")


# ---- runner side ---------------------------------------------------------------------------------------------

def _runner(argv: list[str]) -> None:
    """One measured run: ``--runner CLIENT --kind produce|consume --ca PATH --pids JSON`` and the shared
    loop's own arguments."""
    import os
    own = argparse.ArgumentParser(add_help=False)
    own.add_argument("--runner", required=True)
    own.add_argument("--kind", choices=("produce", "consume"), required=True)
    own.add_argument("--ca", required=True)
    own.add_argument("--pids", default="{}")
    own.add_argument("--hosts", type=int, default=1)
    mine, rest = own.parse_known_args(argv)
    sys.argv = [sys.argv[0], *rest]
    sys.path.insert(0, str(BENCH_DIR / "clients"))
    import _rdkafka_consume as consume_loop
    import _rdkafka_style as produce_loop
    from harness import cpu_seconds

    tls = {"security.protocol": "ssl", "ssl.ca.location": mine.ca}
    if mine.runner == "kqactors":
        import kqactors as module
        from kqactors.message import OFFSET_BEGINNING, TopicPartition
        tls["kqactors.hosts"] = mine.hosts
    else:
        import confluent_kafka as module
        from confluent_kafka import OFFSET_BEGINNING, TopicPartition
    made: list[Any] = []
    outside = {k: int(v) for k, v in json.loads(mine.pids).items()}

    def pids() -> dict[str, int]:
        found = {"app": os.getpid(), **outside}
        for client in made:
            runtime = getattr(getattr(client, "_handle", None), "rt", None)
            for key in getattr(runtime, "host_keys", ()):
                pid = runtime.host_pid(key)
                if pid is not None:
                    found[f"host {key}" + (" (main: broker actors)" if key == "h0" else " (toppars)")] = pid
        return found

    def tracked(cls: Any) -> Any:
        def make(config: dict[str, Any]) -> Any:
            client = cls(config)
            made.append(client)
            return client
        return make

    marks: dict[str, dict[str, float]] = {}

    def ready() -> None:
        consume_loop_ready()
        marks["go"] = cpu_seconds(pids())

    def report(*args: Any, **extra: Any) -> None:
        end = cpu_seconds(pids())
        cpu = {label: round(end[label] - marks["go"].get(label, 0.0), 3) for label in end}
        consume_loop_report(*args, cpu_by_process=cpu, **extra)

    if mine.kind == "produce":
        base = produce_loop.producer_config
        produce_loop.producer_config = lambda args: {**base(args), **tls}
        consume_loop_ready, consume_loop_report = produce_loop.announce_ready_and_wait, produce_loop.report_and_wait
        produce_loop.announce_ready_and_wait, produce_loop.report_and_wait = ready, report
        produce_loop.run(mine.runner, tracked(module.Producer))
    else:
        base_consumer = consume_loop.consumer_config
        consume_loop.consumer_config = lambda args, mode: {**base_consumer(args, mode), **tls}
        consume_loop_ready, consume_loop_report = consume_loop.announce_ready_and_wait, consume_loop.report_and_wait
        consume_loop.announce_ready_and_wait, consume_loop.report_and_wait = ready, report
        consume_loop.run(mine.runner, tracked(module.Consumer), TopicPartition, OFFSET_BEGINNING, module.Producer)


# ---- driver side ---------------------------------------------------------------------------------------------

def _fill(bootstrap: str, ca: Path, topic: str, count: int, size: int) -> None:
    """``count`` messages round-robin over the partitions, with confluent-kafka through the TLS front."""
    import confluent_kafka

    from kqactors.cli.perf_payload import make_payloads
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 50, "acks": "1",
                                         "security.protocol": "ssl", "ssl.ca.location": str(ca)})
    payloads = make_payloads(size)
    for index in range(count):
        while True:
            try:
                producer.produce(topic, payloads[index % len(payloads)], partition=index % PARTITIONS)
                break
            except BufferError:
                producer.poll(0.05)
    if producer.flush(300):
        raise SystemExit(f"could not fill {topic}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=200_000)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--hosts", type=int, default=1, help="kqactors.hosts of the kqactors runs")
    parser.add_argument("--json", type=Path, default=None, help="write every run here")
    args = parser.parse_args(argv)

    import harness

    from kqactors.cli.perf_payload import create_topic
    from kqactors.testing.certs import CertificateAuthority
    from kqactors.testing.stunnel import TlsTansu

    harness.RUNNERS.update({client: str(Path(__file__).resolve()) for client in CLIENTS})
    workdir = Path(tempfile.mkdtemp(prefix="bench-tls-"))
    ca = CertificateAuthority(workdir / "ca")
    server = ca.issue("server", hosts=("127.0.0.1", "localhost"))
    results: list[dict[str, Any]] = []
    with TlsTansu(server.cert, server.key) as bed:
        assert bed.proxy is not None and bed.proxy._proc is not None and bed.tansu._proc is not None
        outside = json.dumps({"stunnel": bed.proxy._proc.pid, "tansu": bed.tansu._proc.pid})
        plain = bed.tansu.bootstrap
        print(f"Tansu at {plain}, stunnel (TLS) at {bed.bootstrap}", file=sys.stderr)
        for size in SIZES:
            filled = f"tls-consume-{size}-{uuid.uuid4().hex[:6]}"
            create_topic(plain, filled, PARTITIONS)
            _fill(bed.bootstrap, ca.cert_path, filled, args.count, size)
            for repeat in range(args.repeats):
                for client in CLIENTS:
                    for kind in ("produce", "consume"):
                        topic = filled
                        if kind == "produce":
                            topic = f"tls-produce-{size}-{uuid.uuid4().hex[:6]}"
                            create_topic(plain, topic, PARTITIONS)
                        extra = ("--runner", client, "--kind", kind, "--ca", str(ca.cert_path), "--pids", outside,
                                 "--hosts", str(args.hosts))
                        if kind == "consume":
                            extra += ("--mode", "assign")
                        run = harness.run_client(client, f"{kind} {size} B", repeat, bed.bootstrap, topic,
                                                 args.count, size, "none", extra_args=extra)
                        row = {"client": client, "kind": kind, "size": size, "repeat": repeat,
                               "msgs_per_s": run.msgs_per_s, "mb_per_s": run.mb_per_s, "cpu_s": run.cpu_s,
                               "delivered": run.delivered, "errors": run.errors,
                               "cpu_by_process": run.extra.get("cpu_by_process", {}), "elapsed_s": run.elapsed_s}
                        results.append(row)
                        print(f"{kind:8} {size:5} B {client:16} {run.msgs_per_s:10,.0f} msg/s "
                              f"{run.mb_per_s:7.1f} MB/s  {run.elapsed_s:6.2f} s  cpu {row['cpu_by_process']}",
                              file=sys.stderr, flush=True)
                        if run.delivered != args.count:
                            print(f"  !! {run.delivered}/{args.count} delivered, errors {run.errors}", file=sys.stderr)
    _report(results)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 0


def _report(results: list[dict[str, Any]]) -> None:
    """A markdown table: median msg/s per client and case, the ratio, and kqactors' CPU split per process
    (seconds per 100k messages, medians)."""
    print("| case | kqactors msg/s | confluent-kafka msg/s | ratio | kqactors CPU s/100k by process | "
          "confluent-kafka CPU s/100k by process |")
    print("|---|---:|---:|---:|---|---|")
    for kind in ("produce", "consume"):
        for size in SIZES:
            cells = []
            rates = {}
            for client in CLIENTS:
                rows = [r for r in results if (r["client"], r["kind"], r["size"]) == (client, kind, size)]
                rates[client] = statistics.median(r["msgs_per_s"] for r in rows) if rows else 0.0
                labels = sorted({label for r in rows for label in r["cpu_by_process"]})
                split = []
                for label in labels:
                    per = [r["cpu_by_process"].get(label, 0.0) * 100_000 / max(1, r["delivered"]) for r in rows]
                    split.append(f"{label} {statistics.median(per):.2f}")
                cells.append(", ".join(split))
            ratio = rates["kqactors"] / rates["confluent-kafka"] if rates["confluent-kafka"] else 0.0
            print(f"| {kind} {size} B | {rates['kqactors']:,.0f} | {rates['confluent-kafka']:,.0f} | {ratio:.2f}x | "
                  f"{cells[0]} | {cells[1]} |")


if __name__ == "__main__":
    if "--runner" in sys.argv:
        _runner(sys.argv[1:])
    else:
        sys.exit(main())
