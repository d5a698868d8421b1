"""Runs in: a developer shell (the driver); ``kqactors cat`` and kcat run as its child processes.

Command-line benchmark, same-run ratios against peers on one embedded Tansu broker:
- ``cat -P``: ``kqactors cat -P -l FILE`` against ``kcat -P -l FILE`` (N lines of ~100 bytes), wall seconds
  until the command exits (all delivered);
- ``cat -C``: ``kqactors cat -C -e -o beginning -f '%s\\n'`` against kcat with the same flags reading the
  same N records, wall seconds until exit;
- ``perf consume``'s loop (kqactors/cli/perf_consume.py) driving kqactors.Consumer against the same loop
  driving confluent-kafka's Consumer, msgs/s.

kcat: Debian's kcat links librdkafka 2.0.2, which cannot read Tansu's ApiVersions answer; it is then run with
the librdkafka of the confluent-kafka wheel (see bench_ingest.kcat_env).

    python benchmarks/bench_cli.py --lines 200000 --runs 3
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
REPO = Path(__file__).resolve().parents[1]


def kq_cat(*args: str, env: dict[str, str]) -> float:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "kqactors.cli.main", "cat", *args], check=True, env=env,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - started


def kcat(*args: str, env: dict[str, str]) -> float:
    started = time.perf_counter()
    subprocess.run(["kcat", *args], check=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - started


def consume_rate(bootstrap: str, topic: str, count: int, peer: bool) -> float:
    from kqactors.cli.perf_consume import consume_loop

    if peer:
        import confluent_kafka as ck

        consumer, tp = ck.Consumer, ck.TopicPartition
    else:
        import kqactors

        consumer, tp = kqactors.Consumer, kqactors.TopicPartition
    client = consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{time.time_ns()}",
                       "enable.auto.commit": False})
    try:
        parts = client.list_topics(topic, timeout=30).topics[topic].partitions
        client.assign([tp(topic, p, -2) for p in parts])
        summary = consume_loop(client, count, 10.0)
    finally:
        client.close()
    assert summary.received == count, summary
    return summary.msgs_per_s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[1])
    parser.add_argument("--lines", type=int, default=200_000)
    parser.add_argument("--runs", type=int, default=3)
    options = parser.parse_args()

    from bench_ingest import kcat_env

    from kqactors.testing.tansu import TansuBroker

    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, (str(REPO), os.environ.get("PYTHONPATH")))))
    with TansuBroker() as broker, tempfile.TemporaryDirectory() as tmp:
        b = broker.bootstrap
        kenv, which = kcat_env(b, Path(tmp))
        lines = Path(tmp) / "lines.txt"
        with open(lines, "w") as f:
            for i in range(options.lines):
                f.write(f"2024-05-01T12:00:00Z host{i % 7} app[{i % 1000}]: order payment ok region eu seq={i}\n")
        results: dict[str, list[float]] = {k: [] for k in ("kq -P", "kcat -P", "kq -C", "kcat -C", "kq loop",
                                                           "ck loop")}
        for run in range(options.runs):
            for name, tool, runner in (("kq -P", "kq", kq_cat), ("kcat -P", "kcat", kcat)):
                topic = f"bench-cli-{tool}-{run}-{time.time_ns()}"
                results[name].append(runner("-b", b, "-P", "-t", topic, "-p", "0", "-l", str(lines),
                                            env=env if tool == "kq" else kenv))
            read = ["-b", b, "-C", "-t", topic, "-e", "-o", "beginning", "-f", "%s\\n"]
            results["kq -C"].append(kq_cat(*read, env=env))
            results["kcat -C"].append(kcat(*read, env=kenv))
            results["kq loop"].append(consume_rate(b, topic, options.lines, peer=False))
            results["ck loop"].append(consume_rate(b, topic, options.lines, peer=True))
    med = {k: statistics.median(v) for k, v in results.items()}
    print(f"kcat: {which}; {options.lines} lines, {options.runs} runs, medians")
    for k, v in results.items():
        unit = "msgs/s" if "loop" in k else "s"
        print(f"  {k:8} {med[k]:>12,.2f} {unit}   runs: {', '.join(f'{x:,.2f}' for x in v)}")
    print(f"cat -P vs kcat: {med['kcat -P'] / med['kq -P']:.2f}x   cat -C vs kcat: {med['kcat -C'] / med['kq -C']:.2f}x"
          f"   perf consume loop kqactors vs confluent-kafka: {med['kq loop'] / med['ck loop']:.2f}x")


if __name__ == "__main__":
    main()
