"""Runs in: the main host. The consumer group: pure, event-driven state machines whose outputs are actions
the cgrp actor executes — ``GroupStateMachine`` (classic protocol) and ``ConsumerProtocolMachine`` (KIP-848,
group.protocol=consumer) — the assignors (range, roundrobin, cooperative-sticky), the consumer-protocol member
metadata and offset bookkeeping.
"""
