"""MainState: what the app keeps for a restarted main lives in the config main is re-spawned from, replaced
whole (a re-spawn packing it on the supervisor's thread never sees it half-updated)."""

from __future__ import annotations

from kqactors.client.handle.recovery import RECOVERY_KEY, MainState


def test_the_key_exists_before_main_is_spawned_and_each_update_replaces_the_value():
    shipped: dict = {"bootstrap.servers": "b:9092"}
    state = MainState(shipped)
    assert shipped[RECOVERY_KEY] == {}
    keys = list(shipped)
    state.toppar_spawned("t", 0, "toppar/t/0")
    first = shipped[RECOVERY_KEY]
    state.note_identity((7, 2))
    second = shipped[RECOVERY_KEY]
    assert list(shipped) == keys  # no key added after the spawn: the dict's size never changes
    assert first == {"producer_id": -1, "epoch": -1, "toppars": [["t", 0, "toppar/t/0"]]}
    assert second == {"producer_id": 7, "epoch": 2, "toppars": [["t", 0, "toppar/t/0"]]}
    assert first is not second and first["toppars"] is not state.toppars


def test_an_unchanged_or_unknown_identity_publishes_nothing_new():
    shipped: dict = {}
    state = MainState(shipped)
    state.note_identity((7, 2))
    published = shipped[RECOVERY_KEY]
    state.note_identity((7, 2))
    state.note_identity(None)
    assert shipped[RECOVERY_KEY] is published


def test_a_partition_spawned_again_is_listed_once():
    shipped: dict = {}
    state = MainState(shipped)
    state.toppar_spawned("t", 1, "toppar/t/1")
    state.toppar_spawned("t", 1, "toppar/t/1")
    assert shipped[RECOVERY_KEY]["toppars"] == [["t", 1, "toppar/t/1"]]
