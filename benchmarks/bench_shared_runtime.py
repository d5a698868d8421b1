"""6 producer processes x 50,000 messages attached to one shared runtime (`kqactors runtime`): wall time, total
RSS (the runtime's processes + the clients, sampled at their end) and attach time. Against the librdkafka mock
cluster. Usage: PYTHONPATH=. python benchmarks/bench_shared_runtime.py [--clients 6] [--count 50000]
[--hosts 1]"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CLIENT = """
import json, sys, time, resource
from kqactors import Producer
t = time.perf_counter()
p = Producer({"bootstrap.servers": sys.argv[1], "kqactors.runtime.dir": sys.argv[2], "linger.ms": 5})
attach = time.perf_counter() - t
payload = b"x" * 100
for i in range(int(sys.argv[3])):
    while True:
        try:
            p.produce(sys.argv[4], payload)
            break
        except BufferError:
            p.poll(0.01)
left = p.flush(60)
rss = int(open("/proc/self/status").read().split("VmRSS:")[1].split()[0])
print(json.dumps({"attach_s": attach, "left": left, "rss_kib": rss}))
"""


def _rss_kib(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            return int(f.read().split("VmRSS:")[1].split()[0])
    except OSError:
        return 0


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--clients", type=int, default=6)
    parser.add_argument("--count", type=int, default=50_000)
    parser.add_argument("--hosts", type=int, default=1)
    args = parser.parse_args()
    sys.path.insert(0, ROOT)
    from kqactors.testing.mock_cluster import MockCluster

    env = dict(os.environ, PYTHONPATH=ROOT)
    with MockCluster(num_brokers=1) as cluster, tempfile.TemporaryDirectory() as tmp:
        directory = os.path.join(tmp, "rt")
        server = subprocess.Popen([sys.executable, "-m", "kqactors.cli.main", "runtime", "--dir", directory,
                                   "--hosts", str(args.hosts)], env=env)
        while not os.path.exists(os.path.join(directory, "runtime.json")):
            time.sleep(0.05)
        info = json.load(open(os.path.join(directory, "runtime.json")))
        time.sleep(1.0)  # the hosts' preloads
        started = time.perf_counter()
        procs = [subprocess.Popen([sys.executable, "-c", CLIENT, cluster.bootstrap, directory, str(args.count),
                                   "bench"], env=env, stdout=subprocess.PIPE) for _ in range(args.clients)]
        outs = [json.loads(p.communicate()[0]) for p in procs]
        wall = time.perf_counter() - started
        children = subprocess.run(["pgrep", "-P", str(server.pid)], capture_output=True, text=True).stdout.split()
        host_pids = [int(pid) for pid in children]
        runtime_rss = _rss_kib(server.pid) + sum(_rss_kib(pid) for pid in host_pids)
        server.send_signal(signal.SIGTERM)
        server.wait(15)
    result = {"clients": args.clients, "count": args.count, "hosts": info["hosts"], "wall_s": round(wall, 2),
              "attach_ms_max": round(max(o["attach_s"] for o in outs) * 1000, 1),
              "left": sum(o["left"] for o in outs),
              "rss_mib_total": round((runtime_rss + sum(o["rss_kib"] for o in outs)) / 1024, 1),
              "processes": 1 + len(host_pids) + args.clients}
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
