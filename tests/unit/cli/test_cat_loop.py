"""``kqactors cat -C``'s start offsets and consume loop with a scripted consumer (no broker).

Runs in: the pytest process. Covers what Tansu cannot show: a time look-up that answers a real offset, tail
offsets over real watermarks, -e counting, -c, e@ stops, and consume errors with and without -E.
"""

from __future__ import annotations

import argparse
import io

from kqactors.cli import cat
from kqactors.cli.cat_format import OffsetSpec
from kqactors.errors import KafkaError
from kqactors.message import OFFSET_BEGINNING, OFFSET_END, OFFSET_STORED, Message, TopicPartition


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    cat.add_parser(parser.add_subparsers(dest="command"))
    return parser.parse_args(["cat", "-b", "h:1", "-C", "-t", "t", *argv])


class LookupConsumer:
    """Answers watermarks and time look-ups from tables."""

    def __init__(self, watermarks: dict[int, tuple[int, int]], times: dict[int, int]) -> None:
        self.watermarks, self.times = watermarks, times

    def get_watermark_offsets(self, tp: TopicPartition, timeout: float) -> tuple[int, int]:
        return self.watermarks[tp.partition]

    def offsets_for_times(self, tps: list[TopicPartition], timeout: float) -> list[TopicPartition]:
        return [TopicPartition(tp.topic, tp.partition, self.times[tp.partition]) for tp in tps]


def test_start_offsets():
    consumer = LookupConsumer({0: (5, 20), 1: (0, 2)}, {0: 12, 1: -1})
    args = parse()
    start = cat._start_offset  # noqa: SLF001 - the -o resolution under test
    assert start(consumer, args, OffsetSpec("beginning"), 0) == OFFSET_BEGINNING
    assert start(consumer, args, OffsetSpec("end"), 0) == OFFSET_END
    assert start(consumer, args, OffsetSpec("stored"), 0) == OFFSET_STORED
    assert start(consumer, args, OffsetSpec("absolute", 7), 0) == 7
    assert start(consumer, args, OffsetSpec("tail", 3), 0) == 17
    assert start(consumer, args, OffsetSpec("tail", 30), 0) == 5  # never before the low watermark
    assert start(consumer, args, OffsetSpec("start_ts", 1700), 0) == 12
    assert start(consumer, args, OffsetSpec("start_ts", 1700), 1) == OFFSET_END  # no record that late


class ScriptedConsumer:
    def __init__(self, batches: list[list[Message]]) -> None:
        self.batches = list(batches)
        self.paused: list[tuple[str, int]] = []

    def consume(self, num_messages: int, timeout: float) -> list[Message]:
        return self.batches.pop(0) if self.batches else []

    def pause(self, tps: list[TopicPartition]) -> None:
        self.paused += [(tp.topic, tp.partition) for tp in tps]


def rec(p: int, o: int, ts: int = 0) -> Message:
    return Message(topic="t", partition=p, offset=o, value=f"v{p}.{o}".encode(), timestamp=(1, ts))


def eof(p: int, o: int) -> Message:
    return Message(topic="t", partition=p, offset=o, error=KafkaError(KafkaError._PARTITION_EOF))


def run_loop(args: argparse.Namespace, batches: list[list[Message]], partitions: int,
             stop_ts: int | None = None) -> tuple[int, bytes, str, ScriptedConsumer]:
    out, err = io.BytesIO(), io.StringIO()
    consumer = ScriptedConsumer(batches)
    writer = cat._Writer(args, out, {})  # noqa: SLF001
    status = cat._consume_loop(consumer, args, writer, cat._Notices(err, args.quiet),  # noqa: SLF001
                               cat._LoopState(partitions), stop_ts)  # noqa: SLF001
    return status, out.getvalue(), err.getvalue(), consumer


def test_exit_at_end_waits_for_every_partition():
    status, out, err, _c = run_loop(parse("-e", "-f", "%p:%o "),
                                    [[rec(0, 0), eof(0, 1)], [rec(1, 0)], [eof(0, 1), eof(1, 1)], [rec(1, 1)]], 2)
    assert status == 0 and out == b"0:0 1:0 "
    assert err.splitlines() == ["% Reached end of topic t [0] at offset 1", "% Reached end of topic t [0] at offset 1",
                                "% Reached end of topic t [1] at offset 1: exiting"]


def test_count_stops_mid_batch():
    status, out, _err, _c = run_loop(parse("-c", "3", "-f", "%o,"), [[rec(0, i) for i in range(10)]], 1)
    assert status == 0 and out == b"0,1,2,"


def test_stop_timestamp_pauses_each_partition_and_ends_when_all_passed():
    batches = [[rec(0, 0, 10), rec(0, 1, 20), rec(1, 0, 15)], [rec(1, 1, 30), rec(0, 2, 5)]]
    status, out, err, consumer = run_loop(parse("-f", "%p:%o "), batches, 2, stop_ts=20)
    assert status == 0 and out == b"0:0 1:0 "  # 0:2 comes after partition 0 passed the stop: not printed
    assert consumer.paused == [("t", 0), ("t", 1)]
    assert err.splitlines()[-1] == "% Reached stop timestamp for topic t [1] at offset 1: exiting"


def test_consume_errors_end_the_run_unless_e_is_given():
    failing = Message(topic="t", partition=0, error=KafkaError(KafkaError._TRANSPORT, "down"))
    status, _out, err, _c = run_loop(parse("-f", "%o "), [[failing], [rec(0, 0)]], 1)
    assert status == 1 and "% ERROR: Consumer error: down" in err
    status, out, _err, _c = run_loop(parse("-E", "-c", "1", "-f", "%o "), [[failing], [rec(0, 0)]], 1)
    assert status == 0 and out == b"0 "


def test_json_and_unbuffered_output():
    args = parse("-J", "-u", "-c", "2")
    out, err = io.BytesIO(), io.StringIO()
    writer = cat._Writer(args, out, {("t", 0): 111})  # noqa: SLF001
    consumer = ScriptedConsumer([[rec(0, 0), rec(0, 1)]])
    assert cat._consume_loop(consumer, args, writer, cat._Notices(err, False),  # noqa: SLF001
                             cat._LoopState(1), None) == 0  # noqa: SLF001
    lines = out.getvalue().splitlines()
    assert len(lines) == 2 and b'"broker":111' in lines[0]
