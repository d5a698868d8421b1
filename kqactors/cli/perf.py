"""``kqactors perf produce``: a producer load generator in the spirit of librdkafka's rdkafka_performance.

Runs in: the user's shell process (the embedded Tansu broker, when used, is its child; kqactors.Producer
spawns its own host processes). Owns the command line: options → producer config, the broker's lifetime
when none is given, topic creation, and printing the summary (text, or JSON with --json). The measured loop
lives in ``perf_produce`` and the numbers in ``perf_stats``.

Exit status: 0 when every message was delivered, 1 when any delivery failed (or the run could not start),
2 for bad options or configuration, 130 when stopped by Ctrl-C (after printing the partial summary).
"""

from __future__ import annotations

import argparse
import sys
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from kqactors.cli import perf_consume
from kqactors.cli.arguments import non_negative_float, non_negative_int, positive_float, positive_int
from kqactors.cli.perf_payload import create_topic, make_payloads
from kqactors.cli.perf_produce import ProduceRun, run_produce
from kqactors.cli.progress import produce_progress
from kqactors.errors import KafkaException

__all__ = ["add_parser", "run_perf", "producer_config", "parse_properties"]

ProducerFactory = Callable[[Mapping[str, Any]], Any]
COMPRESSION_CHOICES = ("none", "gzip", "snappy", "lz4", "zstd")
INTERRUPTED = 130  # the shell's status for a command stopped by Ctrl-C (128 + SIGINT)


def add_parser(subparsers: Any) -> None:
    """Register ``perf`` (with sub-command ``produce``) on the ``kqactors`` command's subparsers."""
    perf = subparsers.add_parser("perf", help="performance tools (perf produce, perf consume)",
                                 description="Performance tools for kqactors.")
    perf.set_defaults(handler=lambda _options: _missing_subcommand(perf))
    perf_commands = perf.add_subparsers(dest="perf_command", metavar="TOOL")
    produce = perf_commands.add_parser(
        "produce", help="produce messages as fast as possible (or at --rate) and report throughput",
        description="Produce --count messages of --size bytes and report msgs/s, MB/s, delivery latency "
        "(enqueue to delivery report) and delivery errors. Without --bootstrap an in-memory Tansu broker "
        "is started for the run.",
    )
    produce.add_argument("--bootstrap", "-b", default=None,
                         help="bootstrap.servers (default: start an embedded Tansu broker)")
    produce.add_argument("--topic", "-t", default=None, help="topic (default: a fresh kqactors-perf-* name)")
    produce.add_argument("--partitions", "-p", type=positive_int, default=3,
                         help="partitions when the topic is created (default 3; ignored if it exists)")
    produce.add_argument("--size", "-s", type=non_negative_int, default=100, help="message bytes (default 100)")
    produce.add_argument("--count", "-c", type=non_negative_int, default=100_000,
                         help="messages to produce (default 100000)")
    produce.add_argument("--rate", "-r", type=non_negative_float, default=0.0,
                         help="messages per second limit (default 0 = unlimited)")
    produce.add_argument("--compression", "-z", choices=COMPRESSION_CHOICES, default=None,
                         help="compression.type (default: the client's default)")
    produce.add_argument("--acks", "-a", choices=("0", "1", "all", "-1"), default=None,
                         help="acks (default: the client's default)")
    produce.add_argument("--linger-ms", type=non_negative_float, default=None,
                         help="linger.ms (default: the client's default)")
    produce.add_argument("-X", dest="properties", action="append", default=[], metavar="KEY=VALUE",
                         help="any configuration property; repeatable; applied last (wins over the flags)")
    produce.add_argument("--flush-timeout", type=positive_float, default=60.0,
                         help="seconds to wait for outstanding delivery reports at the end (default 60)")
    produce.add_argument("--json", action="store_true", help="print the summary as one JSON object")
    produce.add_argument("--quiet", "-q", action="store_true", help="no progress line or notices on stderr")
    produce.set_defaults(handler=run_perf)
    perf_consume.add_parser(perf_commands)


def run_perf(args: argparse.Namespace, producer_factory: ProducerFactory | None = None) -> int:
    """Run ``perf produce`` for parsed ``args``; ``producer_factory(config)`` defaults to kqactors.Producer."""
    if getattr(args, "perf_command", "produce") != "produce":
        print(f"kqactors perf: unknown tool {args.perf_command!r}", file=sys.stderr)
        return 2
    try:
        properties = parse_properties(args.properties)
    except ValueError as exc:
        print(f"kqactors perf: {exc}", file=sys.stderr)
        return 2
    factory = producer_factory or _kqactors_producer_factory()
    if factory is None:
        print("kqactors perf: kqactors.Producer is not available in this build", file=sys.stderr)
        return 1
    broker = None
    bootstrap = args.bootstrap
    try:
        if bootstrap is None:
            broker = _start_embedded_broker(args.quiet)
            if broker is None:
                return 1
            bootstrap = broker.bootstrap
        return _run_with_broker(args, bootstrap, properties, factory, embedded=broker is not None)
    finally:
        if broker is not None:
            broker.stop()


def _run_with_broker(args: argparse.Namespace, bootstrap: str, properties: dict[str, str],
                     factory: ProducerFactory, embedded: bool) -> int:
    topic = args.topic or f"kqactors-perf-{uuid.uuid4().hex[:10]}"
    config = producer_config(bootstrap, args, properties)
    try:
        producer = factory(config)
    except (*_kafka_exceptions(), ValueError, TypeError) as exc:
        print(f"kqactors perf: invalid producer configuration: {exc}", file=sys.stderr)
        return 2
    _note(args, _create_topic_notice(bootstrap, topic, args.partitions))
    progress = produce_progress(sys.stderr, args.count, enabled=not args.quiet)
    summary = None
    try:
        run = ProduceRun(topic=topic, payloads=make_payloads(args.size), count=args.count, rate=args.rate,
                         flush_timeout_s=args.flush_timeout)
        summary = run_produce(producer, run, progress)
    except _kafka_exceptions() as exc:
        print(f"kqactors perf: produce failed: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # before the run started (building payloads): nothing to report
        return INTERRUPTED
    finally:
        _close(producer, quick=summary is None or summary.interrupted)
    if args.json:
        print(summary.to_json(topic=topic, message_size=args.size, bootstrap=bootstrap,
                              embedded_broker=embedded, config=_printable(config)))
    else:
        print(summary.to_text(topic, args.size))
    if summary.interrupted:
        return INTERRUPTED
    return 0 if summary.ok else 1


def producer_config(bootstrap: str, args: argparse.Namespace, properties: Mapping[str, str]) -> dict[str, Any]:
    """The producer config: bootstrap, then the flags that were given, then every -X (last wins)."""
    config: dict[str, Any] = {"bootstrap.servers": bootstrap}
    if args.compression is not None:
        config["compression.type"] = args.compression
    if args.acks is not None:
        config["acks"] = args.acks
    if args.linger_ms is not None:
        config["linger.ms"] = args.linger_ms
    config.update(properties)
    return config


def parse_properties(items: Sequence[str]) -> dict[str, str]:
    """``["a=1", "b=x=y"]`` → ``{"a": "1", "b": "x=y"}``; a missing ``=`` or empty key is a ValueError."""
    properties: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ValueError(f"-X expects KEY=VALUE, got {item!r}")
        properties[key] = value
    return properties


def _create_topic_notice(bootstrap: str, topic: str, partitions: int) -> str:
    try:
        setup = create_topic(bootstrap, topic, partitions)
    except KafkaException as exc:
        return f"could not create topic {topic!r} ({exc}); relying on auto-creation"
    if setup.status == "created":
        return f"created topic {topic!r} with {partitions} partitions"
    if setup.status == "exists":
        return f"topic {topic!r} exists; --partitions ignored"
    return f"{setup.reason}; relying on auto-creation of {topic!r}"


def _start_embedded_broker(quiet: bool) -> Any:
    from kqactors.testing.tansu import TansuBroker, TansuNotFound

    broker = TansuBroker()
    try:
        broker.start()
    except (TansuNotFound, RuntimeError, TimeoutError) as exc:
        print(f"kqactors perf: cannot start the embedded Tansu broker: {exc}", file=sys.stderr)
        return None
    if not quiet:
        print(f"kqactors perf: embedded Tansu broker at {broker.bootstrap}", file=sys.stderr)
    return broker


def _kqactors_producer_factory() -> ProducerFactory | None:
    try:
        from kqactors.client.producer.producer import Producer
    except ImportError:
        return None
    return Producer


def _kafka_exceptions() -> tuple[type[BaseException], ...]:
    """kqactors' KafkaException, plus confluent-kafka's when a confluent Producer is being driven."""
    confluent = sys.modules.get("confluent_kafka")
    peer = getattr(confluent, "KafkaException", None)
    return (KafkaException, peer) if isinstance(peer, type) else (KafkaException,)


def _close(producer: Any, quick: bool = False) -> None:
    """Close the producer; ``quick`` (after Ctrl-C) drops what was not delivered instead of flushing it."""
    try:
        if quick and callable(getattr(producer, "purge", None)):
            producer.purge()
            producer.poll(0)
        close = getattr(producer, "close", None)
        if callable(close):
            close(0) if quick else close()  # after Ctrl-C: no flush of what the purge left in flight
    except (*_kafka_exceptions(), RuntimeError) as exc:
        print(f"kqactors perf: closing the producer failed: {exc}", file=sys.stderr)
    except KeyboardInterrupt:  # another Ctrl-C while closing: the process is leaving anyway
        pass


def _printable(config: Mapping[str, Any]) -> dict[str, Any]:
    """Config for the JSON summary, without secrets."""
    return {key: ("***" if any(word in key for word in ("password", "secret", "token")) else value)
            for key, value in config.items()}


def _note(args: argparse.Namespace, text: str) -> None:
    if not args.quiet:
        print(f"kqactors perf: {text}", file=sys.stderr)


def _missing_subcommand(parser: argparse.ArgumentParser) -> int:
    parser.print_help(sys.stderr)
    return 2




