"""kcat's text shapes (kqactors/cli/cat_format.py) and the cat command's option handling, without a broker.

Runs in: the pytest process. Messages are kqactors.Message objects built directly.
"""

from __future__ import annotations

import argparse
import io
import json
import struct

import pytest

from kqactors.cli import cat
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
from kqactors.client.handle.metadata import BrokerMetadata, ClusterMetadata, PartitionMetadata, TopicMetadata
from kqactors.errors import KafkaError
from kqactors.message import TIMESTAMP_CREATE_TIME, TIMESTAMP_NOT_AVAILABLE, Message


def message(value=b"v", key=b"k", headers=None, ts=(TIMESTAMP_CREATE_TIME, 1700000000123), offset=7,
            partition=2, topic="t") -> Message:
    return Message(topic=topic, partition=partition, offset=offset, key=key, value=value, headers=headers,
                   timestamp=ts)


def test_unescape_knows_kcats_escapes():
    assert unescape("\\n") == b"\n" and unescape("\\t|\\r") == b"\t|\r"
    assert unescape("\\x41\\x7e") == b"A~"
    assert unescape("\\065") == bytes([0o65]) and unescape("\\65") == b"A"
    assert unescape("a\\qb") == b"aqb" and unescape("end\\") == b"end\\"
    assert unescape("é") == "é".encode()


def test_format_tokens_render_like_kcat():
    fmt = compile_format("%t|%p|%o|%k|%s|%K|%S|%T|%h|%%\\n")
    rendered = fmt.render(message(headers=[("a", b"1"), ("b", None)]))
    assert rendered == b"t|2|7|k|v|1|1|1700000000123|a=1,b=NULL|%\n"
    assert compile_format("%K/%S/%k/%s").render(message(key=None, value=None)) == b"-1/-1//"
    assert compile_format("%k/%s", b"NULL").render(message(key=None, value=None)) == b"NULL/NULL"
    assert compile_format("%R%s").render(message(value=b"abc")) == struct.pack(">i", 3) + b"abc"
    assert compile_format("%R").render(message(value=None)) == struct.pack(">i", -1)
    assert compile_format("%T").render(message(ts=(TIMESTAMP_NOT_AVAILABLE, 0))) == b"-1"
    assert compile_format("%s").render(message(value=b"\x00\xff")) == b"\x00\xff"  # bytes pass untouched


def test_bad_format_strings_are_usage_errors():
    with pytest.raises(CatUsageError, match="Unsupported formatter: %Y"):
        compile_format("%Y")
    with pytest.raises(CatUsageError, match="Empty formatter"):
        compile_format("abc%")


def test_default_output_is_key_delim_value_delim():
    m = message()
    assert default_format(None, b"\n", False).render(m) == b"v\n"
    assert default_format(b"#", b"\n", False).render(m) == b"k#v\n"
    assert default_format(b"#", b"|", True).render(m) == b"7#k#v|"
    assert default_format(b"#", b"\n", False).render(message(key=None)) == b"#v\n"


def test_json_envelope_has_kcats_fields():
    doc = json.loads(json_envelope(message(headers=[("h", b"x"), ("n", None)]), broker=111))
    assert doc == {"topic": "t", "partition": 2, "offset": 7, "tstype": "create", "ts": 1700000000123,
                   "broker": 111, "headers": ["h", "x", "n", None], "key": "k", "payload": "v"}
    plain = json.loads(json_envelope(message(key=None, value=None, ts=(TIMESTAMP_NOT_AVAILABLE, 0)), broker=-1))
    assert "headers" not in plain and plain["key"] is None and plain["payload"] is None
    assert plain["tstype"] == "unknown" and plain["ts"] == -1
    assert list(plain) == ["topic", "partition", "offset", "tstype", "ts", "broker", "key", "payload"]


def test_offsets_and_queries_parse_like_kcat():
    assert parse_offset("beginning") == OffsetSpec("beginning")
    assert parse_offset("42") == OffsetSpec("absolute", 42)
    assert parse_offset("-3") == OffsetSpec("tail", 3)
    assert parse_offset("s@1700") == OffsetSpec("start_ts", 1700)
    assert parse_offset("e@1800") == OffsetSpec("end_ts", 1800)
    for bad in ("bogus", "s@x", ""):
        with pytest.raises(CatUsageError):
            parse_offset(bad)
    assert parse_query("my:topic:3:1700") == ("my:topic", 3, 1700)
    for bad in ("topic", "t:x:1", ":0:1"):
        with pytest.raises(CatUsageError):
            parse_query(bad)
    assert parse_header("a=b=c") == ("a", b"b=c") and parse_header("flag") == ("flag", None)
    with pytest.raises(CatUsageError):
        parse_header("=v")


def cluster() -> ClusterMetadata:
    md = ClusterMetadata()
    md.controller_id = 2
    md.brokers = {1: BrokerMetadata(1, "h1", 9092), 2: BrokerMetadata(2, "h2", 9093)}
    md.topics = {
        "b": TopicMetadata("b", {0: PartitionMetadata(0, 1, [1, 2], [1], None)}, None),
        "a": TopicMetadata("a", {1: PartitionMetadata(1, 2, [2], [2], KafkaError(KafkaError.LEADER_NOT_AVAILABLE)),
                                 0: PartitionMetadata(0, 1, [1], [1], None)}, None),
    }
    return md


def test_metadata_text_layout():
    text = metadata_text(cluster(), None, (-1, "h1:9092/bootstrap"))
    lines = text.splitlines()
    assert lines[0] == "Metadata for all topics (from broker -1: h1:9092/bootstrap):"
    assert lines[1:4] == [" 2 brokers:", "  broker 1 at h1:9092", "  broker 2 at h2:9093 (controller)"]
    assert lines[4:6] == [" 2 topics:", '  topic "a" with 2 partitions:']
    assert lines[6] == "    partition 0, leader 1, replicas: 1, isrs: 1"
    assert lines[7].startswith("    partition 1, leader 2, replicas: 2, isrs: 2, ")
    assert lines[-1] == "    partition 0, leader 1, replicas: 1,2, isrs: 1"
    only_b = metadata_text(cluster(), "b", (-1, "x")).splitlines()
    assert only_b[0].startswith("Metadata for b ") and " 1 topics:" in only_b


def test_metadata_json_layout():
    doc = json.loads(metadata_json(cluster(), "a", (-1, "h1:9092/bootstrap")))
    assert doc["query"] == {"topic": "a"} and doc["controllerid"] == 2
    assert doc["brokers"] == [{"id": 1, "name": "h1:9092"}, {"id": 2, "name": "h2:9093"}]
    assert [t["topic"] for t in doc["topics"]] == ["a"]
    parts = doc["topics"][0]["partitions"]
    assert parts[0] == {"partition": 0, "leader": 1, "replicas": [{"id": 1}], "isrs": [{"id": 1}]}
    assert "error" in parts[1]


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    cat.add_parser(parser.add_subparsers(dest="command"))
    return parser.parse_args(["cat", *argv])


def test_split_messages_follows_kcat():
    assert list(cat.split_messages(io.BytesIO(b"a\n\nb\nc"), b"\n")) == [b"a", b"b", b"c"]
    assert list(cat.split_messages(io.BytesIO(b"x||y||"), b"||", chunk=1)) == [b"x", b"y"]
    assert list(cat.split_messages(io.BytesIO(b""), b"\n")) == []


def test_config_layers_and_negative_values(tmp_path):
    conf = tmp_path / "c.conf"
    conf.write_text("# comment\nclient.id=from-file\nlinger.ms=5\n")
    args = parse("-C", "-t", "t", "-o", "-2", "-p", "-1", "-F", str(conf), "-X", "linger.ms=7",
                 "-X", "topic.acks=all", "-b", "h:1", "-d", "broker")
    assert args.offsets == ["-2"] and args.partition == -1
    config = cat.build_config(args)
    assert config["client.id"] == "from-file" and config["linger.ms"] == "7" and config["acks"] == "all"
    assert config["bootstrap.servers"] == "h:1" and config["debug"] == "broker"
    with pytest.raises(CatUsageError):
        cat.build_config(parse("-C", "-X", "novalue"))


@pytest.mark.parametrize("argv, reason", [
    (["-C", "-t", "t"], "-b <broker,..> missing"),
    (["-b", "h:1", "-t", "t"], "-C, -P, -L, -Q or -G required"),
    (["-b", "h:1", "-C"], "-t <topic> missing"),
    (["-b", "h:1", "-G", "g"], "-G requires one or more topics"),
    (["-b", "h:1", "-Q"], "-Q requires"),
])
def test_usage_errors_exit_1_without_touching_a_broker(argv, reason):
    err = io.StringIO()
    assert cat.run_cat(parse(*argv), stdin=io.BytesIO(), stdout=io.BytesIO(), stderr=err) == 1
    assert reason in err.getvalue()


def test_argparse_errors_exit_1_like_kcat(capsys):
    with pytest.raises(SystemExit) as exc:
        parse("-C", "-c", "notanumber")
    assert exc.value.code == 1


def test_x_list_and_dump():
    out = io.BytesIO()
    assert cat.run_cat(parse("-X", "list"), stdout=out, stderr=io.StringIO()) == 0
    listing = out.getvalue().decode()
    assert "metadata.broker.list" in listing and "bootstrap.servers" in listing
    out = io.BytesIO()
    assert cat.run_cat(parse("-X", "dump", "-X", "client.id=me", "-b", "h:1"), stdout=out,
                       stderr=io.StringIO()) == 0
    assert "client.id = me" in out.getvalue().decode()


def test_transactions_are_refused_not_ignored():
    err = io.StringIO()
    args = parse("-b", "h:1", "-P", "-t", "t", "-X", "transactional.id=x")
    assert cat.run_cat(args, stdin=io.BytesIO(b"a\n"), stdout=io.BytesIO(), stderr=err) == 1
    assert "transactions" in err.getvalue()


def test_debug_records_go_to_stderr_in_kcats_shape():
    err = io.StringIO()
    logger = cat._stderr_logger(err)  # noqa: SLF001 - the -d logger the clients get
    logger.log(10, "%s [%s] %s", "BROKER", "rdkafka#consumer-1", "connecting")
    assert err.getvalue().startswith("%7|") and err.getvalue().endswith("|BROKER [rdkafka#consumer-1] connecting\n")
