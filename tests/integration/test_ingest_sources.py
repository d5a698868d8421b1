"""``kqactors ingest --config`` on Tansu: TCP, UDP and HTTP sources and a file with keys from a JSON field and
transforms, each to its own topic; Prometheus metrics (with librdkafka statistics); SIGHUP adding a source. And
an absent broker: reading stops at the producer's queue bound, UDP drops and HTTP 503s are counted, and SIGTERM
still exits 0 within the drain timeout.

Runs in: the pytest process; the daemon is a child process, lines are read back with confluent-kafka.
"""

from __future__ import annotations

import json
import signal
import socket
import time
import urllib.error
import urllib.request

import pytest
from integration_helpers import make_topic
from support.waiting import wait_until
from test_ingest_files import Daemon, read_topic

pytest.importorskip("prometheus_client", reason="the metrics endpoint needs prometheus_client (kqactors[ingest])")

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def free_port(kind: int = socket.SOCK_STREAM) -> int:
    with socket.socket(socket.AF_INET, kind) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scrape(port: int) -> dict[str, float]:
    """``name{labels}`` → value from the metrics endpoint."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            out[name] = float(value)
    return out


def post(port: int, path: str, body: bytes) -> tuple[int, dict]:
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=body, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_config_form_sources_metrics_and_reload(tansu, unique_topic, tmp_path):
    topics = {kind: f"{unique_topic}-{kind}" for kind in ("file", "tcp", "udp", "http", "late")}
    for topic in topics.values():
        make_topic(tansu, topic, 2)
    tcp, udp, http, metrics = free_port(), free_port(socket.SOCK_DGRAM), free_port(), free_port()
    events = tmp_path / "events.log"
    events.write_text('{"user": {"id": "u1"}, "msg": "a"}\n  \n{"user": {"id": "u2"}, "msg": "DEBUG b"}\n'
                      '{"user": {"id": "u3"}, "msg": "c"}\n')
    late = tmp_path / "late.log"
    late.write_text("late-1\nlate-2\n")
    config = tmp_path / "ingest.toml"
    body = f"""
state_dir = "{tmp_path / 'state'}"
metrics_port = {metrics}
metrics_interval_s = 0.2

[kafka]
"bootstrap.servers" = "{tansu.bootstrap}"
"statistics.interval.ms" = 300

[[source]]
name = "events"
paths = ["{tmp_path}/*.log"]
topic = "{topics['file']}"
key_field = "user.id"
transforms = [{{op = "strip"}}, {{op = "drop_empty"}}, {{op = "exclude", pattern = "DEBUG"}}, {{op = "add_fields", fields = {{env = "test"}}}}]
headers = {{ origin = "file" }}

[[source]]
name = "tcp-in"
type = "tcp"
listen = "127.0.0.1:{tcp}"
topic = "{topics['tcp']}"

[[source]]
name = "udp-in"
type = "udp"
listen = "127.0.0.1:{udp}"
topic = "{topics['udp']}"

[[source]]
name = "http-in"
type = "http"
listen = "127.0.0.1:{http}"
http_path = "/ingest"
topic = "{topics['http']}"
transforms = [{{op = "prefix", text = "h:"}}]
"""
    # The glob also matches late.log: keep it out until the reload adds a source for it.
    config.write_text(body.replace(f'"{tmp_path}/*.log"', f'"{events}"'))
    daemon = Daemon(["--config", str(config)], tmp_path / "daemon.log")
    try:
        wait_until(lambda: sum(e.get("event") == "listening" for e in daemon.events()) == 3, 30, "the listeners")
        with socket.create_connection(("127.0.0.1", tcp)) as conn:
            conn.sendall(b"".join(b"t%d\n" % i for i in range(1000)))
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            sock.sendto(b"u0\nu1\n", ("127.0.0.1", udp))
        assert post(http, "/ingest", b"x\ny\n") == (200, {"lines": 2, "delivered": 2, "failed": 0, "filtered": 0})
        assert post(http, "/nope", b"x")[0] == 404
        got = {name: read_topic(tansu.bootstrap, topic, n, 20) for name, topic, n in
               (("file", topics["file"], 2), ("tcp", topics["tcp"], 1000), ("udp", topics["udp"], 2),
                ("http", topics["http"], 2))}
        assert sorted(m.value() for m in got["tcp"]) == sorted(b"t%d" % i for i in range(1000))
        assert sorted(m.value() for m in got["udp"]) == [b"u0", b"u1"]
        assert sorted(m.value() for m in got["http"]) == [b"h:x", b"h:y"]
        by_key = {m.key(): json.loads(m.value()) for m in got["file"]}
        assert by_key == {b"u1": {"user": {"id": "u1"}, "msg": "a", "env": "test"},
                          b"u3": {"user": {"id": "u3"}, "msg": "c", "env": "test"}}
        assert all(m.headers() == [("origin", b"file")] for m in got["file"])

        def metric_values():
            m = scrape(metrics)
            return m if m.get('kqactors_ingest_lines_delivered_total{source="tcp-in"}') == 1000 and \
                m.get('kqactors_ingest_rdkafka_txmsgs{worker="w0"}', 0) > 0 else None
        m = wait_until(metric_values, 20, "the metrics to show the deliveries and librdkafka statistics")
        assert m['kqactors_ingest_lines_read_total{source="events"}'] == 4
        assert m['kqactors_ingest_lines_filtered_total{source="events"}'] == 2
        assert m['kqactors_ingest_lines_delivered_total{source="http-in"}'] == 2
        assert m['kqactors_ingest_delivery_latency_seconds_count{source="tcp-in"}'] >= 1
        assert m['kqactors_ingest_lag_bytes{source="events"}'] == 0

        config.write_text(body.replace(f'"{tmp_path}/*.log"', f'"{events}"') + f"""
[[source]]
name = "late"
path = "{late}"
topic = "{topics['late']}"
""")
        daemon.signal(signal.SIGHUP)
        late_values = sorted(m.value() for m in read_topic(tansu.bootstrap, topics["late"], 2, 30))
        assert late_values == [b"late-1", b"late-2"]
        assert any(e.get("event") == "reloaded" for e in daemon.events())
        config.write_text("this is not toml")
        daemon.signal(signal.SIGHUP)
        wait_until(lambda: any(e.get("event") == "reload_failed" for e in daemon.events()), 10, "a failed reload")
        daemon.signal(signal.SIGTERM)
        assert daemon.wait(30) == 0
    finally:
        daemon.stop()


def test_an_absent_broker_bounds_memory_and_sigterm_still_exits(tmp_path):
    dead = free_port()                      # nothing listens there
    tcp, udp, http, metrics = free_port(), free_port(socket.SOCK_DGRAM), free_port(), free_port()
    big = tmp_path / "big.log"
    big.write_bytes(b"".join(b"line %07d %s\n" % (i, b"x" * 80) for i in range(100_000)))
    config = tmp_path / "ingest.toml"
    config.write_text(f"""
state_dir = "{tmp_path / 'state'}"
topic = "nowhere"
metrics_port = {metrics}
metrics_interval_s = 0.2
drain_timeout_s = 2
workers = 1

[kafka]
"bootstrap.servers" = "127.0.0.1:{dead}"
"queue.buffering.max.messages" = 2000

[[source]]
name = "big"
path = "{big}"

[[source]]
name = "tcp-in"
type = "tcp"
listen = "127.0.0.1:{tcp}"

[[source]]
name = "udp-in"
type = "udp"
listen = "127.0.0.1:{udp}"

[[source]]
name = "http-in"
type = "http"
listen = "127.0.0.1:{http}"
""")
    daemon = Daemon(["--config", str(config)], tmp_path / "daemon.log")
    try:
        wait_until(lambda: sum(e.get("event") == "listening" for e in daemon.events()) == 3, 30, "the listeners")
        conn = socket.create_connection(("127.0.0.1", tcp))
        conn.setblocking(False)
        sent = 0
        chunk = b"".join(b"tcp %06d\n" % i for i in range(10_000))
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:        # the daemon stops reading: the kernel buffers fill up
            try:
                sent += conn.send(chunk)
            except BlockingIOError:
                time.sleep(0.05)
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            for i in range(20):
                sock.sendto(b"udp %d\n" % i, ("127.0.0.1", udp))
        status, _ = post(http, "/", b"h\n")
        assert status == 503

        def settled():
            m = scrape(metrics)
            return m if m.get('kqactors_ingest_lines_dropped_total{reason="queue_full",source="udp-in"}') == 20 \
                else None
        m = wait_until(settled, 20, "the UDP drops to be counted")
        read = {s: m[f'kqactors_ingest_lines_read_total{{source="{s}"}}'] for s in ("big", "tcp-in", "udp-in")}
        bound = 2000 + 256 * 1024 // 60 + 64 * 1024 // 10   # the queue + one file read + one TCP read
        print("read while the broker is absent:", read, "tcp bytes sent:", sent)
        assert read["big"] + read["tcp-in"] <= bound, read
        assert read["tcp-in"] * 10 < sent, "the rest waits in the socket buffers (push-back)"
        assert m['kqactors_ingest_lines_delivered_total{source="big"}'] == 0
        assert m['kqactors_ingest_lines_dropped_total{reason="http_503",source="http-in"}'] == 1
        conn.close()
        started = time.monotonic()
        daemon.signal(signal.SIGTERM)
        assert daemon.wait(30) == 0
        assert time.monotonic() - started < 15
        stopped = [e for e in daemon.events() if e.get("event") == "stopped"]
        assert stopped and stopped[0]["undelivered"] > 0
    finally:
        daemon.stop()
