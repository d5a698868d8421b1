"""deploy/: the example configuration parses and the daemon starts from it on Tansu (paths, ports and topics
moved to the test's own), the systemd units pass ``systemd-analyze verify``, the compose file is valid YAML with
the three services, and the Dockerfile is multi-stage and ends as a non-root user. (Docker itself cannot run
here: no engine.)

Runs in: the pytest process (the daemon is a child process).
"""

from __future__ import annotations

import json
import shutil
import signal
import socket
import subprocess
import urllib.request
from pathlib import Path

import pytest
from support.waiting import wait_until
from test_ingest_files import Daemon, read_topic
from test_ingest_sources import free_port, post

from kqactors.cli import main as cli
from kqactors.ingest.config import load_config, worker_groups

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
EXAMPLE = DEPLOY / "ingest.example.toml"


def test_the_example_config_parses(capsys):
    config = load_config(str(EXAMPLE))
    assert [s.name for s in config.sources] == ["app", "access", "tcp", "syslog", "http"]
    assert [g.group for g in worker_groups(config, cpu_count=4)] == ["access", "w0", "w1", "w2", "w3"]
    assert cli.main(["ingest", "--config", str(EXAMPLE), "--check-config"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert len(printed["workers"]) >= 2


def test_the_daemon_starts_from_the_example_config(tansu, unique_topic, tmp_path):
    pytest.importorskip("prometheus_client")
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "one.log").write_text("hello\nhealthcheck ok\n\nworld\n")
    (logs / "access.json").write_text('{"user": {"id": "u9"}, "path": "/"}\n')
    ports = {5170: free_port(), 5171: free_port(socket.SOCK_DGRAM), 8080: free_port(), 9464: free_port()}
    text = EXAMPLE.read_text().replace("broker:9092", tansu.bootstrap).replace("/var/log/app", str(logs))
    text = text.replace('"/var/lib/kqactors-ingest/app"', f'"{tmp_path / "state"}"')
    for old, new in ports.items():
        text = text.replace(f":{old}\"", f":{new}\"").replace(f"= {old} ", f"= {new} ")
    for topic in ("logs", "access", "syslog"):
        text = text.replace(f'topic = "{topic}"', f'topic = "{unique_topic}-{topic}"')
    config = tmp_path / "ingest.toml"
    config.write_text(text)
    daemon = Daemon(["--config", str(config)], tmp_path / "daemon.log")
    try:
        wait_until(lambda: sum(e.get("event") == "listening" for e in daemon.events()) == 3, 30, "the listeners")
        assert post(ports[8080], "/ingest", b"via-http\n")[0] == 200
        values = sorted(m.value() for m in read_topic(tansu.bootstrap, f"{unique_topic}-logs", 3, 20))
        assert values == [b"hello", b"via-http", b"world"]
        access = read_topic(tansu.bootstrap, f"{unique_topic}-access", 1, 20)
        assert [m.key() for m in access] == [b"u9"]
        assert json.loads(access[0].value())["datacenter"] == "eu-1"
        metrics = urllib.request.urlopen(f"http://127.0.0.1:{ports[9464]}/metrics", timeout=5).read().decode()
        assert 'kqactors_ingest_lines_delivered_total{source="http"}' in metrics
        daemon.signal(signal.SIGTERM)
        assert daemon.wait(30) == 0
    finally:
        daemon.stop()


def test_systemd_units_verify(tmp_path):
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed (apt-get install systemd)")
    fake = tmp_path / "kqactors"          # verify wants the ExecStart binary to exist
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    for unit in (DEPLOY / "systemd").glob("*.service"):
        (tmp_path / unit.name).write_text(unit.read_text().replace("/usr/local/bin/kqactors", str(fake)))
    result = subprocess.run([analyze, "verify", "kqactors-runtime.service", "kqactors-ingest@app.service"],
                            cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and not result.stderr.strip(), result.stderr
    ingest = (DEPLOY / "systemd" / "kqactors-ingest@.service").read_text()
    assert "ExecReload=/bin/kill -HUP $MAINPID" in ingest and "KillMode=mixed" in ingest
    assert "RuntimeDirectory=kqactors" in (DEPLOY / "systemd" / "kqactors-runtime.service").read_text()


def test_compose_and_dockerfile():
    yaml = pytest.importorskip("yaml")
    compose = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    services = compose["services"]
    assert set(services) == {"broker", "runtime", "ingest"}
    assert services["runtime"]["command"] == ["runtime", "--dir", "/run/kqactors"]
    assert "runtime-dir:/run/kqactors" in services["ingest"]["volumes"]
    assert services["ingest"]["stop_signal"] == "SIGTERM"
    dockerfile = (DEPLOY / "Dockerfile").read_text().splitlines()
    assert sum(line.startswith("FROM ") for line in dockerfile) == 2
    users = [line.split()[1] for line in dockerfile if line.startswith("USER ")]
    assert users and not users[-1].startswith(("root", "0"))
