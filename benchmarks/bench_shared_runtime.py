"""N producer processes x M messages, three ways in one run, against the librdkafka mock cluster:

- ``shared``: every process attaches to one shared runtime (``kqactors runtime``); with the same settings they are
  one shared group: one main, one connection per broker, toppars batching every process's messages;
- ``own``: every process a kqactors Producer with its own runtime (its own host processes);
- ``confluent``: every process a confluent_kafka Producer.

Per way: wall time (launching the processes until the last one is done: interpreter start, import, produce,
flush), client start-up (the Producer constructor, the first in a fresh process; attaching, for ``shared``, whose
``warm_start_ms`` is the median constructor once a process has made one: the attach itself), total RSS (every client process
and its host processes, plus the shared runtime's processes, sampled as each client finished flushing; also as
PSS, which divides the pages processes share, e.g. the interpreter's and libraries', among them) and the
most broker connections open at once (client-side TCP sockets to the brokers' ports, from /proc/net/tcp*); also
the slowest client's produce+flush time and the CPU seconds used (clients, their hosts and the runtime).
``--repeat`` runs everything that often (ways interleaved) and reports each figure's median.

Usage: PYTHONPATH=. python benchmarks/bench_shared_runtime.py [--clients 6] [--count 50000] [--hosts 1]
[--repeat 3] [--ways shared,own,confluent]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_LOOP = """
payload = b"x" * 100
topic = sys.argv[3]
for i in range(int(sys.argv[2])):
    while True:
        try:
            p.produce(topic, payload)
            break
        except BufferError:
            p.poll(0.01)
left = p.flush(120)
def rss(pid):
    try:
        return int(open(f"/proc/{pid}/status").read().split("VmRSS:")[1].split()[0])
    except (OSError, IndexError):
        return 0
def pss(pid):
    try:
        return int(open(f"/proc/{pid}/smaps_rollup").read().split("Pss:")[1].split()[0])
    except (OSError, IndexError):
        return 0
def tree(pid):
    out = [pid]
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            kids = open(f"/proc/{pid}/task/{task}/children").read().split()
        except OSError:
            kids = []
        for kid in kids:
            out += tree(int(kid))
    return out
def cpu(pid):
    try:
        fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError):
        return 0.0
pids = tree(os.getpid())
total = sum(rss(pid) for pid in pids)
print(json.dumps({"start_s": start, "left": left, "rss_kib": total, "pss_kib": sum(pss(pid) for pid in pids),
                  "cpu_s": sum(cpu(pid) for pid in pids),
                  "work_s": time.perf_counter() - t - start}), flush=True)
"""
KQ_CLIENT = """
import json, os, sys, time
from kqactors import Producer
t = time.perf_counter()
conf = {"bootstrap.servers": sys.argv[1], "linger.ms": 5}
if sys.argv[4]:
    conf["kqactors.runtime.dir"] = sys.argv[4]
else:
    conf["kqactors.hosts"] = int(sys.argv[5])
p = Producer(conf)
start = time.perf_counter() - t
""" + _LOOP + "p.close()\n"
WARM_STARTUP = """
import json, statistics, sys, time
from kqactors import Producer
conf = {"bootstrap.servers": sys.argv[1], "kqactors.runtime.dir": sys.argv[2], "linger.ms": 5}
Producer(conf).close()  # the first one pays the lazy imports (the cold figure is the clients' start-up)
times = []
for _ in range(15):
    t = time.perf_counter()
    p = Producer(conf)
    times.append(time.perf_counter() - t)
    p.close()
print(json.dumps({"warm_start_ms": statistics.median(times) * 1000}))
"""
CK_CLIENT = """
import json, os, sys, time
from confluent_kafka import Producer
t = time.perf_counter()
p = Producer({"bootstrap.servers": sys.argv[1], "linger.ms": 5})
start = time.perf_counter() - t
""" + _LOOP


def _rss_kib(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            return int(f.read().split("VmRSS:")[1].split()[0])
    except (OSError, IndexError):
        return 0


def _pss_kib(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            return int(f.read().split("Pss:")[1].split()[0])
    except (OSError, IndexError):
        return 0


def _cpu_s(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError):
        return 0.0


def _connections(ports: set[int]) -> int:
    """Established TCP sockets whose remote port is a broker's: the clients' side of each connection."""
    count = 0
    for name in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(name) as f:
                lines = f.readlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if fields[3] == "01" and int(fields[2].rsplit(":", 1)[1], 16) in ports:
                count += 1
    return count


def _run_clients(script: str, args: list[list[str]], env: dict, ports: set[int]) -> tuple[float, list[dict], int]:
    started = time.perf_counter()
    procs = [subprocess.Popen([sys.executable, "-c", script, *a], env=env, stdout=subprocess.PIPE)
             for a in args]
    peak = 0
    while any(p.poll() is None for p in procs):
        peak = max(peak, _connections(ports))
        time.sleep(0.02)
    wall = time.perf_counter() - started
    outs = []
    for p in procs:
        out = p.stdout.read().decode().strip().splitlines() if p.stdout else []
        if p.returncode != 0 or not out:
            raise RuntimeError(f"a client failed (exit {p.returncode})")
        outs.append(json.loads(out[-1]))
    return wall, outs, peak


def _one_way(way: str, cluster: object, args: argparse.Namespace, run: int, env: dict, ports: set[int]) -> dict:
    topic = f"bench-{way}-{run}"
    runtime_rss = 0
    runtime_pss = 0
    runtime_cpu = 0.0
    server = None
    with tempfile.TemporaryDirectory() as tmp:
        directory = ""
        if way == "shared":
            directory = os.path.join(tmp, "rt")
            server = subprocess.Popen([sys.executable, "-m", "kqactors.cli.main", "runtime", "--dir", directory,
                                       "--hosts", str(args.hosts)], env=env)
            while not os.path.exists(os.path.join(directory, "runtime.json")):
                time.sleep(0.05)
            time.sleep(1.0)  # the hosts' preloads
        script = CK_CLIENT if way == "confluent" else KQ_CLIENT
        client_args = [[cluster.bootstrap, str(args.count), topic, directory, str(args.hosts)]
                       for _ in range(args.clients)]
        try:
            wall, outs, peak = _run_clients(script, client_args, env, ports)
            warm = None
            if server is not None:
                children = subprocess.run(["pgrep", "-P", str(server.pid)], capture_output=True,
                                          text=True).stdout.split()
                runtime_rss = _rss_kib(server.pid) + sum(_rss_kib(int(pid)) for pid in children)
                runtime_pss = _pss_kib(server.pid) + sum(_pss_kib(int(pid)) for pid in children)
                runtime_cpu = _cpu_s(server.pid) + sum(_cpu_s(int(pid)) for pid in children)
                done = subprocess.run([sys.executable, "-c", WARM_STARTUP, cluster.bootstrap, directory], env=env,
                                      capture_output=True, text=True, timeout=120)
                warm = json.loads(done.stdout.strip().splitlines()[-1])["warm_start_ms"]
        finally:
            if server is not None:
                server.send_signal(signal.SIGTERM)
                server.wait(15)
    result = {"wall_s": wall, "start_ms_max": max(o["start_s"] for o in outs) * 1000,
            "start_ms_median": statistics.median(o["start_s"] for o in outs) * 1000,
            "rss_mib_total": (runtime_rss + sum(o["rss_kib"] for o in outs)) / 1024,
            "pss_mib_total": (runtime_pss + sum(o["pss_kib"] for o in outs)) / 1024,
            "rss_mib_runtime": runtime_rss / 1024, "rss_mib_client_median": statistics.median(
                o["rss_kib"] for o in outs) / 1024,
            "produce_flush_s_max": max(o["work_s"] for o in outs),
            "cpu_s_total": runtime_cpu + sum(o["cpu_s"] for o in outs), "cpu_s_runtime": runtime_cpu,
            "connections_peak": peak, "left": sum(o["left"] for o in outs)}
    if warm is not None:
        result["warm_start_ms"] = warm
    return result


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--clients", type=int, default=6)
    parser.add_argument("--count", type=int, default=50_000)
    parser.add_argument("--hosts", type=int, default=1, help="toppar hosts of the shared runtime (and of each own)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--ways", default="shared,own,confluent")
    args = parser.parse_args()
    sys.path.insert(0, ROOT)
    from kqactors.testing.mock_cluster import MockCluster

    ways = [w.strip() for w in args.ways.split(",") if w.strip()]
    env = dict(os.environ, PYTHONPATH=ROOT)
    results: dict[str, list[dict]] = {w: [] for w in ways}
    with MockCluster(num_brokers=1) as cluster:
        ports = {cluster.broker_address(1)[1]}
        for run in range(args.repeat):
            for way in ways:
                result = _one_way(way, cluster, args, run, env, ports)
                results[way].append(result)
                print(json.dumps({"way": way, "run": run, **{k: round(v, 3) for k, v in result.items()}}),
                      file=sys.stderr, flush=True)
    summary = {"clients": args.clients, "count": args.count, "hosts": args.hosts, "repeat": args.repeat}
    for way, rows in results.items():
        summary[way] = {key: round(statistics.median(r[key] for r in rows), 2) for key in rows[0]}
    print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
