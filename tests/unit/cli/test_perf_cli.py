"""``kqactors perf produce``: option handling, statistics, pacing and payloads, without an external broker.

Runs in: the pytest process. The end-to-end cases drive the real command logic with confluent-kafka's
Producer (passed in through run_perf's factory parameter) against librdkafka's built-in mock cluster
(``test.mock.num.brokers``), or against a closed port to get real delivery failures.
"""

from __future__ import annotations

import argparse
import io
import json
import math
import socket
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.clock import FakeClock

from kqactors.cli import broker as broker_cli
from kqactors.cli import perf
from kqactors.cli.perf_payload import MAX_PAYLOAD_BYTES, create_topic, make_payloads
from kqactors.cli.perf_produce import INTERRUPT_FLUSH_S, ProduceRun, RatePacer, run_produce
from kqactors.cli.perf_stats import DeliveryStats, ProgressLine, percentile
from kqactors.errors import KafkaError

ck = pytest.importorskip("confluent_kafka", reason="confluent-kafka drives the CLI logic in these tests")

pytestmark = pytest.mark.timeout(60)


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    perf.add_parser(parser.add_subparsers(dest="command"))
    return parser.parse_args(["perf", "produce", *argv])


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]




# -- statistics ----------------------------------------------------------------------------------------


@settings(max_examples=50, deadline=None)
@given(st.lists(st.floats(min_value=0, max_value=1e3, allow_nan=False), min_size=1, max_size=200),
       st.floats(min_value=0.0, max_value=1.0))
def test_percentile_is_an_observed_value_with_the_right_rank(values, fraction):
    ordered = sorted(values)
    result = percentile(ordered, fraction)
    assert result in ordered
    at_or_below = sum(1 for v in ordered if v <= result)
    assert at_or_below >= fraction * len(ordered)
    strictly_below = sum(1 for v in ordered if v < result)
    assert strictly_below < max(1, math.ceil(fraction * len(ordered)))


def test_percentile_edges():
    assert math.isnan(percentile([], 0.5))
    assert percentile([1.0, 2.0, 3.0, 4.0], 0.5) == 2.0
    assert percentile([1.0, 2.0, 3.0, 4.0], 0.99) == 4.0
    with pytest.raises(ValueError):
        percentile([1.0], 1.5)


def test_delivery_stats_groups_errors_and_computes_rates():
    clock = FakeClock(0.0)
    stats = DeliveryStats(clock=clock)
    for index in range(8):
        clock.now = 1.0 + index * 0.001
        stats.record(enqueued_at=clock.now - 0.010, error=None, value_size=100)
    clock.now = 2.0
    stats.record(1.5, KafkaError(KafkaError._MSG_TIMED_OUT), 100)
    stats.record(1.5, KafkaError(KafkaError._MSG_TIMED_OUT), 100)
    stats.record(1.9, KafkaError(KafkaError.MSG_SIZE_TOO_LARGE), 100)
    summary = stats.summary(produced=12, started_at=0.0, finished_at=2.0, undelivered=1)
    assert summary.delivered == 8 and summary.failed == 4
    assert summary.errors == {"_MSG_TIMED_OUT": 2, "MSG_SIZE_TOO_LARGE": 1, "NO_DELIVERY_REPORT": 1}
    assert summary.msgs_per_s == pytest.approx(4.0)
    assert summary.mb_per_s == pytest.approx(800 / 2.0 / 1e6)
    assert summary.latency_p50_ms == pytest.approx(10.0)
    assert summary.latency_max_ms == pytest.approx(500.0)
    assert not summary.ok
    text = summary.to_text("t", 100)
    assert "delivery errors: 4" in text and "_MSG_TIMED_OUT: 2" in text


def test_summary_json_without_deliveries_has_null_latencies():
    summary = DeliveryStats().summary(produced=0, started_at=0.0, finished_at=1.0)
    document = json.loads(summary.to_json(topic="x"))
    assert document["latency_p50_ms"] is None and document["topic"] == "x"
    assert summary.ok


def test_progress_line_draws_only_when_enabled_and_throttled():
    clock = FakeClock(0.0)
    stream = io.StringIO()
    line = ProgressLine(stream, total=10, enabled=True, interval=0.5, clock=clock)
    stats = DeliveryStats()
    line.update(3, stats)
    line.update(4, stats)  # within the interval: not redrawn
    clock.now = 1.0
    line.update(5, stats)
    line.finish()
    output = stream.getvalue()
    assert output.count("\r") == 2 and "produced 5/10" in output and output.endswith("\n")
    quiet = io.StringIO()
    off = ProgressLine(quiet, total=10, enabled=False)
    off.update(1, stats, force=True)
    off.finish()
    assert quiet.getvalue() == ""


# -- pacing, options, payloads ---------------------------------------------------------------------------


def test_rate_pacer_spreads_messages_evenly():
    pacer = RatePacer(rate=100.0, start=10.0)
    assert pacer.delay_for(0, 10.0) == 0.0
    assert pacer.delay_for(50, 10.2) == pytest.approx(0.3)
    assert pacer.delay_for(50, 11.0) == 0.0
    assert RatePacer(0, 0.0).delay_for(10**6, 0.0) == 0.0
    with pytest.raises(ValueError):
        RatePacer(-1, 0.0)


def test_produce_run_rejects_bad_values():
    with pytest.raises(ValueError):
        ProduceRun(topic="t", payloads=[], count=1)
    with pytest.raises(ValueError):
        ProduceRun(topic="t", payloads=[b"x"], count=-1)


def test_properties_and_flags_build_the_config_with_x_winning():
    args = parse("--compression", "zstd", "--acks", "all", "--linger-ms", "2",
                 "-X", "linger.ms=7", "-X", "client.id=a=b")
    config = perf.producer_config("h:1", args, perf.parse_properties(args.properties))
    assert config == {"bootstrap.servers": "h:1", "compression.type": "zstd", "acks": "all",
                      "linger.ms": "7", "client.id": "a=b"}
    assert perf.producer_config("h:1", parse(), {}) == {"bootstrap.servers": "h:1"}
    for bad in (["novalue"], ["=x"]):
        with pytest.raises(ValueError):
            perf.parse_properties(bad)


@pytest.mark.parametrize("argv", [["--count", "-1"], ["--rate", "nan"], ["--partitions", "0"],
                                  ["--compression", "brotli"], ["--flush-timeout", "0"]])
def test_bad_options_exit_with_usage_error(argv, capsys):
    with pytest.raises(SystemExit) as excinfo:
        parse(*argv)
    assert excinfo.value.code == 2


def test_malformed_x_property_returns_2_before_touching_a_broker(capsys):
    assert perf.run_perf(parse("-b", "127.0.0.1:1", "-X", "oops"), producer_factory=ck.Producer) == 2
    assert "KEY=VALUE" in capsys.readouterr().err


def test_invalid_producer_config_returns_2(capsys):
    args = parse("-b", f"127.0.0.1:{closed_port()}", "-q", "-X", "no.such.property=1")
    assert perf.run_perf(args, producer_factory=ck.Producer) == 2
    assert "invalid producer configuration" in capsys.readouterr().err


def test_payloads_are_exact_sized_deterministic_distinct_and_semi_compressible():
    payloads = make_payloads(1024)
    assert payloads == make_payloads(1024)
    assert payloads and all(len(p) == 1024 for p in payloads) and len(set(payloads)) == len(payloads)
    blob = b"".join(payloads)
    ratio = len(blob) / len(zlib.compress(blob))
    assert 1.5 < ratio < 10, ratio
    assert set(make_payloads(0)) == {b""}
    assert len(make_payloads(10, distinct=3)) == 3
    with pytest.raises(ValueError):
        make_payloads(-1)


def test_create_topic_without_a_broker_is_skipped_not_raised():
    setup = create_topic(f"127.0.0.1:{closed_port()}", "t", 3, timeout=2.0)
    assert setup.status == "skipped" and "refused" in setup.reason.lower()
    with pytest.raises(ValueError):
        create_topic("127.0.0.1:1", "t", 0)


# -- the whole command against librdkafka's mock cluster / a closed port --------------------------------------


def test_run_perf_delivers_everything_to_the_mock_cluster(capsys):
    args = parse("-b", f"127.0.0.1:{closed_port()}", "-X", "test.mock.num.brokers=1", "--count", "3000",
                 "--size", "200", "--compression", "lz4", "--json", "-q")
    assert perf.run_perf(args, producer_factory=ck.Producer) == 0
    out, err = capsys.readouterr()
    summary = json.loads(out)
    assert summary["produced"] == summary["delivered"] == 3000
    assert summary["failed"] == 0 and summary["errors"] == {}
    assert summary["delivered_bytes"] == 3000 * 200
    assert 0 < summary["latency_p50_ms"] <= summary["latency_p99_ms"] <= summary["latency_max_ms"]
    assert summary["config"]["compression.type"] == "lz4"
    assert err == ""  # --quiet: no notices


def test_rate_limit_is_honoured(capsys):
    args = parse("-b", f"127.0.0.1:{closed_port()}", "-X", "test.mock.num.brokers=1", "-X", "linger.ms=0",
                 "--count", "40", "--rate", "200", "--json", "-q")
    assert perf.run_perf(args, producer_factory=ck.Producer) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["delivered"] == 40
    # 40 messages at 200/s: the last one may not be produced before 39/200 s = 0.195 s.
    assert summary["elapsed_s"] >= 0.19
    assert summary["msgs_per_s"] <= 215


def test_failed_deliveries_give_exit_1_and_grouped_errors(capsys):
    args = parse("-b", f"127.0.0.1:{closed_port()}", "-X", "message.timeout.ms=200", "--count", "25")
    assert perf.run_perf(args, producer_factory=ck.Producer) == 1
    out, err = capsys.readouterr()
    assert "0/25 messages" in out
    assert "delivery errors: 25 (_MSG_TIMED_OUT: 25)" in out
    assert "relying on auto-creation" in err


# -- large messages, Ctrl-C ---------------------------------------------------------------------------------


def test_large_messages_get_fewer_distinct_payloads():
    # 1024 distinct 500 KB payloads were 16 s and 543 MB of work: the count and the bytes bound it now (no
    # wall-clock check: a loaded CI machine would make one flaky)
    payloads = make_payloads(500_000)
    assert 2 <= len(payloads) <= 34 and sum(map(len, payloads)) <= MAX_PAYLOAD_BYTES + 500_000
    assert all(len(p) == 500_000 for p in payloads) and len(set(payloads)) == len(payloads)
    assert len(make_payloads(16 * 1024)) == 1024  # up to 16 KiB: unchanged
    assert len(make_payloads(100_000, distinct=1)) == 1


class InterruptedProducer:
    """A confluent-kafka-shaped producer whose produce() gets Ctrl-C at the ``stop_at``-th call; it delivers
    each message on the next poll/flush."""

    def __init__(self, stop_at: int) -> None:
        self.stop_at = stop_at
        self.calls = 0
        self.pending: list = []
        self.flush_timeouts: list[float] = []
        self.purged = self.closed = False

    def produce(self, topic, value, on_delivery=None):
        self.calls += 1
        if self.calls == self.stop_at:
            raise KeyboardInterrupt
        self.pending.append(on_delivery)

    def poll(self, timeout=0):
        served, self.pending = self.pending, []
        for callback in served:
            callback(None, None)
        return len(served)

    def flush(self, timeout=None):
        self.flush_timeouts.append(timeout)
        self.poll()
        return 0

    def purge(self):
        self.purged = True

    def close(self, timeout=5.0):  # kqactors.Producer.close(timeout)
        self.closed = True

    def __len__(self):
        return len(self.pending)


def test_ctrl_c_stops_the_run_and_summarises_what_was_produced():
    producer = InterruptedProducer(stop_at=2501)
    summary = run_produce(producer, ProduceRun(topic="t", payloads=[b"x" * 10], count=10_000))
    assert summary.interrupted and not summary.ok
    assert summary.produced == summary.delivered == 2500 and summary.failed == 0
    assert producer.flush_timeouts == [INTERRUPT_FLUSH_S]  # a short wait, not --flush-timeout
    assert summary.to_text("t", 10).splitlines()[0] == "interrupted (Ctrl-C): partial results"
    assert json.loads(summary.to_json())["interrupted"] is True


def test_run_perf_prints_the_partial_summary_and_exits_130_on_ctrl_c(capsys, monkeypatch):
    monkeypatch.setattr(perf, "create_topic", lambda *args: None)
    monkeypatch.setattr(perf, "_create_topic_notice", lambda *args: "topic ready")
    producer = InterruptedProducer(stop_at=10)
    args = parse("-b", "127.0.0.1:1", "--count", "100", "-q")
    assert perf.run_perf(args, producer_factory=lambda config: producer) == perf.INTERRUPTED == 130
    out, err = capsys.readouterr()
    assert out.startswith("interrupted (Ctrl-C): partial results\n") and "9/9 messages" in out
    assert producer.purged and producer.closed  # undelivered ones dropped, not flushed for seconds
    assert "Traceback" not in err


def test_broker_command_refuses_a_taken_port_in_one_line(capsys):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        assert "in use" in broker_cli.port_taken(port)
        assert broker_cli.run(argparse.Namespace(port=port, startup_timeout=5.0)) == 1
    err = capsys.readouterr().err
    assert err == (f"kqactors broker: cannot listen on 127.0.0.1:{port}: Address already in use (choose another "
                   "--port, or omit it for a free one)\n")
    assert broker_cli.port_taken(port) is None  # free again


def test_a_broker_that_fails_to_start_is_reported_in_one_line():
    panic = RuntimeError("Tansu failed to start: broker process exited before answering ApiVersions\n"
                         "--- tansu log tail ---\nthread 'tokio-rt-worker' panicked ... AddrInUse")
    assert broker_cli._start_failure(panic, 9092) == ("port 9092 on 127.0.0.1 is already in use (choose another "
                                                      "--port, or omit it for a free one)")
    other = RuntimeError("Tansu failed to start: timed out\n--- tansu log tail ---\nsomething")
    assert broker_cli._start_failure(other, None) == "Tansu failed to start: timed out"
