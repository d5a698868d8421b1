"""Runs in: a developer shell (the driver; each measured run is a fresh runner process).

Start-up benchmark: kqactors against confluent-kafka, in one run, alternating the clients. Per run
(benchmarks/clients/startup_runner.py, a fresh process, client module imported before the clock starts): the
Producer constructor, its first delivery report (linger.ms=0, one message to a 1-partition topic that exists,
from the constructor's start), the Consumer constructor (with group.id) and its first message after assign()
(from the constructor's start). Medians over repeats; peak RSS and peak PSS of the whole process tree (PSS
divides the pages processes share among them: benchmarks/harness.py), and the CPU time of the whole run (user +
sys of the runner and the hosts it reaped: interpreters, imports, both clients' work and close), which a loaded
machine disturbs less than the wall-clock columns.

Client ``kqactors-shared``: the runner's clients attach to a shared runtime (``kqactors.runtime.dir``), which the
driver starts once (``python -m kqactors.cli.main runtime --dir DIR --hosts N --group-linger S``,
``--shared-hosts``, default 0, and ``--shared-linger``, default 0: each run's producer group, its main and broker
connections, starts anew; with S > 0 a run finds the previous run's group and its connections) and keeps for every run: what a script, a CLI or a Spark task gets when a runtime is already there. Its RSS/PSS
columns are the app's own tree; the runtime's peak during the run is reported separately (``runtime``), and its
CPU is not in the CPU column.

``--tree LABEL=PATH`` adds a client ``kqactors-LABEL``: kqactors imported from PATH (another checkout, its native
extensions built), run alternately with the others, so a change is measured before/after under the same load.
With ``kqactors-shared`` among the clients it adds ``kqactors-shared-LABEL`` too: attached to a shared runtime of
its own, started from PATH as well (the runtime and the app both from the other checkout).

``--same-topic``: each client's runs produce to one topic of its own, created once (a script run again and again),
instead of a new topic per run: with ``--shared-linger`` a kqactors-shared run finds the topic known to the
runtime's group (its partition count comes with the attach, its toppar runs).

``--breakdown N``: N extra kqactors runs (producer only) under ``strace -f``, each printed as a table of where
the first delivery report's time goes (benchmarks/startup_breakdown.py).

    python benchmarks/bench_startup.py                   # 5 repeats, the librdkafka mock cluster
    python benchmarks/bench_startup.py --repeats 3 --clients kqactors,kqactors-shared,confluent-kafka
    python benchmarks/bench_startup.py --repeats 0 --breakdown 3
    python benchmarks/bench_startup.py --repeats 5 --tree before=/tmp/base --breakdown 2
    python benchmarks/bench_startup.py --repeats 3 --bootstrap host:9092
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid

from harness import CLIENTS_DIR, TreeSampler, broker_for_run
from startup_breakdown import breakdown

CLIENTS = ("kqactors", "kqactors-shared", "confluent-kafka")
FIELDS = ("producer_ctor_ms", "first_dr_ms", "consumer_ctor_ms", "first_message_ms")
MEMORY = ("peak_rss_mb", "peak_pss_mb")


def runner_command(client: str, bootstrap: str, topic: str, runtime_dir: str = "", *extra: str) -> list[str]:
    command = [sys.executable, str(CLIENTS_DIR / "startup_runner.py"), "--client",
               "confluent-kafka" if client == "confluent-kafka" else "kqactors", "--bootstrap", bootstrap,
               "--topic", topic, *extra]
    if runtime_dir:
        command += ["--runtime-dir", runtime_dir]
    return command


def tree_env(tree: str | None) -> dict[str, str] | None:
    """The environment of a runner importing kqactors from ``tree`` (None: this one's)."""
    if tree is None:
        return None
    return dict(os.environ, PYTHONPATH=tree + os.pathsep + os.environ.get("PYTHONPATH", ""))


def run_once(client: str, bootstrap: str, topic: str, runtime: SharedRuntime | None = None,
             tree: str | None = None) -> dict:
    command = runner_command(client, bootstrap, topic, runtime.directory if runtime is not None else "")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    runtime_sampler = TreeSampler(runtime.proc.pid).start() if runtime is not None else None
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=str(CLIENTS_DIR),
                            env=tree_env(tree))
    sampler = TreeSampler(proc.pid).start()
    try:
        out, err = proc.communicate(timeout=120)
    finally:
        sampler.stop()
        if runtime_sampler is not None:
            runtime_sampler.stop()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0 or not out.strip():
        raise RuntimeError(f"{client} start-up run failed ({proc.returncode}): {err[-2000:]}")
    result = json.loads(out.strip().splitlines()[-1])
    result["peak_rss_mb"] = sampler.peak_rss / 2**20
    result["peak_pss_mb"] = sampler.peak_pss / 2**20
    result["cpu_ms"] = (after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime) * 1e3
    if runtime_sampler is not None:
        result["runtime_rss_mb"] = runtime_sampler.peak_rss / 2**20
        result["runtime_pss_mb"] = runtime_sampler.peak_pss / 2**20
    return result


class SharedRuntime:
    """``kqactors runtime --dir DIR`` started once for every kqactors-shared run, stopped at the end."""

    def __init__(self, hosts: int, linger: float, tree: str | None = None) -> None:
        self._tmp = tempfile.TemporaryDirectory()
        self.directory = os.path.join(self._tmp.name, "rt")
        self.proc = subprocess.Popen([sys.executable, "-m", "kqactors.cli.main", "runtime", "--dir", self.directory,
                                      "--hosts", str(hosts), "--group-linger", str(linger)], env=tree_env(tree),
                                     cwd=tree)  # ``-m`` puts the working directory first on the import path
        deadline = time.monotonic() + 60
        while not os.path.exists(os.path.join(self.directory, "runtime.json")):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the shared runtime did not start")
            time.sleep(0.05)
        time.sleep(2.0)  # its hosts' preloads (imports) finish before the first run

    def close(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(30)
        self._tmp.cleanup()


def print_table(clients: list[str], runs: dict[str, list[dict]]) -> None:
    columns = (*FIELDS, *MEMORY, "cpu_ms")
    medians = {client: {f: statistics.median(r[f] for r in rows) for f in columns if f in rows[0]}
               for client, rows in runs.items() if rows}
    print("| client | Producer() ms | first DR ms | Consumer() ms | first message ms | peak RSS MiB | peak PSS MiB "
          "| CPU ms |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for client in clients:
        m = medians.get(client)
        if m is None:
            continue
        print(f"| {client} | {m['producer_ctor_ms']:.1f} | {m['first_dr_ms']:.1f} | {m['consumer_ctor_ms']:.1f} | "
              f"{m['first_message_ms']:.1f} | {m['peak_rss_mb']:.0f} | {m['peak_pss_mb']:.0f} | {m['cpu_ms']:.0f} |")
    for client in clients:
        rows = runs.get(client)
        if client.startswith("kqactors-shared") and rows:
            rss = statistics.median(r["runtime_rss_mb"] for r in rows)
            pss = statistics.median(r["runtime_pss_mb"] for r in rows)
            print(f"| ({client}'s runtime, not in the rows above) | | | | | {rss:.0f} | {pss:.0f} | |")
    peer = medians.get("confluent-kafka")
    for client in clients:
        if client == "confluent-kafka" or peer is None or client not in medians:
            continue
        ours = medians[client]
        print(f"| {client}/confluent-kafka | " + " | ".join(f"{ours[f] / max(peer[f], 1e-9):.1f}×"
                                                          for f in columns) + " |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bootstrap", help="bootstrap.servers (default: the librdkafka mock cluster)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--clients", default="kqactors,confluent-kafka",
                        help=f"comma-separated, of {', '.join(CLIENTS)}")
    parser.add_argument("--shared-hosts", type=int, default=0, help="toppar hosts of kqactors-shared's runtime")
    parser.add_argument("--shared-linger", type=float, default=0.0,
                        help="kqactors-shared's runtime keeps a producer group this many seconds after its last client")
    parser.add_argument("--same-topic", action="store_true",
                        help="each client produces to one topic of its own in every run (created once)")
    parser.add_argument("--tree", action="append", default=[], metavar="LABEL=PATH",
                        help="also run kqactors imported from PATH, as client kqactors-LABEL")
    parser.add_argument("--breakdown", type=int, default=0, metavar="N",
                        help="N traced kqactors producer runs: where the first delivery report's time goes")
    parser.add_argument("--breakdown-opens", action="store_true",
                        help="--breakdown also traces file opens: when main's and the toppar's modules load "
                             "(each import then reads slower under strace)")
    args = parser.parse_args(argv)
    clients = [c for c in args.clients.split(",") if c]
    unknown = set(clients) - set(CLIENTS)
    if unknown:
        parser.error(f"unknown clients {sorted(unknown)}; known: {', '.join(CLIENTS)}")
    trees: dict[str, str] = {}
    for item in args.tree:
        label, sep, path = item.partition("=")
        if not sep or not label or not os.path.isdir(os.path.join(path, "kqactors")):
            parser.error(f"--tree wants LABEL=PATH with PATH/kqactors a directory: {item!r}")
        if "kqactors" in clients or "kqactors-shared" not in clients:
            trees[f"kqactors-{label}"] = os.path.abspath(path)
            clients.insert(clients.index("kqactors") + 1 if "kqactors" in clients else 0, f"kqactors-{label}")
        if "kqactors-shared" in clients:
            trees[f"kqactors-shared-{label}"] = os.path.abspath(path)
            clients.insert(clients.index("kqactors-shared") + 1, f"kqactors-shared-{label}")
    if args.breakdown and shutil.which("strace") is None:
        parser.error("--breakdown needs strace on PATH")
    runs: dict[str, list[dict]] = {client: [] for client in clients}
    runtimes: dict[str, SharedRuntime] = {}  # shared client -> the runtime it attaches to
    topics: dict[str, str] = {}  # client -> its one topic (--same-topic)
    try:
        if args.repeats:
            for client in clients:
                if client.startswith("kqactors-shared"):
                    runtimes[client] = SharedRuntime(args.shared_hosts, args.shared_linger, trees.get(client))
        with broker_for_run(args.bootstrap, "mock") as broker:
            for repeat in range(args.repeats):
                for client in clients:  # alternating, so drift in the machine's load hits both alike
                    topic = topics.get(client) or f"startup-{client}-{uuid.uuid4().hex[:8]}"
                    if topic not in topics.values():
                        broker.create_topic(topic, 1)
                    if args.same_topic:
                        topics[client] = topic
                    result = run_once(client, broker.bootstrap, topic, runtimes.get(client), trees.get(client))
                    runs[client].append(result)
                    shared = (f"  runtime rss {result['runtime_rss_mb']:.0f} pss {result['runtime_pss_mb']:.0f} MiB"
                              if "runtime_rss_mb" in result else "")
                    print(f"[#{repeat + 1}] {client:16s} " + "  ".join(f"{f} {result[f]:7.1f}" for f in FIELDS) +
                          f"  rss {result['peak_rss_mb']:.0f} pss {result['peak_pss_mb']:.0f} MiB"
                          f"  cpu {result['cpu_ms']:.0f} ms{shared}", file=sys.stderr, flush=True)
            for number in range(args.breakdown):
                topic = f"startup-breakdown-{uuid.uuid4().hex[:8]}"
                broker.create_topic(topic, 1)
                for label, tree in [("kqactors", None), *((c, t) for c, t in trees.items()
                                                          if not c.startswith("kqactors-shared"))]:
                    print(f"\nbreakdown #{number + 1}, {label} (producer under strace -f):\n")
                    print(breakdown(runner_command("kqactors", broker.bootstrap, topic, "", "--producer-only"),
                                    tree_env(tree), opens=args.breakdown_opens))
    finally:
        for runtime in runtimes.values():
            runtime.close()
    if args.repeats:
        print_table(clients, runs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
