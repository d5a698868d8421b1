"""``kqactors topics|groups|cluster`` and ``kqactors perf consume`` against a real Tansu broker.

Runs in: the pytest process; the commands run in it through their handlers (their clients spawn host
processes). What the commands did is checked independently with confluent-kafka's AdminClient / Consumer.
"""

from __future__ import annotations

import argparse
import io
import json

import pytest
from support.waiting import wait_until

from kqactors.cli import main as cli_main

ck = pytest.importorskip("confluent_kafka", reason="confluent-kafka checks what the commands did")
ck_admin = pytest.importorskip("confluent_kafka.admin")

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def run(*argv: str) -> tuple[int, str, str]:
    """Parse ``kqactors ARGV`` with the real parser and run its handler; (status, stdout, stderr)."""
    options: argparse.Namespace = cli_main.build_parser().parse_args(list(argv))
    out, err = io.StringIO(), io.StringIO()
    status = options.handler(options, stdout=out, stderr=err)
    return status, out.getvalue(), err.getvalue()


def test_topic_lifecycle_as_confluent_kafka_sees_it(tansu, unique_topic):
    peer = ck_admin.AdminClient({"bootstrap.servers": tansu.bootstrap})
    b = ["-b", tansu.bootstrap]
    status, out, err = run("topics", "create", *b, unique_topic, "-p", "3", "-c", "retention.ms=60000")
    assert status == 0, err
    assert out.strip() == f"created topic {unique_topic}"
    assert len(peer.list_topics(unique_topic, timeout=10).topics[unique_topic].partitions) == 3
    status, _out, err = run("topics", "create", *b, unique_topic, "-p", "3")
    assert status == 1 and "TOPIC_ALREADY_EXISTS" in err

    status, out, _err = run("topics", "list", *b, "--json")
    listed = {t["topic"]: t for t in json.loads(out)}
    assert status == 0 and listed[unique_topic]["partitions"] == 3
    status, out, _err = run("topics", "list", *b)
    assert any(line.split()[:2] == [unique_topic, "3"] for line in out.splitlines())

    assert run("topics", "alter-config", *b, unique_topic, "--set", "retention.ms=123456")[0] == 0
    resource = ck_admin.ConfigResource("topic", unique_topic)
    configs = peer.describe_configs([resource])[resource].result(15)
    assert configs["retention.ms"].value == "123456"
    status, out, _err = run("topics", "describe", *b, unique_topic, "--configs", "--json")
    described = json.loads(out)[0]
    assert status == 0 and described["configs"]["retention.ms"] == "123456"
    assert [p["partition"] for p in described["partitions"]] == [0, 1, 2]
    theirs = peer.describe_topics(ck.TopicCollection([unique_topic]))[unique_topic].result(15)
    assert [p["leader"] for p in described["partitions"]] == [p.leader.id for p in theirs.partitions]

    status, _out, err = run("topics", "describe", *b, unique_topic + "-none")
    assert status == 1 and "UNKNOWN_TOPIC_OR_PART" in err
    assert run("topics", "delete", *b, unique_topic)[0] == 0
    wait_until(lambda: unique_topic not in peer.list_topics(timeout=10).topics, 15, "the topic to be deleted")


def test_groups_and_cluster(tansu, unique_topic):
    group = f"g-{unique_topic}"
    peer = ck_admin.AdminClient({"bootstrap.servers": tansu.bootstrap})
    peer.create_topics([ck_admin.NewTopic(unique_topic, 2)])[unique_topic].result(15)
    producer = ck.Producer({"bootstrap.servers": tansu.bootstrap})
    producer.produce(unique_topic, b"x", partition=0)
    producer.flush(15)
    altered = peer.alter_consumer_group_offsets([ck.ConsumerGroupTopicPartitions(group, [
        ck.TopicPartition(unique_topic, 0, 1), ck.TopicPartition(unique_topic, 1, 0)])])
    altered[group].result(15)
    b = ["-b", tansu.bootstrap]

    status, out, _err = run("groups", "list", *b, "--json")
    assert status == 0 and group in {g["group"] for g in json.loads(out)}
    status, out, _err = run("groups", "offsets", *b, group, "--json")
    rows = {(r["topic"], r["partition"]): r for r in json.loads(out)}
    assert status == 0 and rows[(unique_topic, 0)]["committed"] == 1 and rows[(unique_topic, 1)]["committed"] == 0
    assert rows[(unique_topic, 0)]["end"] == 1 and rows[(unique_topic, 0)]["lag"] == 0
    status, out, _err = run("groups", "describe", *b, group)
    assert status == 0 and out.startswith(f"group {group}  state ")
    assert run("groups", "delete", *b, group)[0] == 0
    wait_until(lambda: group not in {g.group_id for g in peer.list_consumer_groups().result(15).valid}, 15,
               "the group to be deleted")

    status, out, _err = run("cluster", "describe", *b, "--json")
    theirs = peer.describe_cluster().result(15)
    doc = json.loads(out)
    assert status == 0 and doc["cluster_id"] == theirs.cluster_id and doc["controller"] == theirs.controller.id
    assert [n["id"] for n in doc["brokers"]] == sorted(n.id for n in theirs.nodes)


def test_admin_without_a_broker_is_a_usage_error():
    status, _out, err = run("topics", "list")
    assert status == 2 and "no broker" in err
    status, _out, err = run("topics", "alter-config", "-b", "127.0.0.1:1", "t")
    assert status == 2 and "--set" in err


def test_perf_consume_reads_what_it_seeded(tansu, unique_topic, capsys):
    from kqactors.cli.perf_consume import run_consume

    args = cli_main.build_parser().parse_args(
        ["perf", "consume", "-b", tansu.bootstrap, "-t", unique_topic, "--seed", "-c", "3000", "-s", "64",
         "-p", "2", "--json"])
    assert run_consume(args) == 0
    out, err = capsys.readouterr()
    summary = json.loads(out)
    assert summary["received"] == 3000 and summary["bytes"] == 3000 * 64 and summary["errors"] == {}
    assert summary["msgs_per_s"] > 0 and not summary["embedded_broker"]
    assert "seeded 3000/3000" in err
    # A second run without --seed reads the same messages again (from the start), here with confluent-kafka's
    # Consumer through the same loop; asking for more than there is ends at --idle-timeout with status 1.
    args = cli_main.build_parser().parse_args(
        ["perf", "consume", "-b", tansu.bootstrap, "-t", unique_topic, "-c", "3001", "--idle-timeout", "2", "-q"])
    assert run_consume(args, consumer_factory=ck.Consumer, topic_partition=ck.TopicPartition) == 1
    assert "3000/3001 messages" in capsys.readouterr().out
