"""Runs in: unit tests. Names across namespaces: a group's actor addresses a member's app by its full name, which
is never prefixed again; plain names are qualified with the actor's own namespace."""

from __future__ import annotations

from kqactors.runtime.namespace import is_group, namespace_of, qualify, strip


def test_a_name_in_another_namespace_is_left_alone() -> None:
    assert qualify("_nsg1", "_ns3/app") == "_ns3/app"
    assert qualify("_nsg1", "app") == "_nsg1/app"
    assert qualify("_nsg1", "toppar/t/0") == "_nsg1/toppar/t/0"
    assert qualify("_ns3", "_ns3/main") == "_ns3/main"


def test_group_namespaces() -> None:
    assert is_group(namespace_of("_nsg2/main")) and not is_group(namespace_of("_ns2/main"))
    assert strip("_nsg2", "_nsg2/broker/1") == "broker/1"
    assert strip("_nsg2", "_ns2/app") == "_ns2/app"
