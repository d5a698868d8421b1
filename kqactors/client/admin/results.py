"""From decoded responses to the AdminClient's result values: errors, Nodes, topic ids, ACL operation sets.

Runs in: the app process (on the admin dispatcher's thread). Pure functions over the plain dicts the request
kinds decode to (kqactors.protocol.requests, "admin" section) and the outcomes main returns.
"""

from __future__ import annotations

from typing import Any

from kqactors._model import Node, Uuid
from kqactors.admin._acl import AclOperation
from kqactors.errors import KafkaError, KafkaException


def kafka_error(code: int, reason: str | None = None) -> KafkaError:
    """The KafkaError of a code and the broker's (or main's) message; an empty message means the code's own."""
    return KafkaError(int(code), reason or None)


def exception(code: int, reason: str | None = None) -> KafkaException:
    return KafkaException(kafka_error(code, reason))


def outcome_exception(outcome: dict[str, Any], what: str = "") -> KafkaException | None:
    """The exception of a failed call, or None. main's reason says what failed ("Failed while waiting for
    controller: ...", "broker 1 does not support ..."); ``what`` (the API) prefixes a reason that does not."""
    code = int(outcome.get("error_code") or 0)
    if not code:
        return None
    reason = outcome.get("reason") or KafkaError(code).str()
    if what and not reason.startswith(("Failed", what)):
        reason = f"{what}: {reason}"
    return exception(code, reason)


def nodes_by_id(brokers: list[dict[str, Any]]) -> dict[int, Node]:
    """{node id: Node} of a Metadata response's brokers."""
    return {b["node_id"]: Node(b["node_id"], b["host"], b["port"], b.get("rack")) for b in brokers}


def node_of(nodes: dict[int, Node], node_id: int) -> Node | None:
    """The Node of an id (a bare Node when the cluster did not list it), or None for -1."""
    if node_id < 0:
        return None
    return nodes.get(node_id) or Node(node_id, "", -1)


def node_from(node: list[Any] | None) -> Node | None:
    """The Node of an outcome's "node" ([node_id, host, port, rack]), or None."""
    if not node:
        return None
    return Node(int(node[0]), node[1], int(node[2]), node[3] if len(node) > 3 else None)


def uuid_of(raw: bytes | None) -> Uuid:
    raw = bytes(raw or bytes(16))
    msb, lsb = int.from_bytes(raw[:8], "big", signed=True), int.from_bytes(raw[8:16], "big", signed=True)
    return Uuid(msb, lsb)


def acl_operations(bits: int | None) -> list[AclOperation] | None:
    """The AclOperations of an authorized-operations bit set (None when they were not asked for)."""
    if bits is None or bits < 0:
        return None
    return [op for op in AclOperation if op.value >= AclOperation.READ.value and bits & (1 << op.value)]
