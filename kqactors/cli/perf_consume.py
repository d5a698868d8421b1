"""``kqactors perf consume``: a consumer load test beside ``perf produce`` (rdkafka_performance -C's role).

Runs in: the user's shell process (the embedded Tansu broker, when used, is its child; kqactors.Consumer and
the seeding Producer spawn their own host processes). Owns the consume command: options, seeding the topic
(always with the embedded broker, with ``--seed`` against a given one), the measured consume loop and its
summary (text, or JSON with --json). The loop takes any consumer with confluent-kafka's API, so tests can
drive it with confluent-kafka's Consumer too.

Exit status: 0 when --count messages were read, 1 when fewer arrived before --idle-timeout or a consume
error ended the run, 2 for bad options or configuration, 130 when stopped by Ctrl-C (after the summary).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kqactors.cli.arguments import non_negative_int, positive_float, positive_int
from kqactors.cli.perf_payload import make_payloads
from kqactors.cli.progress import Progress, make_progress
from kqactors.errors import KafkaError, KafkaException

__all__ = ["add_parser", "run_consume", "consume_loop", "ConsumeSummary", "consumer_config"]

ConsumerFactory = Callable[[Mapping[str, Any]], Any]
INTERRUPTED = 130
_BATCH = 10_000


def add_parser(perf_commands: Any) -> None:
    """Register ``consume`` under ``kqactors perf``."""
    p = perf_commands.add_parser(
        "consume", help="consume a topic as fast as possible and report throughput",
        description="Read --count messages from the start of a topic's partitions (or as a member of --group) "
        "and report msgs/s, MB/s and the time to the first message. Without --bootstrap an in-memory Tansu "
        "broker is started and the topic is seeded with --count messages of --size bytes first.")
    p.add_argument("--bootstrap", "-b", default=None,
                   help="bootstrap.servers (default: an embedded Tansu broker, seeded first)")
    p.add_argument("--topic", "-t", default=None, help="topic (default: a fresh kqactors-perf-* name)")
    p.add_argument("--partitions", "-p", type=positive_int, default=3,
                   help="partitions when the topic is created for seeding (default 3)")
    p.add_argument("--count", "-c", type=positive_int, default=100_000,
                   help="messages to read (and to seed) (default 100000)")
    p.add_argument("--size", "-s", type=non_negative_int, default=100, help="seeded message bytes (default 100)")
    p.add_argument("--seed", action="store_true",
                   help="with --bootstrap: produce --count messages to the topic first")
    p.add_argument("--group", "-g", default=None,
                   help="consume as a member of this group (subscribe) instead of assigning every partition")
    p.add_argument("--idle-timeout", type=positive_float, default=10.0,
                   help="give up after this many seconds without a message (default 10)")
    p.add_argument("-X", dest="properties", action="append", default=[], metavar="KEY=VALUE",
                   help="any consumer configuration property; repeatable; applied last")
    p.add_argument("--json", action="store_true", help="print the summary as one JSON object")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress display or notices on stderr")
    p.set_defaults(handler=run_consume)


@dataclass
class ConsumeSummary:
    """What one consume run measured."""

    wanted: int
    received: int = 0
    bytes: int = 0
    errors: dict[str, int] = field(default_factory=dict)
    time_to_first_s: float = math.nan
    elapsed_s: float = math.nan
    steady_msgs_per_s: float = math.nan
    interrupted: bool = False

    @property
    def msgs_per_s(self) -> float:
        return self.received / self.elapsed_s if self.elapsed_s > 0 else math.nan

    @property
    def mb_per_s(self) -> float:
        return self.bytes / self.elapsed_s / 1e6 if self.elapsed_s > 0 else math.nan

    @property
    def ok(self) -> bool:
        return self.received >= self.wanted and not self.errors and not self.interrupted

    def as_dict(self, **extra: Any) -> dict[str, Any]:
        out: dict[str, Any] = dict(extra)
        values = dict(self.__dict__, msgs_per_s=self.msgs_per_s, mb_per_s=self.mb_per_s)
        for key, value in values.items():
            out[key] = None if isinstance(value, float) and math.isnan(value) else value
        return out

    def to_json(self, **extra: Any) -> str:
        return json.dumps(self.as_dict(**extra), sort_keys=True)

    def to_text(self, topic: str) -> str:
        lines = ["interrupted (Ctrl-C): partial results"] if self.interrupted else []
        lines += [
            f"topic {topic}: {self.received}/{self.wanted} messages ({self.bytes:,} B) consumed in "
            f"{_num(self.elapsed_s, '.3f')} s",
            f"throughput: {_num(self.msgs_per_s, ',.0f')} msgs/s, {_num(self.mb_per_s, '.2f')} MB/s "
            f"(after the first batch: {_num(self.steady_msgs_per_s, ',.0f')} msgs/s)",
            f"time to first message: {_num(self.time_to_first_s * 1e3 if not math.isnan(self.time_to_first_s) else math.nan, '.1f')} ms",
        ]
        if self.errors:
            lines.append("consume errors: " + ", ".join(f"{k}: {v}" for k, v in sorted(self.errors.items())))
        else:
            lines.append("consume errors: 0")
        return "\n".join(lines)


def _num(value: float, spec: str) -> str:
    return "n/a" if math.isnan(value) else format(value, spec)


def consume_loop(consumer: Any, wanted: int, idle_timeout_s: float, progress: Progress | None = None,
                 clock: Callable[[], float] = time.perf_counter) -> ConsumeSummary:
    """Consume until ``wanted`` messages arrived, ``idle_timeout_s`` passed without one, or a fatal error.

    ``elapsed_s`` runs from this call to the last message, so throughput includes the wait for the first
    (connect, join, first fetch: ``time_to_first_s``); ``steady_msgs_per_s`` leaves out the first batch and
    that wait (None when everything came in one batch). Partition-EOF events are
    not messages and are skipped; any other error is counted by name and ends the run when fatal.
    """
    summary = ConsumeSummary(wanted=wanted)
    errors: Counter = Counter()
    started = clock()
    first = last = None
    first_batch = 0
    last_activity = started
    try:
        while summary.received < wanted:
            batch = consumer.consume(min(_BATCH, wanted - summary.received), 0.5)
            now = clock()
            if not batch:
                if now - last_activity > idle_timeout_s:
                    break
                continue
            last_activity = now
            got = 0
            for message in batch:
                error = message.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        continue
                    errors[error.name()] += 1
                    if error.fatal():
                        raise _Stop
                    continue
                got += 1
                summary.bytes += len(message.value() or b"") + len(message.key() or b"")
            if got:
                if first is None:
                    first, first_batch = now, got
                last = now
                summary.received += got
                if progress is not None:
                    progress.advance(got)
    except _Stop:
        pass
    except KeyboardInterrupt:
        summary.interrupted = True
    summary.errors = dict(errors)
    if first is not None:
        summary.time_to_first_s = first - started
        summary.elapsed_s = max((last or first) - started, 1e-9)
        if last is not None and last > first:
            summary.steady_msgs_per_s = (summary.received - first_batch) / (last - first)
    return summary


class _Stop(Exception):
    """A fatal consume error: leave the loop and summarise."""


def consumer_config(bootstrap: str, args: argparse.Namespace, properties: Mapping[str, str]) -> dict[str, Any]:
    """A throw-away group (unless --group), reading from the start, no commits; -X last (wins)."""
    config: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "group.id": args.group or f"kqactors-perf-{uuid.uuid4().hex[:8]}",
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
    }
    config.update(properties)
    return config


def run_consume(args: argparse.Namespace, consumer_factory: ConsumerFactory | None = None,
                producer_factory: ConsumerFactory | None = None, topic_partition: type | None = None) -> int:
    """Run ``perf consume`` for parsed ``args`` (factories default to kqactors.Consumer / Producer;
    ``topic_partition`` is the TopicPartition type the consumer takes, kqactors' by default)."""
    from kqactors.cli.perf import _start_embedded_broker, parse_properties

    try:
        properties = parse_properties(args.properties)
    except ValueError as exc:
        print(f"kqactors perf: {exc}", file=sys.stderr)
        return 2
    broker = None
    bootstrap = args.bootstrap
    try:
        if bootstrap is None:
            broker = _start_embedded_broker(args.quiet)
            if broker is None:
                return 1
            bootstrap = broker.bootstrap
        topic = args.topic or f"kqactors-perf-{uuid.uuid4().hex[:10]}"
        if broker is not None or args.seed:
            status = _seed(args, bootstrap, topic, producer_factory)
            if status:
                return status
        return _measure(args, bootstrap, topic, properties, consumer_factory, embedded=broker is not None,
                        topic_partition=topic_partition)
    except KeyboardInterrupt:
        return INTERRUPTED
    finally:
        if broker is not None:
            broker.stop()


def _seed(args: argparse.Namespace, bootstrap: str, topic: str, factory: ConsumerFactory | None) -> int:
    """Create the topic and produce --count messages of --size bytes; 0 when all were delivered."""
    from kqactors.cli.perf import _create_topic_notice
    from kqactors.cli.perf_produce import ProduceRun, run_produce

    _note(args, _create_topic_notice(bootstrap, topic, args.partitions))
    if factory is None:
        from kqactors import Producer as factory  # noqa: N813 - the default factory is the class
    producer = factory({"bootstrap.servers": bootstrap, "linger.ms": 5})
    try:
        summary = run_produce(producer, ProduceRun(topic=topic, payloads=make_payloads(args.size),
                                                   count=args.count))
    finally:
        producer.close() if hasattr(producer, "close") else producer.flush(10)
    _note(args, f"seeded {summary.delivered}/{args.count} messages of {args.size} B "
                f"({summary.msgs_per_s:,.0f} msgs/s)")
    if not summary.ok:
        print(f"kqactors perf: seeding failed: {summary.errors}", file=sys.stderr)
        return 1
    return 0


def _measure(args: argparse.Namespace, bootstrap: str, topic: str, properties: Mapping[str, str],
             factory: ConsumerFactory | None, embedded: bool, topic_partition: type | None = None) -> int:
    from kqactors import OFFSET_BEGINNING, TopicPartition

    config = consumer_config(bootstrap, args, properties)
    if factory is None:
        from kqactors import Consumer as factory  # noqa: N813 - the default factory is the class
    try:
        consumer = factory(config)
    except (KafkaException, ValueError, TypeError) as exc:
        print(f"kqactors perf: invalid consumer configuration: {exc}", file=sys.stderr)
        return 2
    progress = make_progress(sys.stderr, args.count, f"consuming {topic}", enabled=not args.quiet)
    try:
        if args.group:
            consumer.subscribe([topic])
        else:
            metadata = consumer.list_topics(topic, timeout=30)
            partitions = sorted(metadata.topics[topic].partitions) if topic in metadata.topics else []
            if not partitions:
                print(f"kqactors perf: topic {topic!r} has no partitions", file=sys.stderr)
                return 1
            tp_class = topic_partition or TopicPartition
            consumer.assign([tp_class(topic, p, OFFSET_BEGINNING) for p in partitions])
        with progress:
            summary = consume_loop(consumer, args.count, args.idle_timeout, progress)
    except KafkaException as exc:
        print(f"kqactors perf: consume failed: {exc}", file=sys.stderr)
        return 1
    finally:
        consumer.close()
    if args.json:
        print(summary.to_json(topic=topic, bootstrap=bootstrap, embedded_broker=embedded, group=args.group))
    else:
        print(summary.to_text(topic))
    if summary.interrupted:
        return INTERRUPTED
    return 0 if summary.ok else 1


def _note(args: argparse.Namespace, text: str) -> None:
    if not args.quiet:
        print(f"kqactors perf: {text}", file=sys.stderr)



