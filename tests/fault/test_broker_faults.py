"""Fault injection on the librdkafka mock cluster against broker/N: broker down/up, in-flight failure on
disconnect, injected request errors, RTT beyond the request timeout, ApiVersions downgrade, leader moves.

Every XMIT must get exactly one XMIT_RESULT, whatever happens to the connection.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from kqactors.errors import KafkaError
from kqactors.ops import client as ops
from kqactors.ops import producer as pops
from kqactors.records import build_batch
from kqactors.runtime.op import Op
from kqactors.runtime.runtime import Runtime

pytestmark = [pytest.mark.fault, pytest.mark.timeout(120), pytest.mark.fresh_cluster(num_brokers=1, topics={"f": 2})]

BROKER = "kqactors.actors.broker.actor:BrokerActor"
FAST = {"reconnect.backoff.ms": 50, "reconnect.backoff.max.ms": 200, "socket.timeout.ms": 3000}


def collect(rt: Runtime, want: Callable[[list[Op]], bool], timeout: float = 10.0,
            events: list[Op] | None = None) -> list[Op]:
    events = [] if events is None else events
    deadline = time.monotonic() + timeout
    while not want(events):
        if time.monotonic() > deadline:
            pytest.fail(f"timed out; events so far: {[(e.type, e.payload) for e in events]}")
        rt.poll(0.05, events.append)
    return events


def of_type(events: list[Op], op_type: str) -> list[dict]:
    return [e.payload for e in events if e.type == op_type]


def states(events: list[Op]) -> list[str]:
    return [p["state"] for p in of_type(events, ops.BROKER_STATE)]


def xmit(batch_id: int, topic: str = "f", partition: int = 0, count: int = 1, deadline_ms: int | None = None) -> Op:
    now = int(time.time() * 1000)
    batch = bytes(build_batch([(now, None, b"m%d" % i, None) for i in range(count)]))
    return Op(pops.XMIT, pops.xmit_payload(topic, partition, batch_id, 0, count, -1, 5000, deadline_ms),
              frames=[batch])


def start_broker(rt: Runtime, cluster, **config) -> str:
    host, port = cluster.broker_address(1)
    rt.spawn("broker/1", BROKER, {"node_id": 1, "host": host, "port": port, "owner": "app",
                                  "config": {**FAST, **config}})
    collect(rt, lambda ev: "UP" in states(ev))
    return "broker/1"


def test_broker_down_fails_with_transport_then_reconnects_with_backoff(fresh_cluster):
    with Runtime(transport="inproc") as rt:
        broker = start_broker(rt, fresh_cluster)
        rt.send(broker, xmit(1))
        (first,) = of_type(collect(rt, lambda ev: of_type(ev, pops.XMIT_RESULT)), pops.XMIT_RESULT)
        assert first["error_code"] == 0

        fresh_cluster.broker_set_down(1)
        events = collect(rt, lambda ev: "DOWN" in states(ev))
        rt.send(broker, xmit(2))
        collect(rt, lambda ev: of_type(ev, pops.XMIT_RESULT), events=events)
        (failed,) = of_type(events, pops.XMIT_RESULT)
        assert failed["batch_id"] == 2 and failed["error_code"] == KafkaError._TRANSPORT
        assert failed["sent"] is False  # never left the client: a retry cannot duplicate it
        collect(rt, lambda ev: states(ev).count("CONNECT") >= 3, events=events)  # keeps trying

        fresh_cluster.broker_set_up(1)
        collect(rt, lambda ev: "UP" in states(ev))
        rt.send(broker, xmit(3))
        (ok,) = of_type(collect(rt, lambda ev: of_type(ev, pops.XMIT_RESULT)), pops.XMIT_RESULT)
        assert (ok["batch_id"], ok["error_code"], ok["base_offset"]) == (3, 0, 1)


def test_in_flight_batches_fail_back_exactly_once_on_disconnect(fresh_cluster):
    with Runtime(transport="inproc") as rt:
        broker = start_broker(rt, fresh_cluster)
        fresh_cluster.broker_set_rtt(1, 2000)
        rt.send_many((broker, xmit(i, partition=i % 2)) for i in range(4))
        rt.poll(0.3)  # let the requests go out and sit in flight
        fresh_cluster.broker_set_down(1)
        events = collect(rt, lambda ev: len(of_type(ev, pops.XMIT_RESULT)) >= 4)
        rt.poll(0.5, events.append)  # nothing more may arrive
        results = of_type(events, pops.XMIT_RESULT)
        assert sorted(r["batch_id"] for r in results) == [0, 1, 2, 3]
        assert {r["error_code"] for r in results} == {KafkaError._TRANSPORT}
        assert not any("sent" in r for r in results)  # they were on the wire: possibly persisted


def test_injected_produce_errors_reach_the_toppar(fresh_cluster):
    with Runtime(transport="inproc") as rt:
        broker = start_broker(rt, fresh_cluster)
        fresh_cluster.push_request_errors(0, ["NOT_LEADER_FOR_PARTITION", "REQUEST_TIMED_OUT"])
        codes = []
        for batch_id in range(3):
            rt.send(broker, xmit(batch_id))
            (result,) = of_type(collect(rt, lambda ev: of_type(ev, pops.XMIT_RESULT)), pops.XMIT_RESULT)
            codes.append((result["batch_id"], result["error_code"]))
        assert codes == [(0, KafkaError.NOT_LEADER_FOR_PARTITION), (1, KafkaError.REQUEST_TIMED_OUT), (2, 0)]


def test_rtt_beyond_socket_timeout_times_out_then_recovers(fresh_cluster):
    with Runtime(transport="inproc") as rt:
        broker = start_broker(rt, fresh_cluster, **{"socket.timeout.ms": 400})
        fresh_cluster.broker_set_rtt(1, 1500)
        rt.send(broker, xmit(1))
        rt.send(broker, xmit(2))
        events = collect(rt, lambda ev: len(of_type(ev, pops.XMIT_RESULT)) == 2)
        codes = {r["batch_id"]: r["error_code"] for r in of_type(events, pops.XMIT_RESULT)}
        # the first to time out tears the connection down; the other, still in flight, fails with it
        assert sorted(codes.values()) == sorted([KafkaError._TIMED_OUT, KafkaError._TRANSPORT]) or \
            set(codes.values()) == {KafkaError._TIMED_OUT}
        assert "DOWN" in states(events)

        # message.timeout.ms expiring first is reported as _MSG_TIMED_OUT
        collect(rt, lambda ev: "UP" in states(ev))
        rt.send(broker, xmit(3, deadline_ms=int(time.time() * 1000) + 150))
        (expired,) = of_type(collect(rt, lambda ev: of_type(ev, pops.XMIT_RESULT)), pops.XMIT_RESULT)
        assert expired["error_code"] == KafkaError._MSG_TIMED_OUT

        fresh_cluster.broker_set_rtt(1, 0)
        collect(rt, lambda ev: "UP" in states(ev))
        rt.send(broker, xmit(4))
        (ok,) = of_type(collect(rt, lambda ev: of_type(ev, pops.XMIT_RESULT)), pops.XMIT_RESULT)
        assert ok["error_code"] == 0


def test_api_versions_downgrade_to_v0(fresh_cluster):
    fresh_cluster.set_apiversion(18, 0, 2)  # the broker now refuses ApiVersions v3
    fresh_cluster.start_request_tracking()
    with Runtime(transport="inproc") as rt:
        broker = start_broker(rt, fresh_cluster)
        api_versions = [r for r in fresh_cluster.get_requests() if r.api_key == 18]
        assert len(api_versions) == 2, "v3 refused, then v0 accepted"
        rt.send(broker, xmit(1))
        (ok,) = of_type(collect(rt, lambda ev: of_type(ev, pops.XMIT_RESULT)), pops.XMIT_RESULT)
        assert ok["error_code"] == 0


def test_unreachable_broker_fails_requests_and_keeps_backing_off():
    import socket

    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with Runtime(transport="inproc") as rt:
        rt.spawn("broker/9", BROKER, {"node_id": 9, "host": "127.0.0.1", "port": port, "owner": "app",
                                      "config": FAST})
        reply = rt.request("broker/9", Op(ops.REQUEST, {"kind": "Metadata", "args": {"topics": None}}), timeout=10)
        assert reply.payload["error_code"] == KafkaError._TRANSPORT
        events: list[Op] = []
        deadline = time.monotonic() + 0.8
        while time.monotonic() < deadline:
            rt.poll(0.05, events.append)
        # backoff 50 → 100 → 200 ms (±jitter): a handful of attempts, not a busy loop
        assert 3 <= states(events).count("CONNECT") <= 9
        assert "UP" not in states(events)


@pytest.mark.fresh_cluster(num_brokers=3, topics={"survive": 3})
def test_producer_survives_broker_down_rtt_and_leader_move(fresh_cluster):
    """Whole producer path (app → toppar → broker/N, main routing): every message gets exactly one
    successful report and each partition's offsets follow production order. (The mock cluster itself may
    append a retried batch twice — librdkafka's own producer shows the same — so the log is not checked.)"""
    from kqactors import Producer

    producer = Producer({"bootstrap.servers": fresh_cluster.bootstrap, "enable.idempotence": True, "linger.ms": 5,
                         "reconnect.backoff.ms": 50, "reconnect.backoff.max.ms": 500})
    reports: dict[int, list] = {}
    try:
        for round_no in range(30):
            for i in range(100):
                n = round_no * 100 + i
                producer.produce("survive", value=b"%d" % n, partition=n % 3,
                                 on_delivery=lambda err, msg, n=n: reports.setdefault(n, []).append(
                                     (err, msg.partition(), msg.offset())))
            producer.poll(0.05)
            if round_no == 8:
                fresh_cluster.broker_set_rtt(1, 300)
            elif round_no == 10:
                fresh_cluster.broker_set_down(1)
            elif round_no == 16:
                fresh_cluster.partition_set_leader("survive", 0, 2)
            elif round_no == 22:
                fresh_cluster.broker_set_rtt(1, 0)
                fresh_cluster.broker_set_up(1)
        assert producer.flush(30) == 0
    finally:
        producer.close()
    assert sorted(reports) == list(range(3000))
    assert all(len(r) == 1 and r[0][0] is None for r in reports.values()), "exactly one successful DR each"
    for partition in range(3):
        offsets = [reports[n][0][2] for n in range(partition, 3000, 3)]
        assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets)


def test_stopping_a_broker_mid_handshake_answers_everything_as_a_lost_connection():
    """main retires brokers while the client lives on: what they held must come back retriable."""
    import socket

    with socket.socket() as silent:  # accepts connections (backlog) but never answers ApiVersions
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        port = silent.getsockname()[1]
        with Runtime(transport="inproc") as rt:
            rt.spawn("broker/5", BROKER, {"node_id": 5, "host": "127.0.0.1", "port": port, "owner": "app",
                                          "config": FAST})
            collect(rt, lambda ev: "APIVERSION_QUERY" in states(ev))
            replies = rt.new_queue()
            rt.request_async("broker/5", Op(ops.REQUEST, {"kind": "Metadata", "args": {"topics": None}}),
                             replies, timeout=10)
            rt.send("broker/5", xmit(1))
            rt.poll(0.1)
            rt.stop("broker/5")
            reply = replies.poll(5)
            assert reply is not None and reply.payload["error_code"] == KafkaError._TRANSPORT
            (result,) = of_type(collect(rt, lambda ev: of_type(ev, pops.XMIT_RESULT)), pops.XMIT_RESULT)
            assert result["error_code"] == KafkaError._TRANSPORT
