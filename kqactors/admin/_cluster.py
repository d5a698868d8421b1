"""DescribeClusterResult: describe_cluster()'s answer.

Runs in: the app process.
"""

from __future__ import annotations

from typing import Any

from kqactors._model import Node
from kqactors.admin._acl import AclOperation
from kqactors.admin._util import to_enum


class DescribeClusterResult:
    """The ``controller`` Node, every Node (``nodes``), the ``cluster_id`` and, when asked for, the operations
    this client may perform on the cluster."""

    def __init__(self, controller: Node, nodes: list[Node], cluster_id: str | None = None,
                 authorized_operations: list[AclOperation | str | int] | None = None) -> None:
        self.cluster_id = cluster_id
        self.controller = controller
        self.nodes = nodes
        self.authorized_operations: list[Any] | None = (
            [to_enum(op, AclOperation) for op in authorized_operations] if authorized_operations else None)
