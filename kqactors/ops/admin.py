"""The AdminClient's ops: the app's admin requests to ``main`` and main's one reply to each.

Runs in: every process (names and payload shapes only; the prose contract is docs/admin-ops.md). An admin
request names librdkafka's admin op (CREATETOPICS, DESCRIBECONFIGS, ...: the op type, so logs and traces read
as librdkafka's) and carries the protocol calls the app planned for it; main routes each call (the
controller, a group coordinator, a given broker, any broker, every broker, the partitions' leaders), retries
as the target moves, and answers ADMIN_RESULT with one outcome per call, in order, before the request
timeout. The calls' args are the request kinds' own fields (kqactors.protocol.requests, "admin" section).

Request payload: {"request_timeout_ms": int, "calls": [call, ...]}, a call being
  {"target": target, "kind": request kind name, "args": {...}} with target one of
  ["controller"], ["any"], ["broker", node_id], ["coordinator", group_id],
  ["all"]      one request per broker of the cluster: the outcome's result is [[node_id, error_code, reason,
               result], ...],
  ["leaders"]  the call has "rows": [[topic, partition, value], ...]; the rows go to their partitions' leaders
               in one request per leader (kinds in LEADER_KINDS) and the outcome's result is
               {"rows": [[topic, partition, error_code, *values], ...]} in the order asked.
Reply (ADMIN_RESULT): {"results": [{"error_code", "reason", "result", "broker_id", "node"}, ...]}, "node" being
the answering broker as [node_id, host, port, rack] (None when no broker answered).
"""

from __future__ import annotations

from typing import Any

# app → main (requests), named after librdkafka's admin op types
CREATETOPICS = "CREATETOPICS"
DELETETOPICS = "DELETETOPICS"
CREATEPARTITIONS = "CREATEPARTITIONS"
DESCRIBECONFIGS = "DESCRIBECONFIGS"
ALTERCONFIGS = "ALTERCONFIGS"
INCREMENTALALTERCONFIGS = "INCREMENTALALTERCONFIGS"
DELETERECORDS = "DELETERECORDS"
LISTOFFSETS = "LISTOFFSETS"
DESCRIBETOPICS = "DESCRIBETOPICS"
DESCRIBECLUSTER = "DESCRIBECLUSTER"
LISTCONSUMERGROUPS = "LISTCONSUMERGROUPS"
DESCRIBECONSUMERGROUPS = "DESCRIBECONSUMERGROUPS"
DELETEGROUPS = "DELETEGROUPS"
LISTCONSUMERGROUPOFFSETS = "LISTCONSUMERGROUPOFFSETS"
ALTERCONSUMERGROUPOFFSETS = "ALTERCONSUMERGROUPOFFSETS"
CREATEACLS = "CREATEACLS"
DESCRIBEACLS = "DESCRIBEACLS"
DELETEACLS = "DELETEACLS"
DESCRIBEUSERSCRAMCREDENTIALS = "DESCRIBEUSERSCRAMCREDENTIALS"
ALTERUSERSCRAMCREDENTIALS = "ALTERUSERSCRAMCREDENTIALS"
ELECTLEADERS = "ELECTLEADERS"
# the legacy list_groups(): ListGroups on every broker, then DescribeGroups of each broker's groups
LISTGROUPS = "LISTGROUPS"
# main → app: the one reply to any of the above
ADMIN_RESULT = "ADMIN_RESULT"

ADMIN_OPS = (CREATETOPICS, DELETETOPICS, CREATEPARTITIONS, DESCRIBECONFIGS, ALTERCONFIGS, INCREMENTALALTERCONFIGS,
             DELETERECORDS, LISTOFFSETS, DESCRIBETOPICS, DESCRIBECLUSTER, LISTCONSUMERGROUPS, DESCRIBECONSUMERGROUPS,
             DELETEGROUPS, LISTCONSUMERGROUPOFFSETS, ALTERCONSUMERGROUPOFFSETS, CREATEACLS, DESCRIBEACLS, DELETEACLS,
             DESCRIBEUSERSCRAMCREDENTIALS, ALTERUSERSCRAMCREDENTIALS, ELECTLEADERS, LISTGROUPS)
"""Every admin request op type (main serves them all the same way: they differ only in their calls)."""

LEADER_KINDS = ("ListOffsets", "admin:DeleteRecords")
"""Request kinds a ["leaders"] call may name."""


def call(target: list[Any], kind: str, args: dict[str, Any], rows: list[list[Any]] | None = None
         ) -> dict[str, Any]:
    """One planned protocol call of an admin request."""
    entry: dict[str, Any] = {"target": target, "kind": kind, "args": args}
    if rows is not None:
        entry["rows"] = rows
    return entry


def request_payload(calls: list[dict[str, Any]], request_timeout_ms: int) -> dict[str, Any]:
    return {"request_timeout_ms": int(request_timeout_ms), "calls": calls}


def outcome(error_code: int, reason: str = "", result: Any = None, broker_id: int = -1,
            node: list[Any] | None = None) -> dict[str, Any]:
    """One call's outcome in an ADMIN_RESULT."""
    return {"error_code": int(error_code), "reason": reason, "result": result, "broker_id": broker_id, "node": node}
