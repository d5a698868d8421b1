"""The supervisor's metrics board (counters survive worker restarts, gauges do not), its Prometheus text, the
librdkafka statistics fields, the JSON log lines, and the progress line."""

from __future__ import annotations

import io
import json
import logging

import pytest

from kqactors.ingest.logs import setup_logging
from kqactors.ingest.metrics import (
    LATENCY_BOUNDS,
    MetricsBoard,
    PrometheusCollector,
    SourceStats,
    rdkafka_fields,
)
from kqactors.ingest.supervisor import ProgressLine

from .fakes import Clock


def snapshot(lines_in, lines_out, in_flight=0, latency=None):
    stats = SourceStats()
    stats.lines_in, stats.lines_out, stats.in_flight, stats.lag_bytes = lines_in, lines_out, in_flight, 7
    stats.drop("queue_full", 2)
    for seconds in latency or []:
        stats.latency.observe(seconds)
    return {"type": "metrics", "sources": {"app": stats.snapshot()}, "queue": in_flight,
            "rdkafka": {"msg_cnt": 3, "broker_rtt_avg": {"b:1/1": 0.002}}}


def test_counters_add_up_across_restarts_and_gauges_follow_the_live_worker():
    board = MetricsBoard()
    board.update("w0", snapshot(100, 90, 10, [0.003]))
    board.worker_exited("w0", restarting=True)
    board.update("w0", snapshot(5, 5, 1, [0.2]))
    app = board.sources()["app"]
    assert (app["lines_in"], app["lines_out"], app["in_flight"], app["dropped"]) == (105, 95, 1, {"queue_full": 4})
    assert app["latency"]["count"] == 2 and board.restarts == {"w0": 1}
    totals = board.totals()
    assert totals["lines_in"] == 105 and totals["dropped"] == 4 and totals["lag_bytes"] == 7


def test_prometheus_exposition():
    prometheus_client = pytest.importorskip("prometheus_client")
    board = MetricsBoard()
    board.update("w0", snapshot(100, 90, 10, [0.003, 0.7]))
    registry = prometheus_client.CollectorRegistry(auto_describe=False)
    registry.register(PrometheusCollector(board))
    text = prometheus_client.generate_latest(registry).decode()
    assert 'kqactors_ingest_lines_read_total{source="app"} 100.0' in text
    assert 'kqactors_ingest_lines_delivered_total{source="app"} 90.0' in text
    assert 'kqactors_ingest_lines_dropped_total{reason="queue_full",source="app"} 2.0' in text
    assert 'kqactors_ingest_lines_in_flight{source="app"} 10.0' in text
    assert 'kqactors_ingest_delivery_latency_seconds_bucket{le="0.005",source="app"} 1.0' in text
    assert 'kqactors_ingest_delivery_latency_seconds_count{source="app"} 2.0' in text
    assert 'kqactors_ingest_worker_up{worker="w0"} 1.0' in text
    assert 'kqactors_ingest_rdkafka_msg_cnt{worker="w0"} 3.0' in text
    assert 'kqactors_ingest_rdkafka_broker_rtt_avg_seconds{broker="b:1/1",worker="w0"} 0.002' in text
    assert len(LATENCY_BOUNDS) + 1 == len(board.sources()["app"]["latency"]["counts"])


def test_rdkafka_fields_from_a_statistics_document():
    doc = {"msg_cnt": 5, "txmsgs": 9, "name": "x", "brokers": {
        "b:1/1": {"name": "b:1/1", "nodeid": 1, "rtt": {"avg": 1500}},
        "GroupCoordinator": {"name": "GroupCoordinator", "nodeid": -1, "rtt": {"avg": 1}}}}
    assert rdkafka_fields(doc) == {"msg_cnt": 5, "txmsgs": 9, "broker_rtt_avg": {"b:1/1": 0.0015}}


def test_json_logs_carry_the_extra_fields():
    stream = io.StringIO()
    setup_logging("json", "INFO", "w3", stream)
    logging.getLogger("kqactors.ingest.test").info("rotated %s", "a.log", extra={"event": "rotated", "path": "a"})
    logging.getLogger("kqactors.ingest.test").debug("hidden")
    record = json.loads(stream.getvalue())
    assert record["msg"] == "rotated a.log" and record["event"] == "rotated" and record["path"] == "a"
    assert record["worker"] == "w3" and record["level"] == "info" and record["ts"].endswith("Z")
    assert stream.getvalue().count("\n") == 1


def test_the_progress_line():
    clock, out = Clock(), io.StringIO()
    line = ProgressLine(out, True, clock)
    totals = {"lines_in": 0, "lines_out": 0, "in_flight": 0, "lag_bytes": 0, "dropped": 0, "errors": 0}
    line.render(totals, 1, 1)
    clock.advance(2)
    text = line.render({**totals, "lines_in": 2000, "lines_out": 1000}, 1, 2)
    assert "in 2,000 (1,000/s)" in text and "out 1,000 (500/s)" in text and "workers 1/2" in text
    line.draw(text)
    line.clear()
    assert out.getvalue().startswith("\r\x1b[K") and out.getvalue().endswith("\r\x1b[K")
    quiet = io.StringIO()
    ProgressLine(quiet, False, clock).draw("x")
    assert quiet.getvalue() == ""
