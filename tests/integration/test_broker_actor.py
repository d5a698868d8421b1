"""Integration: broker/N and main actors against real brokers (librdkafka mock cluster and Tansu).

The actors run on the in-process runtime transport driven by the test thread; the test plays the toppar
and app roles (XMIT_RESULT, LEADER, PID and BROKER_STATE ops arrive on the app's event queue).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from kqactors.errors import KafkaError
from kqactors.ops import client as ops
from kqactors.ops import producer as pops
from kqactors.records import build_batch
from kqactors.runtime.op import ActorError, Op
from kqactors.runtime.runtime import Runtime

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

BROKER = "kqactors.actors.broker.actor:BrokerActor"
MAIN = "kqactors.actors.main:MainActor"


def collect(rt: Runtime, want: Callable[[list[Op]], bool], timeout: float = 10.0) -> list[Op]:
    """Serve the app's event queue until `want(events)` holds; fail on timeout."""
    events: list[Op] = []
    deadline = time.monotonic() + timeout
    while not want(events):
        if time.monotonic() > deadline:
            pytest.fail(f"timed out; events so far: {[(e.type, e.payload) for e in events]}")
        rt.poll(0.05, events.append)
    return events


def of_type(events: list[Op], op_type: str) -> list[dict]:
    return [e.payload for e in events if e.type == op_type]


def batch_of(count: int, tag: bytes = b"v") -> bytes:
    now = int(time.time() * 1000)
    return bytes(build_batch([(now, b"k%d" % i, tag + b"%d" % i, None) for i in range(count)]))


def spawn_broker(rt: Runtime, node_id: int, host: str, port: int, **config) -> str:
    name = ops.broker_name(node_id)
    rt.spawn(name, BROKER, {"node_id": node_id, "host": host, "port": port, "owner": "app", "config": config})
    return name


def metadata(rt: Runtime, broker: str, topics, auto_create: bool = False) -> dict:
    reply = rt.request(broker, Op(ops.REQUEST, {"kind": "Metadata",
                                                "args": {"topics": topics, "allow_auto_create": auto_create}}),
                       timeout=15)
    assert reply.payload["error_code"] == 0, reply.payload
    return reply.payload["result"]


def test_metadata_and_one_produce_request_for_many_partitions(mock_cluster_factory):
    cluster = mock_cluster_factory(num_brokers=1)
    cluster.create_topic("multi", partition_cnt=6)
    with Runtime(transport="inproc") as rt:
        broker = spawn_broker(rt, 1, *cluster.broker_address(1))
        meta = metadata(rt, broker, ["multi"])
        assert [b[0] for b in meta["brokers"]] == [1]
        (topic,) = meta["topics"]
        assert topic[0] == "multi" and sorted(p[0] for p in topic[3]) == list(range(6))

        cluster.start_request_tracking()
        batches = {p: batch_of(p + 1, b"p%d-" % p) for p in range(6)}
        rt.send_many((broker, Op(pops.XMIT, pops.xmit_payload("multi", p, 100 + p, 7, p + 1, -1, 5000),
                                 frames=[batches[p]])) for p in range(6))
        events = collect(rt, lambda ev: len(of_type(ev, pops.XMIT_RESULT)) == 6)
        results = {r["partition"]: r for r in of_type(events, pops.XMIT_RESULT)}
        assert {p: (r["batch_id"], r["toppar_version"], r["error_code"], r["base_offset"])
                for p, r in results.items()} == {p: (100 + p, 7, 0, 0) for p in range(6)}
        produce_requests = [r for r in cluster.get_requests() if r.api_key == 0]
        assert len(produce_requests) == 1, "six partitions' batches should share one ProduceRequest"

        # the records really landed: a second batch to partition 5 starts after its 6 records
        rt.send(broker, Op(pops.XMIT, pops.xmit_payload("multi", 5, 200, 7, 2, -1, 5000), frames=[batch_of(2)]))
        (again,) = of_type(collect(rt, lambda ev: len(of_type(ev, pops.XMIT_RESULT)) == 1), pops.XMIT_RESULT)
        assert (again["batch_id"], again["error_code"], again["base_offset"]) == (200, 0, 6)


def test_batches_of_one_partition_keep_order_across_requests(mock_cluster_factory):
    cluster = mock_cluster_factory(num_brokers=1)
    cluster.create_topic("ordered", partition_cnt=1)
    with Runtime(transport="inproc") as rt:
        broker = spawn_broker(rt, 1, *cluster.broker_address(1), **{"max.in.flight.requests.per.connection": 2})
        rt.send_many((broker, Op(pops.XMIT, pops.xmit_payload("ordered", 0, i, 0, 2, -1, 5000),
                                 frames=[batch_of(2)])) for i in range(5))
        events = collect(rt, lambda ev: len(of_type(ev, pops.XMIT_RESULT)) == 5)
        results = of_type(events, pops.XMIT_RESULT)
        assert [(r["batch_id"], r["error_code"]) for r in results] == [(i, 0) for i in range(5)]
        assert [r["base_offset"] for r in results] == [0, 2, 4, 6, 8]


def test_acks_zero_completes_when_written(mock_cluster_factory):
    cluster = mock_cluster_factory(num_brokers=1)
    cluster.create_topic("acks0", partition_cnt=1)
    with Runtime(transport="inproc") as rt:
        broker = spawn_broker(rt, 1, *cluster.broker_address(1))
        rt.send(broker, Op(pops.XMIT, pops.xmit_payload("acks0", 0, 1, 0, 1, 0, 5000), frames=[batch_of(1)]))
        (result,) = of_type(collect(rt, lambda ev: of_type(ev, pops.XMIT_RESULT)), pops.XMIT_RESULT)
        assert result["error_code"] == 0 and result["base_offset"] == -1


def test_bad_requests_get_clear_errors(mock_cluster_factory):
    cluster = mock_cluster_factory(num_brokers=1)
    with Runtime(transport="inproc") as rt:
        broker = spawn_broker(rt, 1, *cluster.broker_address(1))
        reply = rt.request(broker, Op(ops.REQUEST, {"kind": "NoSuchApi"}), timeout=5)
        assert reply.payload["error_code"] == KafkaError._INVALID_ARG and "NoSuchApi" in reply.payload["reason"]
        rt.send(broker, Op(pops.XMIT, {"topic": "x", "partition": 0, "batch_id": 9}))  # no batch frame
        (result,) = of_type(collect(rt, lambda ev: of_type(ev, pops.XMIT_RESULT)), pops.XMIT_RESULT)
        assert result["error_code"] == KafkaError._INVALID_ARG and result["batch_id"] == 9
        with pytest.raises(ActorError, match="bootstrap.servers"):
            rt.spawn("main", MAIN, {"config": {"bootstrap.servers": "host:notaport"}})


def test_broker_actor_against_tansu(tansu, unique_topic):
    with Runtime(transport="inproc") as rt:
        broker = spawn_broker(rt, -1, "127.0.0.1", tansu.port)
        meta = metadata(rt, broker, [unique_topic], auto_create=True)
        (topic,) = meta["topics"]
        assert topic[0] == unique_topic and topic[1] == 0 and topic[3]
        payloads = [batch_of(3, b"tansu-%d-" % i) for i in range(3)]
        rt.send_many((broker, Op(pops.XMIT, pops.xmit_payload(unique_topic, 0, i, 0, 3, -1, 5000), frames=[b]))
                     for i, b in enumerate(payloads))
        events = collect(rt, lambda ev: len(of_type(ev, pops.XMIT_RESULT)) == 3)
        assert [(r["error_code"], r["base_offset"]) for r in of_type(events, pops.XMIT_RESULT)] == \
            [(0, 0), (0, 3), (0, 6)]
        reply = rt.request(broker, Op(ops.REQUEST, {"kind": "InitProducerId", "args": {}}), timeout=10)
        assert reply.payload["error_code"] == 0 and reply.payload["result"]["producer_id"] >= 0


def test_main_bootstraps_routes_leaders_and_gets_a_pid(mock_cluster_factory):
    cluster = mock_cluster_factory(num_brokers=3)
    cluster.create_topic("routed", partition_cnt=3)
    config = {"bootstrap.servers": cluster.bootstrap, "enable.idempotence": True,
              "topic.metadata.refresh.interval.ms": 60000}
    with Runtime(transport="inproc") as rt:
        rt.spawn("main", MAIN, {"config": config})
        reply = rt.request("main", Op(ops.METADATA, {"topics": ["routed"]}), timeout=15)
        assert reply.payload["error_code"] == 0
        assert sorted(b[0] for b in reply.payload["metadata"]["brokers"]) == [1, 2, 3]
        leaders = {p[0]: p[1] for p in reply.payload["metadata"]["topics"][0][3]}

        joined = rt.request("main", Op(pops.TOPPAR_JOIN, {"topic": "routed", "partition": 0, "name": "app"}),
                            timeout=10)
        assert joined.payload["broker_id"] == leaders[0]
        events = collect(rt, lambda ev: of_type(ev, pops.PID) or joined.payload["producer_id"] >= 0)
        pid = (of_type(events, pops.PID) or [joined.payload])[0]
        assert pid["producer_id"] >= 0

        new_leader = leaders[0] % 3 + 1
        cluster.partition_set_leader("routed", 0, new_leader)
        rt.send("main", Op(ops.METADATA_REFRESH, ops.metadata_refresh_payload("routed", "NOT_LEADER")))
        events = collect(rt, lambda ev: of_type(ev, pops.LEADER))
        (leader,) = of_type(events, pops.LEADER)
        assert (leader["topic"], leader["partition"], leader["broker_id"]) == ("routed", 0, new_leader)
        assert leader["leader_epoch"] > joined.payload["leader_epoch"]


def test_main_reports_new_topic_partition_counts_from_tansu(tansu, unique_topic):
    with Runtime(transport="inproc") as rt:
        rt.spawn("main", MAIN, {"config": {"bootstrap.servers": tansu.bootstrap}})
        reply = rt.request("main", Op(ops.METADATA, {"topics": [unique_topic], "allow_auto_create": True}),
                           timeout=15)
        assert reply.payload["error_code"] == 0
        (topic,) = reply.payload["metadata"]["topics"]
        events = collect(rt, lambda ev: of_type(ev, ops.TOPIC_PARTITIONS))
        counts = of_type(events, ops.TOPIC_PARTITIONS)
        assert counts[-1] == ops.topic_partitions_payload(unique_topic, len(topic[3]), 0)
