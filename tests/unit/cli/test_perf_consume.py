"""``kqactors perf consume``'s loop, summary and options, and the progress display, without a broker.

Runs in: the pytest process. The loop is driven by a scripted consumer on a fake clock; the progress display
by fake terminal / pipe streams (rich is used when installed, the plain line otherwise).
"""

from __future__ import annotations

import argparse
import io
import json
import math

import pytest
from support.clock import FakeClock

from kqactors.cli import perf, progress
from kqactors.cli.perf_consume import ConsumeSummary, consume_loop, consumer_config, run_consume
from kqactors.errors import KafkaError
from kqactors.message import Message


class ScriptedConsumer:
    """consume() hands out the scripted batches, moving the clock by each step's seconds first."""

    def __init__(self, clock: FakeClock, steps: list[tuple[float, list[Message]]]) -> None:
        self.clock, self.steps = clock, list(steps)
        self.asked: list[int] = []

    def consume(self, num_messages: int, timeout: float) -> list[Message]:
        self.asked.append(num_messages)
        if not self.steps:
            self.clock.advance(timeout)
            return []
        seconds, batch = self.steps.pop(0)
        self.clock.advance(seconds)
        return batch


def msgs(n: int, size: int = 10) -> list[Message]:
    return [Message(topic="t", partition=0, offset=i, value=b"x" * size, key=b"k") for i in range(n)]


def test_loop_counts_messages_bytes_and_timing():
    clock = FakeClock()
    consumer = ScriptedConsumer(clock, [(0.5, msgs(100)), (0.25, msgs(50)), (0.25, msgs(50))])
    summary = consume_loop(consumer, 200, idle_timeout_s=5, clock=clock)
    assert summary.received == 200 and summary.bytes == 200 * 11 and summary.ok
    assert summary.time_to_first_s == pytest.approx(0.5) and summary.elapsed_s == pytest.approx(1.0)
    assert summary.msgs_per_s == pytest.approx(200.0)
    assert summary.steady_msgs_per_s == pytest.approx(100 / 0.5)
    assert consumer.asked == [200, 100, 50]  # never asks for more than what is still wanted


def test_loop_skips_eof_counts_errors_and_stops_when_idle():
    clock = FakeClock()
    eof = Message(topic="t", partition=0, offset=3, error=KafkaError(KafkaError._PARTITION_EOF))
    err = Message(topic="t", partition=1, error=KafkaError(KafkaError._TRANSPORT))
    consumer = ScriptedConsumer(clock, [(0.1, msgs(3) + [eof, err])])
    summary = consume_loop(consumer, 10, idle_timeout_s=2, clock=clock)
    assert summary.received == 3 and summary.errors == {"_TRANSPORT": 1} and not summary.ok
    assert math.isnan(summary.steady_msgs_per_s)
    doc = json.loads(summary.to_json(topic="t"))
    assert doc["steady_msgs_per_s"] is None and doc["received"] == 3 and doc["topic"] == "t"
    assert "consume errors: _TRANSPORT: 1" in summary.to_text("t")


def test_loop_stops_at_a_fatal_error_and_on_ctrl_c():
    clock = FakeClock()
    fatal = Message(topic="t", partition=0, error=KafkaError(KafkaError._FATAL, fatal=True))
    summary = consume_loop(ScriptedConsumer(clock, [(0.1, [fatal]), (0.1, msgs(5))]), 5, 5, clock=clock)
    assert summary.received == 0 and summary.errors == {"_FATAL": 1}

    class Interrupting(ScriptedConsumer):
        def consume(self, num_messages: int, timeout: float) -> list[Message]:
            if not self.steps:
                raise KeyboardInterrupt
            return super().consume(num_messages, timeout)

    summary = consume_loop(Interrupting(clock, [(0.1, msgs(4))]), 10, 5, clock=clock)
    assert summary.interrupted and summary.received == 4
    assert summary.to_text("t").startswith("interrupted")


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    perf.add_parser(parser.add_subparsers(dest="command"))
    return parser.parse_args(["perf", "consume", *argv])


def test_options_and_config():
    args = parse("-b", "h:1", "-t", "t", "-c", "5", "-g", "grp", "-X", "fetch.min.bytes=10")
    assert args.handler is run_consume
    config = consumer_config("h:1", args, {"fetch.min.bytes": "10"})
    assert config["group.id"] == "grp" and config["auto.offset.reset"] == "earliest"
    assert config["enable.auto.commit"] is False and config["fetch.min.bytes"] == "10"
    assert consumer_config("h:1", parse(), {})["group.id"].startswith("kqactors-perf-")
    for bad in (["-c", "0"], ["--idle-timeout", "0"], ["-s", "-1"]):
        with pytest.raises(SystemExit):
            parse(*bad)


def test_bad_properties_and_configs_exit_2(capsys):
    assert run_consume(parse("-b", "h:1", "-X", "novalue")) == 2

    def refuse(config):
        raise ValueError("bad value")

    assert run_consume(parse("-b", "127.0.0.1:1", "-t", "t"), consumer_factory=refuse) == 2
    assert "invalid consumer configuration" in capsys.readouterr().err


def test_summary_text_without_messages_says_n_a():
    text = ConsumeSummary(wanted=5).to_text("t")
    assert "0/5 messages" in text and "n/a" in text


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_draws_only_on_a_terminal():
    pipe = io.StringIO()
    assert progress.make_progress(pipe, 10, "x").kind == "none"
    assert progress.make_progress(Terminal(), 10, "x", enabled=False).kind == "none"
    plain = progress.make_progress(Terminal(), 10, "consuming", prefer_rich=False)
    assert plain.kind == "plain"
    with plain:
        plain.advance(4)
    drawn = plain._stream.getvalue()  # noqa: SLF001 - the fake terminal's text
    assert drawn.startswith("\rconsuming: 4/10 msgs") and drawn.endswith("\n")


def test_progress_uses_rich_when_installed():
    pytest.importorskip("rich")
    term = Terminal()
    bar = progress.make_progress(term, 10, "seeding")
    assert bar.kind == "rich"
    with bar:
        bar.advance(10)
    assert "seeding" in term.getvalue() and "10/10" in term.getvalue()


def test_perf_produce_progress_is_rich_on_a_terminal_and_silent_in_a_pipe():
    from kqactors.cli.perf_stats import DeliveryStats, ProgressLine

    pipe_progress = progress.produce_progress(io.StringIO(), 10, enabled=True)
    assert isinstance(pipe_progress, ProgressLine) and not pipe_progress.enabled
    pytest.importorskip("rich")
    term = Terminal()
    bar = progress.produce_progress(term, 10, enabled=True)
    stats = DeliveryStats()
    for _ in range(10):
        stats.record(0.0, None, 5)
    bar.update(10, stats, force=True)
    bar.finish()
    assert "10/10" in term.getvalue()
