"""Ops between the consumer facade (app) and the consumer group's cgrp actor on the main host.

Runs in: the app facade and the cgrp actor (names and payload shapes only; the contract is
docs/consumer-ops.md). Requests expect a reply; the others are one-way.
"""

from __future__ import annotations

from typing import Any

from kqactors.errors import KafkaError
from kqactors.message import TopicPartition

# the kind of a CGRP_REBALANCE (and of the state machine's RebalanceCallback action)
ASSIGN = "assign"
REVOKE = "revoke"
LOST = "lost"

CGRP_SUBSCRIBE = "CGRP_SUBSCRIBE"          # app → cgrp request {topics}
CGRP_UNSUBSCRIBE = "CGRP_UNSUBSCRIBE"      # app → cgrp request {stored}
# app → cgrp: the cgrp actor that died with main's host was this member; the restarted one carries on as it
# (no rebalance, no lost assignment): {topics, member_id, generation_id, protocol, assignment: [[topic, partition]]}
CGRP_RESUME = "CGRP_RESUME"
CGRP_POLL = "CGRP_POLL"                    # app → cgrp {stored}: poll()/consume() was called
CGRP_REBALANCE_DONE = "CGRP_REBALANCE_DONE"  # app → cgrp {partitions|None, stored}: callback returned
CGRP_COMMIT = "CGRP_COMMIT"                # app → cgrp (request when synchronous) {offsets|None, tag, stored}
CGRP_COMMITTED = "CGRP_COMMITTED"          # app → cgrp request {partitions, timeout_ms}
CGRP_CLOSE = "CGRP_CLOSE"                  # app → cgrp request {stored}; reply once the group is left
CGRP_REBALANCE = "CGRP_REBALANCE"          # cgrp → app {kind, incremental, partitions, error_code}
CGRP_FETCH_START = "CGRP_FETCH_START"      # cgrp → app {partitions: [[t, p, offset, epoch, meta, err]]}
CGRP_FETCH_STOP = "CGRP_FETCH_STOP"        # cgrp → app {partitions}
CGRP_COMMIT_RESULT = "CGRP_COMMIT_RESULT"  # cgrp → app {tag, error, partitions}: on_commit
CGRP_STATE = "CGRP_STATE"                  # cgrp → app {member_id, generation_id, join_state, coordinator}
CGRP_ERROR = "CGRP_ERROR"                  # cgrp → app {error: KafkaError.to_tuple()}
APP_OP_TYPES = frozenset({CGRP_REBALANCE, CGRP_FETCH_START, CGRP_FETCH_STOP, CGRP_COMMIT_RESULT, CGRP_STATE,
                          CGRP_ERROR})


def partitions_to_wire(partitions: list[TopicPartition], with_errors: bool = False) -> list[list[Any]]:
    """[[topic, partition, offset, leader_epoch, metadata, error_code]] (msgpack-able)."""
    return [[tp.topic, tp.partition, tp.offset, tp.leader_epoch if tp.leader_epoch is not None else -1,
             tp.metadata, tp.error.code() if tp.error is not None else 0] for tp in partitions]


def partitions_from_wire(rows: list[list[Any]]) -> list[TopicPartition]:
    result = []
    for topic, partition, offset, epoch, metadata, code in rows:
        tp = TopicPartition(topic, partition, offset, metadata, epoch if epoch is not None and epoch >= 0 else None)
        if code:
            tp.error = KafkaError(code)
        result.append(tp)
    return result
