"""The ingest configuration: TOML + command line, defaults, validation messages, worker groups."""

from __future__ import annotations

import pytest

from kqactors.ingest.config import (
    PRODUCER_DEFAULTS,
    ConfigError,
    WorkerSpec,
    load_config,
    parse_config,
    worker_groups,
)

FULL = """
state_dir = "{state}"
topic = "logs"
workers = 2
metrics_port = 9464
checkpoint_interval_ms = 200

[kafka]
"bootstrap.servers" = "k1:9092"
"linger.ms" = 20
"statistics.interval.ms" = 5000

[[source]]
name = "app"
paths = ["/var/log/app/*.log", "/var/log/app.log"]
key_field = "user.id"
transforms = [{{op = "strip"}}, {{op = "grep", pattern = "ERROR|WARN"}}]
rate_limit = 1000
group = "files"

[[source]]
name = "syslog"
type = "udp"
listen = "0.0.0.0:5514"
topic = "syslog"

[[source]]
name = "api"
type = "http"
listen = "127.0.0.1:8080"
http_path = "/ingest"
headers = {{ origin = "http" }}
"""


def test_the_full_form_parses_with_command_line_overrides(tmp_path):
    path = tmp_path / "ingest.toml"
    path.write_text(FULL.format(state=tmp_path / "state"))
    config = load_config(str(path), {"bootstrap": "b:1", "properties": {"linger.ms": "5"}, "metrics_port": None})
    assert config.kafka["bootstrap.servers"] == "b:1" and config.kafka["linger.ms"] == "5"
    assert config.kafka["statistics.interval.ms"] == 5000
    for key, value in PRODUCER_DEFAULTS.items():
        assert config.kafka[key] == value
    assert config.metrics_port == 9464 and config.checkpoint_interval_ms == 200 and config.workers == 2
    app, syslog, api = config.sources
    assert app.type == "file" and app.topic == "logs" and app.key_field == "user.id" and app.rate_limit == 1000.0
    assert syslog.topic == "syslog" and syslog.host_port == ("0.0.0.0", 5514)
    assert api.headers == (("origin", "http"),) and api.http_path == "/ingest"
    groups = worker_groups(config, cpu_count=8)
    assert [g.group for g in groups] == ["files", "w0"]
    assert [s.name for s in groups[1].sources] == ["syslog", "api"]
    assert WorkerSpec.from_dict(groups[0].to_dict()) == groups[0]


def test_the_short_form_and_automatic_workers():
    config = parse_config({}, {"bootstrap": "b:1", "topic": "t", "state_dir": "/tmp/s", "paths": ["a", "-", "c"]})
    assert [(s.type, s.name) for s in config.sources] == [("file", "a"), ("stdin", "stdin"), ("file", "c")]
    groups = worker_groups(config, cpu_count=2)
    assert [[s.name for s in g.sources] for g in groups] == [["a", "c"], ["stdin"]]
    assert all(g.settings["kafka"]["kqactors.hosts"] == 0 for g in groups)
    assert worker_groups(config, cpu_count=16)[0].settings["kafka"]["kqactors.hosts"] == 3
    one = parse_config({"workers": 1}, {"bootstrap": "b:1", "topic": "t", "state_dir": "/s", "paths": ["a", "c"]})
    assert len(worker_groups(one)) == 1


@pytest.mark.parametrize(("data", "overrides", "message"), [
    ({}, {"topic": "t", "paths": ["a"], "state_dir": "/s"}, "no bootstrap servers"),
    ({}, {"bootstrap": "b", "paths": ["a"], "state_dir": "/s"}, "no topic"),
    ({}, {"bootstrap": "b", "topic": "t", "paths": ["a"]}, "need a state directory"),
    ({}, {"bootstrap": "b", "topic": "t"}, "no sources"),
    ({"bogus": 1}, {"bootstrap": "b"}, "unknown top-level key(s): bogus"),
    ({"source": [{"type": "tcp", "listen": "x"}]}, {"bootstrap": "b", "topic": "t"}, "listen must be HOST:PORT"),
    ({"source": [{"type": "tcp", "listen": ":1", "pathz": 1}]}, {"bootstrap": "b", "topic": "t"},
     "unknown key(s): pathz"),
    ({"source": [{"type": "file", "paths": ["a"], "transforms": [{"op": "nope"}]}]},
     {"bootstrap": "b", "topic": "t", "state_dir": "/s"}, "op must be one of"),
    ({"source": [{"paths": ["a"], "transforms": [{"op": "grep", "pattern": "("}]}]},
     {"bootstrap": "b", "topic": "t", "state_dir": "/s"}, "bad pattern"),
    ({"source": [{"type": "udp", "listen": ":5"}, {"type": "udp", "listen": ":5"}]},
     {"bootstrap": "b", "topic": "t"}, "listen on the same udp port"),
    ({"source": [{"type": "http", "listen": ":5"}]}, {"bootstrap": "b", "topic": "t", "once": True},
     "--once reads files and stdin"),
    ({"workers": "many"}, {"bootstrap": "b", "topic": "t", "paths": ["-"]}, "workers:"),
    ({"checkpoint_interval_ms": 0}, {"bootstrap": "b", "topic": "t", "paths": ["-"]}, "must be > 0"),
    ({"source": [{"paths": ["a"], "key_field": "a..b"}]}, {"bootstrap": "b", "topic": "t", "state_dir": "/s"},
     "empty name between dots"),
    ({"source": [{"type": "stdin"}, {"type": "stdin", "name": "x"}]}, {"bootstrap": "b", "topic": "t"},
     "at most one stdin"),
])
def test_errors_say_what_is_wrong(data, overrides, message):
    with pytest.raises(ConfigError) as info:
        parse_config(data, overrides)
    assert message in str(info.value)


def test_bad_toml_and_missing_files(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("topic = ")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(str(bad))
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(str(tmp_path / "missing.toml"))
