"""The statistics JSON's pure parts: window summaries, the main host's assembly, the app's completion."""

from __future__ import annotations

import json

from kqactors.core.stats import (
    ConnectionCounters,
    LatencyWindow,
    StatsEmitter,
    assemble,
    broker_stats,
    complete_in_app,
)


def test_a_window_summarises_its_interval_and_starts_again_empty() -> None:
    window = LatencyWindow()
    for value in range(1, 101):  # 1..100
        window.add(value)
    summary = window.snapshot()
    assert (summary["min"], summary["max"], summary["cnt"], summary["sum"], summary["avg"]) == (1, 100, 100, 5050, 50)
    assert (summary["p50"], summary["p90"], summary["p99"], summary["p99_99"]) == (50, 90, 99, 100)
    assert summary["stddev"] == 28  # population standard deviation of 1..100 is 28.87
    assert window.snapshot()["cnt"] == 0


def test_a_window_turned_off_keeps_nothing() -> None:
    """Without statistics nobody snapshots a connection's round trips: they must not pile up for its life."""
    window = LatencyWindow(enabled=False)
    for value in range(1000):
        window.add(value)
    assert window.snapshot()["cnt"] == 0
    window.enabled = True
    window.add(7)
    assert window.snapshot()["cnt"] == 1


def test_broker_entries_and_totals_add_up() -> None:
    counters = ConnectionCounters()
    counters.sent("Produce", 100, now_us=1_000)
    counters.sent("Produce", 50, now_us=2_000)
    counters.received(20, rtt_us=700, now_us=3_000)
    entry = broker_stats("h:1/1", 1, "h:1", "learned", "UP", 500, counters, 0, 1, [("t", 0)], now_us=5_000)
    assert entry["req"] == {"Produce": 2} and entry["rtt"]["cnt"] == 1 and entry["rtt"]["max"] == 700
    assert (entry["stateage"], entry["txidle"], entry["rxidle"]) == (4_500, 3_000, 2_000)
    assert entry["toppars"] == {"t-0": {"topic": "t", "partition": 0}}
    second = dict(entry, name="h:2/2", tx=1, txbytes=7, rx=1, rxbytes=9)
    parts = [{"topic": "t", "partition": 1, "txmsgs": 3, "txbytes": 30},
             {"topic": "t", "partition": 0, "txmsgs": 2, "txbytes": 20}]
    stats = assemble("producer", "", "cid", 0, [entry, second], parts, 1, now_us=10)
    assert (stats["tx"], stats["tx_bytes"], stats["rx"], stats["rx_bytes"]) == (3, 157, 2, 29)
    assert (stats["txmsgs"], stats["txmsg_bytes"]) == (5, 50)
    assert list(stats["topics"]["t"]["partitions"]) == ["0", "1"]
    assert set(stats["brokers"]) == {"h:1/1", "h:2/2"}


def test_the_app_adds_its_fields_and_lag_is_measured_to_the_right_end() -> None:
    parts = [{"topic": "t", "partition": 0, "hi_offset": 100, "ls_offset": 90, "_read_committed": True},
             {"topic": "t", "partition": 1, "hi_offset": 100, "ls_offset": 90, "_read_committed": False},
             {"topic": "t", "partition": 2, "hi_offset": 100, "ls_offset": 100, "_read_committed": True}]
    stats = assemble("consumer", "", "cid", 0, [], parts, 1, now_us=10)
    stats = complete_in_app(stats, {"replyq": 3}, {
        ("t", 0): {"committed_offset": 80, "stored_offset": 85},
        ("t", 1): {"committed_offset": 80, "stored_offset": -1001},
        ("t", 2): {"committed_offset": -1001, "stored_offset": 100},
        ("t", 9): {"committed_offset": 1}})  # not in the snapshot (unassigned meanwhile): ignored
    p = stats["topics"]["t"]["partitions"]
    assert (p["0"]["consumer_lag"], p["0"]["consumer_lag_stored"]) == (10, 5)  # read_committed: to ls_offset
    assert (p["1"]["consumer_lag"], p["1"]["consumer_lag_stored"]) == (20, -1)  # read_uncommitted: hi_offset
    assert (p["2"]["consumer_lag"], p["2"]["consumer_lag_stored"]) == (-1, 0)
    assert stats["replyq"] == 3 and all("_read_committed" not in part for part in p.values())


def test_the_emitter_names_clients_like_librdkafka_and_hands_over_json() -> None:
    got: list[str] = []
    first = StatsEmitter.from_config(got.append, "producer", 1000, "app")
    assert StatsEmitter.from_config(None, "producer", 1000, "x") is None  # a client without statistics...
    assert StatsEmitter.from_config(print, "producer", 0, "x") is None
    second = StatsEmitter.from_config(got.append, "consumer", 1000, "app")
    assert first is not None and second is not None
    number = int(first.name.rpartition("-")[2])
    # ...still takes its handle number, as every librdkafka handle does
    assert first.name == f"app#producer-{number}" and second.name == f"app#consumer-{number + 3}"
    first.deliver(assemble("producer", "", "app", 0, [], [], 0, now_us=5), {"msg_cnt": 4})
    stats = json.loads(got[0])
    assert (stats["name"], stats["type"], stats["msg_cnt"], stats["client_id"]) == (first.name, "producer", 4, "app")
