"""Runs in: unit tests. Positions and versions: assign/seek/pause/resume bump versions, stale data is refused,
position() and store_offsets semantics, leader epochs, and settings parsing."""

from __future__ import annotations

import pytest

from kqactors.config import Config
from kqactors.core.consumer.position import PositionTable, VersionGate
from kqactors.core.consumer.settings import FetchSettings
from kqactors.errors import KafkaError, KafkaException
from kqactors.message import OFFSET_BEGINNING, OFFSET_INVALID, OFFSET_STORED


def test_every_change_gives_a_newer_version_and_refuses_older_data() -> None:
    table = PositionTable()
    [part] = table.assign([("t", 0, 10)])
    versions = [part.version, table.seek("t", 0, 20), table.pause("t", 0), table.resume("t", 0)[0]]
    assert versions == sorted(set(versions))
    assert not table.accepts("t", 0, versions[-2]) and table.accepts("t", 0, versions[-1])


def test_reassignment_never_reuses_a_version() -> None:
    table = PositionTable()
    first = table.assign([("t", 0, 0)])[0].version
    table.unassign([("t", 0)])
    assert not table.accepts("t", 0, first)
    second = table.assign([("t", 0, 0)])[0].version
    assert second > first and not table.accepts("t", 0, first)


def test_paused_partition_accepts_nothing_and_resume_restarts_at_the_app_position() -> None:
    table = PositionTable()
    table.assign([("t", 0, 0)])
    table.consumed("t", 0, 41, leader_epoch=2)
    version = table.pause("t", 0)
    assert not table.accepts("t", 0, version)
    new_version, restart = table.resume("t", 0)
    assert restart == 42 and table.accepts("t", 0, new_version)


def test_resume_before_consuming_restarts_at_the_logical_start() -> None:
    table = PositionTable()
    table.assign([("t", 0, OFFSET_BEGINNING)])
    table.pause("t", 0)
    assert table.resume("t", 0)[1] == OFFSET_BEGINNING
    table.assign([("t", 1, OFFSET_INVALID)])
    assert table.get("t", 1).start_offset == OFFSET_STORED


def test_position_is_last_consumed_plus_one_with_its_epoch() -> None:
    table = PositionTable()
    table.assign([("t", 0, OFFSET_STORED)])
    assert table.position("t", 0) == (OFFSET_INVALID, -1)
    table.consumed("t", 0, 99, leader_epoch=5)
    assert table.position("t", 0) == (100, 5)
    # as librdkafka (confluent-kafka 2.15, checked by hand on the mock cluster): a seek, like an assign at an
    # absolute offset, leaves the position unknown until a message is handed out; fetching restarts at the seek
    table.seek("t", 0, 7, leader_epoch=3)
    assert table.position("t", 0) == (OFFSET_INVALID, -1)
    assert table.get("t", 0).restart_offset == 7
    table.assign([("t", 1, 5)])
    assert table.position("t", 1) == (OFFSET_INVALID, -1) and table.get("t", 1).restart_offset == 5
    assert table.position("other", 0) == (OFFSET_INVALID, -1)


def test_auto_store_follows_consumption() -> None:
    table = PositionTable(auto_store=True)
    table.assign([("t", 0, 0), ("t", 1, 0)])
    table.consumed("t", 0, 4, leader_epoch=1)
    assert table.uncommitted() == [("t", 0, 5, 1, None)]
    table.committed("t", 0, 5)
    assert table.uncommitted() == []
    with pytest.raises(KafkaException) as info:
        table.store("t", 0, 9)
    assert info.value.error == KafkaError._INVALID_ARG


def test_explicit_store_semantics() -> None:
    table = PositionTable(auto_store=False)
    table.assign([("t", 0, 0)])
    table.consumed("t", 0, 4)
    assert table.uncommitted() == []
    table.store_message("t", 0, 4, leader_epoch=2)
    assert table.uncommitted() == [("t", 0, 5, 2, None)]
    table.store("t", 0, 3, metadata="m")  # as given, not + 1
    assert table.uncommitted() == [("t", 0, 3, -1, "m")]
    with pytest.raises(KafkaException) as info:
        table.store("t", 9, 1)
    assert info.value.error == KafkaError._STATE
    with pytest.raises(ValueError):
        table.store("t", 0, -2)


def test_seek_on_an_unassigned_partition_fails_clearly() -> None:
    with pytest.raises(KafkaException) as info:
        PositionTable().seek("t", 0, 1)
    assert info.value.error == KafkaError._UNKNOWN_PARTITION


@pytest.mark.parametrize("bad", [("", 0, 0), ("t", -1, 0), (None, 0, 0)])
def test_bad_assignments_are_type_errors(bad) -> None:
    with pytest.raises(TypeError):
        PositionTable().assign([bad])


def test_version_gate() -> None:
    gate = VersionGate()
    assert gate.advance(3) and not gate.advance(2) and gate.version == 3
    assert gate.accepts(3) and not gate.accepts(2)


def test_settings_from_a_consumer_config() -> None:
    conf = Config({"group.id": "g", "max.partition.fetch.bytes": 2048, "isolation.level": "read_uncommitted",
                   "auto.offset.reset": "smallest", "enable.partition.eof": True}, kind="consumer")
    s = FetchSettings.from_config(conf)
    assert (s.max_partition_fetch_bytes, s.read_committed, s.auto_offset_reset, s.enable_partition_eof) == (
        2048, False, "earliest", True)
    assert s.fetch_wait_max_ms == 500 and s.auto_offset_reset in ("earliest", "latest", "error")
    assert FetchSettings.from_dict(FetchSettings.from_config(conf.to_dict()).to_dict()) == s
    assert FetchSettings.from_config({}).auto_offset_reset == "latest"  # librdkafka's default: largest
    assert FetchSettings.from_config({"check.crcs": "true", "fetch.wait.max.ms": "10"}).fetch_wait_max_ms == 10


@pytest.mark.parametrize("conf", [{"fetch.wait.max.ms": -1}, {"auto.offset.reset": "middle"},
                                  {"isolation.level": "dirty"}, {"check.crcs": "maybe"},
                                  {"fetch.min.bytes": True}, {"queued.min.messages": "x"}])
def test_bad_settings_are_value_errors(conf) -> None:
    with pytest.raises(ValueError):
        FetchSettings.from_config(conf)
