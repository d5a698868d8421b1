"""``kqactors cat``: kcat's everyday subset (-P, -C, -L, -Q, -G) with kcat's flags, output and exit codes.

Runs in: the user's shell process (kqactors.Producer / Consumer / AdminClient spawn their own host
processes). Owns the command line, the mode's loop (read input → produce; consume → write) and kcat's
stderr notices ("% Reached end of topic ..."); the bytes of a message or listing come from ``cat_format``.
Unlike ``perf``, ``cat`` never starts an embedded broker: without ``-b`` (or ``-X bootstrap.servers``) it
fails as kcat does.

Exit status, as kcat's: 0 on success (also after Ctrl-C), 1 on a usage error or any failure.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import types
from collections.abc import Iterator, Sequence
from typing import Any, BinaryIO, TextIO

from kqactors.cli.cat_format import (
    CatUsageError,
    OffsetSpec,
    compile_format,
    default_format,
    json_envelope,
    metadata_json,
    metadata_text,
    parse_header,
    parse_offset,
    parse_query,
    unescape,
)
from kqactors.cli.progress import make_progress
from kqactors.errors import KafkaError, KafkaException

__all__ = ["add_parser", "run_cat", "build_config", "split_messages"]

OK, FAILED = 0, 1
_BROKEN_PIPE = 141  # as a process killed by SIGPIPE (kcat's fate when its reader goes away)
_READ_CHUNK = 65536
_BATCH = 500
_DEFAULT_MODE_HELP = "-C, -P, -L, -Q or -G required"


def add_parser(subparsers: Any) -> None:
    """Register ``cat`` on the ``kqactors`` command's subparsers (kcat's short flags, kcat's meanings)."""
    p = subparsers.add_parser(
        "cat", help="kcat-compatible producer/consumer/metadata tool (-P, -C, -L, -Q, -G)",
        description="kcat's everyday subset with kcat's flags and output: produce lines (-P), consume (-C), "
        "a balanced consumer (-G group topic...), list metadata (-L) or query offsets by time (-Q).",
        formatter_class=argparse.RawDescriptionHelpFormatter, epilog=_EPILOG)
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("-P", dest="mode", action="store_const", const="P", help="produce")
    mode.add_argument("-C", dest="mode", action="store_const", const="C", help="consume")
    mode.add_argument("-L", dest="mode", action="store_const", const="L", help="metadata list")
    mode.add_argument("-Q", dest="mode", action="store_const", const="Q", help="query offsets by timestamp")
    mode.add_argument("-G", dest="group", metavar="GROUP", help="balanced consumer of group GROUP; topics follow")
    p.add_argument("-b", dest="brokers", metavar="BROKERS", help="bootstrap broker(s) host[:port],...")
    p.add_argument("-t", dest="topics", action="append", default=[], metavar="TOPIC",
                   help="topic (-Q: topic:partition:timestamp, repeatable)")
    p.add_argument("-p", dest="partition", type=int, default=None, metavar="N",
                   help="partition (-P -p -1: random partitioner)")
    p.add_argument("-D", dest="delim", default="\\n", metavar="DELIM", help="message delimiter (default \\n)")
    p.add_argument("-K", dest="key_delim", default=None, metavar="DELIM", help="key delimiter")
    p.add_argument("-k", dest="key", default=None, metavar="KEY", help="-P: a fixed key for every message")
    p.add_argument("-H", dest="headers", action="append", default=[], metavar="NAME=VALUE",
                   help="-P: a header for every message (repeatable)")
    p.add_argument("-l", dest="line_file", action="store_true",
                   help="-P: split the file given as argument into messages by the delimiter")
    p.add_argument("-T", dest="tee", action="store_true", help="-P: echo sent messages to stdout")
    p.add_argument("-Z", dest="null", action="store_true",
                   help="-P: empty messages are NULL; -C: print NULL keys/values as NULL")
    p.add_argument("-z", dest="compression", default=None, metavar="CODEC", help="-P: compression.codec")
    p.add_argument("-c", dest="count", type=int, default=None, metavar="CNT", help="exit after CNT messages")
    p.add_argument("-o", dest="offsets", action="append", default=[], metavar="OFFSET",
                   help="start: beginning|end|stored|<n>|-<n>|s@<ms>; stop: e@<ms>")
    p.add_argument("-e", dest="exit_eof", action="store_true", help="exit when the last message is received")
    p.add_argument("-f", dest="format", default=None, metavar="FMT", help="output format (%%t %%p %%o %%k %%s ...)")
    p.add_argument("-J", dest="json", action="store_true", help="JSON envelope output (-C, -G, -L)")
    p.add_argument("-O", dest="print_offset", action="store_true", help="print the offset with the -K delimiter")
    p.add_argument("-u", dest="unbuffered", action="store_true", help="unbuffered output")
    p.add_argument("-X", dest="properties", action="append", default=[], metavar="PROP=VAL",
                   help="configuration property (-X list: known properties; -X dump: print config and exit)")
    p.add_argument("-F", dest="config_file", default=None, metavar="FILE", help="property=value lines")
    p.add_argument("-m", dest="metadata_timeout", type=float, default=5.0, metavar="SECONDS",
                   help="metadata (et al.) request timeout (default 5)")
    p.add_argument("-d", dest="debug", default=None, metavar="CONTEXTS",
                   help="debug contexts (-X debug=...), logged to stderr")
    p.add_argument("-q", dest="quiet", action="store_true", help="quiet: no informational notices")
    p.add_argument("-E", dest="keep_going", action="store_true", help="do not exit on non-fatal errors")
    p.add_argument("args", nargs="*", metavar="FILE|TOPIC", help="-P: files; -G: topics")
    p.set_defaults(handler=run_cat)
    p.error = types.MethodType(_usage_exit, p)  # type: ignore[method-assign]


def _usage_exit(parser: argparse.ArgumentParser, message: str) -> None:
    """A bad command line exits 1, as kcat's does (argparse's own convention is 2)."""
    parser.print_usage(sys.stderr)
    parser.exit(FAILED, f"Error: {message}\n")


_EPILOG = """format tokens (-f): %s value  %S value length (-1 NULL)  %R value length, 4 bytes big-endian
  %k key  %K key length  %t topic  %p partition  %o offset  %T timestamp (ms)  %h headers (n=v CSV)
  escapes: \\n \\r \\t \\xHH
examples:
  kqactors cat -b localhost:9092 -L
  echo 'k1:v1' | kqactors cat -b localhost:9092 -P -t topic -K:
  kqactors cat -b localhost:9092 -C -t topic -o beginning -e -f '%p/%o %k=%s\\n'"""


class _Notices:
    """kcat's stderr lines: ``% ...`` notices (hidden by -q) and ``% ERROR: ...`` (always shown)."""

    def __init__(self, stream: TextIO, quiet: bool) -> None:
        self.stream, self.quiet = stream, quiet

    def info(self, text: str) -> None:
        if not self.quiet:
            self.stream.write(f"% {text}\n")
            self.stream.flush()

    def error(self, text: str) -> None:
        self.stream.write(f"% ERROR: {text}\n")
        self.stream.flush()


def run_cat(args: argparse.Namespace, stdin: BinaryIO | None = None, stdout: BinaryIO | None = None,
            stderr: TextIO | None = None) -> int:
    """Run ``kqactors cat`` for parsed ``args`` (streams default to the process's)."""
    stdin = stdin if stdin is not None else sys.stdin.buffer
    stdout = stdout if stdout is not None else sys.stdout.buffer
    stderr = stderr if stderr is not None else sys.stderr
    notices = _Notices(stderr, args.quiet)
    try:
        if "list" in args.properties:
            stdout.write(_property_list().encode())
            stdout.flush()
            return OK
        config = build_config(args)
        if "dump" in args.properties:
            stdout.write("".join(f"{k} = {v}\n" for k, v in sorted(config.items())).encode())
            return OK
        mode = _mode(args)
        if not (config.get("bootstrap.servers") or config.get("metadata.broker.list")):
            raise CatUsageError("-b <broker,..> missing")
        if mode == "P" and config.get("transactional.id"):
            raise CatUsageError("transactions (-X transactional.id) are not supported by kqactors cat")
        client_config: dict[str, Any] = dict(config)
        if "debug" in config:
            client_config["logger"] = _stderr_logger(stderr)
        config = client_config
        if mode == "P":
            return _produce(args, config, stdin, stdout, notices, stderr)
        if mode in ("C", "G"):
            return _consume(args, config, stdout, notices)
        if mode == "L":
            return _list(args, config, stdout, notices)
        return _query(args, config, stdout, notices)
    except CatUsageError as exc:
        stderr.write(f"Error: {exc}\n\nUsage: kqactors cat <options> [file1 file2 .. | topic1 topic2 ..]]\n"
                     "Run 'kqactors cat -h' for the options.\n")
        return FAILED
    except KafkaException as exc:
        notices.error(_kafka_text(exc))
        return FAILED
    except (ValueError, TypeError, OSError) as exc:
        if isinstance(exc, BrokenPipeError):
            _silence_stdout()
            return _BROKEN_PIPE
        notices.error(str(exc))
        return FAILED


def _stderr_logger(stderr: TextIO) -> logging.Logger:
    """The client's log records (``-d``/``-X debug``) as kcat shows librdkafka's: ``%LEVEL|time|text``."""
    logger = logging.getLogger("kqactors.cli.cat.client")
    logger.handlers[:] = []
    handler = logging.StreamHandler(stderr)
    handler.setFormatter(_LogFormat())
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    return logger


class _LogFormat(logging.Formatter):
    _SYSLOG = {logging.DEBUG: 7, logging.INFO: 6, logging.WARNING: 4, logging.ERROR: 3, logging.CRITICAL: 2}

    def format(self, record: logging.LogRecord) -> str:
        return f"%{self._SYSLOG.get(record.levelno, 6)}|{record.created:.3f}|{record.getMessage()}"


def _mode(args: argparse.Namespace) -> str:
    if args.group is not None:
        if not (args.args or args.topics):
            raise CatUsageError("-G requires one or more topics")
        return "G"
    if args.mode is None:
        raise CatUsageError(_DEFAULT_MODE_HELP)
    if args.mode in ("P", "C") and len(args.topics) != 1:
        raise CatUsageError("-t <topic> missing" if not args.topics else "only one -t <topic> is allowed")
    if args.mode == "Q" and not args.topics:
        raise CatUsageError("-Q requires one or more -t topic:partition:timestamp")
    return args.mode


def build_config(args: argparse.Namespace) -> dict[str, str]:
    """Client config from (in order, later wins) the -F file, -X properties, -b, -d and -z.

    As in kcat, ``topic.``-prefixed properties are topic properties (kqactors takes them unprefixed).
    ``kqactors.hosts`` defaults to 0 (toppar actors on the main host: fewer processes for a short command).
    """
    config: dict[str, str] = {"kqactors.hosts": "0"}
    if args.config_file:
        try:
            with open(args.config_file, encoding="utf-8") as handle:
                lines = handle.read().splitlines()
        except OSError as exc:
            raise CatUsageError(f"cannot read -F {args.config_file}: {exc.strerror}") from None
        for number, line in enumerate(lines, 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            _set_property(config, line, f"{args.config_file}:{number}")
    for item in args.properties:
        if item in ("list", "dump"):
            continue
        _set_property(config, item, "-X")
    if args.brokers:
        config["bootstrap.servers"] = args.brokers
    if args.debug:
        config["debug"] = args.debug
    if args.compression:
        config["compression.codec"] = args.compression
    return config


def _set_property(config: dict[str, str], item: str, where: str) -> None:
    key, sep, value = item.partition("=")
    key = key.strip()
    if not sep or not key:
        raise CatUsageError(f"{where}: expected property=value, got {item!r}")
    if key.startswith("topic."):
        key = key[len("topic."):]
    config[key] = value


def _property_list() -> str:
    """``-X list``: every configuration property kqactors knows, with scope, default and description."""
    from kqactors.config.properties import ALIASES, PROPERTIES

    rows = [f"{'Property':<45} | C/P | {'Default':<20} | Description",
            f"{'-' * 45}-|-----|-{'-' * 20}-|------------"]
    for name in sorted(PROPERTIES):
        prop = PROPERTIES[name]
        default = "" if prop.default is None or callable(prop.default) else str(prop.default)
        rows.append(f"{name:<45} |  {prop.scope}  | {default:<20} | {prop.doc}")
    for alias in sorted(ALIASES):
        target = PROPERTIES.get(ALIASES[alias])
        scope = target.scope if target is not None else "*"
        rows.append(f"{alias:<45} |  {scope}  | {'':<20} | Alias for {ALIASES[alias]}")
    return "\n".join(rows) + "\n"


def _kafka_text(exc: KafkaException) -> str:
    error = exc.args[0] if exc.args else None
    if isinstance(error, KafkaError):
        return error.str()
    return str(exc)


def _silence_stdout() -> None:
    """After EPIPE: point fd 1 at /dev/null so the interpreter's final flush cannot fail again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


# ---- produce (-P) ------------------------------------------------------------------------------------------
def split_messages(stream: BinaryIO, delim: bytes, chunk: int = _READ_CHUNK) -> Iterator[bytes]:
    """Messages of ``stream`` split by ``delim`` as kcat does: as soon as each is complete (a terminal's
    lines go out as typed), the last one even without a trailing delimiter, empty ones skipped."""
    read = getattr(stream, "read1", None) or stream.read
    pending = b""
    while True:
        data = read(chunk)
        if not data:
            break
        pending += data
        parts = pending.split(delim)
        pending = parts.pop()
        for part in parts:
            if part:
                yield part
    if pending:
        yield pending


class _Inputs:
    """Where -P's messages come from, and how many bytes are expected (for the progress bar)."""

    def __init__(self, args: argparse.Namespace, stdin: BinaryIO, delim: bytes) -> None:
        self.args, self.stdin, self.delim = args, stdin, delim
        self.total_bytes: int | None = None
        files = list(args.args)
        if args.line_file and len(files) != 1:
            raise CatUsageError("-l requires exactly one file")
        self.files = files
        if files:
            try:
                self.total_bytes = sum(os.path.getsize(f) for f in files)
            except OSError as exc:
                raise CatUsageError(f"{exc.filename}: {exc.strerror}") from None

    def __iter__(self) -> Iterator[bytes]:
        if not self.files:
            yield from split_messages(self.stdin, self.delim)
        elif self.args.line_file:
            with open(self.files[0], "rb") as handle:
                yield from split_messages(handle, self.delim)
        else:  # each file is one message, as in kcat
            for name in self.files:
                with open(name, "rb") as handle:
                    yield handle.read()


def _produce(args: argparse.Namespace, config: dict[str, str], stdin: BinaryIO, stdout: BinaryIO,
             notices: _Notices, stderr: TextIO) -> int:
    from kqactors import Producer

    topic = args.topics[0]
    delim = unescape(args.delim)
    if not delim:
        raise CatUsageError("-D: the delimiter must not be empty")
    key_delim = unescape(args.key_delim) if args.key_delim is not None else None
    if key_delim == b"":
        raise CatUsageError("-K: the delimiter must not be empty")
    headers = [parse_header(h) for h in args.headers]
    fixed_key = args.key.encode("utf-8", "surrogateescape") if args.key is not None else None
    partition = args.partition
    if partition == -1:
        config.setdefault("partitioner", "random")
        partition = None
    inputs = _Inputs(args, stdin, delim)
    failures: list[str] = []

    def on_delivery(error: Any, _message: Any) -> None:
        if error is not None:
            failures.append(error.str() if hasattr(error, "str") else str(error))
            notices.error(f"Delivery failed for message: {failures[-1]}")

    producer = Producer(config)
    progress = make_progress(stderr, inputs.total_bytes, f"producing to {topic}", "bytes",
                             enabled=bool(inputs.files) and not args.quiet)
    sent = 0
    try:
        with progress:
            for raw in inputs:
                if args.count is not None and sent >= args.count:
                    break
                if failures and not args.keep_going:
                    break
                key, value = fixed_key, raw
                if key_delim is not None:
                    head, sep, tail = raw.partition(key_delim)
                    if sep:
                        key, value = head, tail
                value_out: bytes | None = None if (args.null and not value) else value
                kwargs: dict[str, Any] = {"key": key, "on_delivery": on_delivery}
                if partition is not None:
                    kwargs["partition"] = partition
                if headers:
                    kwargs["headers"] = headers
                _produce_one(producer, topic, value_out, kwargs)
                sent += 1
                if args.tee:
                    stdout.write(raw + delim)
                    if args.unbuffered:
                        stdout.flush()
                progress.advance(len(raw) + (len(delim) if args.line_file or not inputs.files else 0))
                if sent % _BATCH == 0:
                    producer.poll(0)
            _flush(producer)
    except KeyboardInterrupt:
        producer.flush(1.0)
    finally:
        stdout.flush()
        producer.close(0) if failures else producer.close()
    return FAILED if failures else OK


def _produce_one(producer: Any, topic: str, value: bytes | None, kwargs: dict[str, Any]) -> None:
    """produce(), serving delivery reports while the client's queue is full (kcat waits the same way)."""
    while True:
        try:
            producer.produce(topic, value, **kwargs)
            return
        except BufferError:
            producer.poll(0.1)


def _flush(producer: Any) -> None:
    """Wait for every delivery report (as kcat does at the end of its input)."""
    while producer.flush(1.0) > 0:
        pass


# ---- consume (-C, -G) --------------------------------------------------------------------------------------
class _Writer:
    """Formats each message as -f / -J / the -K -D default asks, into stdout (flushed per message with -u)."""

    def __init__(self, args: argparse.Namespace, stdout: BinaryIO, leaders: dict[tuple[str, int], int]) -> None:
        null = b"NULL" if args.null else b""
        delim = unescape(args.delim)
        self.json = args.json
        self.delim = delim
        self.leaders = leaders
        if args.format is not None:
            self.formatter = compile_format(args.format, null)
        else:
            key_delim = unescape(args.key_delim) if args.key_delim is not None else None
            self.formatter = default_format(key_delim, delim, args.print_offset, null)
        self.out = stdout
        self.unbuffered = args.unbuffered
        self.pending: list[bytes] = []

    def write(self, message: Any) -> None:
        """Format one message; it is written at the next ``flush`` (at once, flushed, with -u)."""
        if self.json:
            broker = self.leaders.get((message.topic(), message.partition()), -1)
            self.pending.append(json_envelope(message, broker) + self.delim)
        else:
            self.pending.append(self.formatter.render(message))
        if self.unbuffered:
            self.flush()

    def flush(self) -> None:
        """Write what is pending in one call (stdout may be unbuffered: PYTHONUNBUFFERED)."""
        if self.pending:
            self.out.write(b"".join(self.pending))
            self.pending.clear()
        if self.unbuffered:
            self.out.flush()


def _consume(args: argparse.Namespace, config: dict[str, str], stdout: BinaryIO, notices: _Notices) -> int:
    from kqactors import Consumer, TopicPartition

    start, stop_ts = _offsets(args)
    config = dict(config)
    config["enable.partition.eof"] = "true"
    group_mode = args.group is not None
    if group_mode:
        config["group.id"] = args.group
        if start.kind in ("beginning", "end"):
            config.setdefault("auto.offset.reset", "earliest" if start.kind == "beginning" else "latest")
        elif start.kind != "stored":
            raise CatUsageError("-G takes -o beginning, end or stored (the group's committed offsets)")
    else:
        config.setdefault("group.id", "kqactors-cat")
        config.setdefault("enable.auto.commit", "false")  # -o stored commits what it printed, at the end
    consumer = Consumer(config)
    try:
        topics = [*args.topics, *args.args] if group_mode else args.topics
        metadata = consumer.list_topics(None if len(topics) != 1 else topics[0], timeout=args.metadata_timeout)
        leaders = {(t, p): part.leader for t, meta in metadata.topics.items() for p, part in meta.partitions.items()}
        writer = _Writer(args, stdout, leaders)
        if group_mode:
            state = _LoopState(expected=None)
            consumer.subscribe(topics, on_assign=lambda c, parts: state.assigned(parts, notices, args.group))
        else:
            parts = _partitions(metadata, args.topics[0], args.partition)
            assignment = [TopicPartition(args.topics[0], p, _start_offset(consumer, args, start, p))
                          for p in parts]
            state = _LoopState(expected=len(parts))
            consumer.assign(assignment)
        try:
            return _consume_loop(consumer, args, writer, notices, state, stop_ts)
        finally:
            if not group_mode and start.kind == "stored":
                _commit_printed(consumer, state, notices)
    except KeyboardInterrupt:
        return OK
    finally:
        try:
            stdout.flush()
        except BrokenPipeError:
            _silence_stdout()
        consumer.close()


def _commit_printed(consumer: Any, state: _LoopState, notices: _Notices) -> None:
    """-C -o stored: commit the offset after the last message printed of each partition, so the next
    ``-o stored`` run of the group goes on from there (kcat's librdkafka commits them as it goes)."""
    from kqactors import TopicPartition

    if not state.next_offsets:
        return
    try:
        consumer.commit(offsets=[TopicPartition(t, p, o) for (t, p), o in sorted(state.next_offsets.items())],
                        asynchronous=False)
    except KafkaException as exc:
        notices.error(f"Failed to commit offsets: {_kafka_text(exc)}")


class _LoopState:
    """Which partitions are done (end reached with -e, or e@ passed), out of how many are consumed."""

    def __init__(self, expected: int | None) -> None:
        self.expected = expected
        self.done: set[tuple[str, int]] = set()
        self.count = 0
        self.next_offsets: dict[tuple[str, int], int] = {}

    def assigned(self, partitions: list[Any], notices: _Notices, group: str) -> None:
        self.expected = len(partitions)
        names = ", ".join(f"{tp.topic} [{tp.partition}]" for tp in partitions)
        notices.info(f"Group {group} rebalanced: assigned: {names}")

    def all_done(self) -> bool:
        return self.expected is not None and len(self.done) >= self.expected


def _consume_loop(consumer: Any, args: argparse.Namespace, writer: _Writer, notices: _Notices,
                  state: _LoopState, stop_ts: int | None) -> int:
    try:
        return _consume_batches(consumer, args, writer, notices, state, stop_ts)
    finally:
        writer.flush()


def _consume_batches(consumer: Any, args: argparse.Namespace, writer: _Writer, notices: _Notices,
                     state: _LoopState, stop_ts: int | None) -> int:
    while True:
        writer.flush()
        want = _BATCH if args.count is None else max(1, min(_BATCH, args.count - state.count))
        for message in consumer.consume(want, 0.5):
            error = message.error()
            where = (message.topic(), message.partition())
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    finishing = args.exit_eof and where not in state.done and (
                        state.expected is not None and len(state.done) + 1 >= state.expected)
                    notices.info(f"Reached end of topic {where[0]} [{where[1]}] at offset {message.offset()}"
                                 + (": exiting" if finishing else ""))
                    if args.exit_eof:
                        state.done.add(where)
                        if state.all_done():
                            return OK
                    continue
                notices.error(f"Consumer error: {error.str()}")
                if not args.keep_going or error.fatal():
                    return FAILED
                continue
            if where in state.done:
                continue
            if stop_ts is not None and message.timestamp()[1] >= stop_ts:
                state.done.add(where)
                consumer.pause([_tp(message)])
                notices.info(f"Reached stop timestamp for topic {where[0]} [{where[1]}] at offset "
                             f"{message.offset()}" + (": exiting" if state.all_done() else ""))
                if state.all_done():
                    return OK
                continue
            writer.write(message)
            state.next_offsets[where] = message.offset() + 1
            state.count += 1
            if args.count is not None and state.count >= args.count:
                return OK


def _tp(message: Any) -> Any:
    from kqactors import TopicPartition

    return TopicPartition(message.topic(), message.partition())


def _offsets(args: argparse.Namespace) -> tuple[OffsetSpec, int | None]:
    """(where to start, the e@ stop timestamp or None) from the -o options."""
    start = OffsetSpec("beginning")
    stop: int | None = None
    for text in args.offsets:
        spec = parse_offset(text)
        if spec.kind == "end_ts":
            stop = spec.value
        else:
            start = spec
    return start, stop


def _partitions(metadata: Any, topic: str, partition: int | None) -> list[int]:
    meta = metadata.topics.get(topic)
    if meta is None or (meta.error is not None and not meta.partitions):
        reason = meta.error.str() if meta is not None else "not in the metadata"
        raise KafkaException(KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART,
                                        f"Failed to query metadata for topic {topic}: {reason}"))
    if partition is None:
        return sorted(meta.partitions)
    if partition not in meta.partitions:
        raise KafkaException(KafkaError(KafkaError._UNKNOWN_PARTITION,
                                        f"Topic {topic} has no partition {partition}"))
    return [partition]


def _start_offset(consumer: Any, args: argparse.Namespace, spec: OffsetSpec, partition: int) -> int:
    from kqactors import OFFSET_BEGINNING, OFFSET_END, OFFSET_STORED, TopicPartition

    topic = args.topics[0]
    if spec.kind == "beginning":
        return OFFSET_BEGINNING
    if spec.kind == "end":
        return OFFSET_END
    if spec.kind == "stored":
        return OFFSET_STORED
    if spec.kind == "absolute":
        return spec.value
    if spec.kind == "tail":
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=args.metadata_timeout)
        return max(low, high - spec.value)
    found = consumer.offsets_for_times([TopicPartition(topic, partition, spec.value)],
                                       timeout=args.metadata_timeout)[0]
    if found.error is not None:
        raise KafkaException(found.error)
    return found.offset if found.offset >= 0 else OFFSET_END


# ---- metadata (-L) and query (-Q) ------------------------------------------------------------------------
def _origin(config: dict[str, str]) -> tuple[int, str]:
    """Which broker answered: kqactors does not say, so (-1, "<first bootstrap>/bootstrap") as kcat's JSON
    names a bootstrap connection."""
    servers = config.get("bootstrap.servers") or config.get("metadata.broker.list") or ""
    return -1, f"{servers.split(',')[0].strip()}/bootstrap"


def _list(args: argparse.Namespace, config: dict[str, str], stdout: BinaryIO, notices: _Notices) -> int:
    from kqactors.admin import AdminClient

    topic = args.topics[0] if args.topics else None
    with AdminClient(config) as admin:
        metadata = admin.list_topics(topic, timeout=args.metadata_timeout)
    render = metadata_json if args.json else metadata_text
    stdout.write(render(metadata, topic, _origin(config)).encode())
    stdout.flush()
    return OK


def _query(args: argparse.Namespace, config: dict[str, str], stdout: BinaryIO, notices: _Notices) -> int:
    from kqactors import Consumer, TopicPartition

    wanted = [parse_query(text) for text in args.topics]
    seen = set()
    for topic, partition, _ts in wanted:
        if (topic, partition) in seen:
            raise CatUsageError(f"partition {topic} [{partition}] given twice")
        seen.add((topic, partition))
    consumer = Consumer({**config, "group.id": config.get("group.id", "kqactors-cat")})
    try:
        results = consumer.offsets_for_times([TopicPartition(t, p, ts) for t, p, ts in wanted],
                                             timeout=args.metadata_timeout)
    finally:
        consumer.close()
    status = OK
    for tp in results:
        if tp.error is not None:
            stdout.write(f"{tp.topic} [{tp.partition}] error {tp.error.str()}\n".encode())
            status = FAILED
        else:
            stdout.write(f"{tp.topic} [{tp.partition}] offset {tp.offset}\n".encode())
    stdout.flush()
    return status


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m kqactors.cli.cat ...`` (the same as ``kqactors cat ...``)."""
    parser = argparse.ArgumentParser(prog="kqactors")
    add_parser(parser.add_subparsers(dest="command"))
    return run_cat(parser.parse_args(["cat", *(argv if argv is not None else sys.argv[1:])]))


if __name__ == "__main__":
    sys.exit(main())
