"""Runs in: the app process (inside the Consumer facade). Owns the consumer's group API — subscribe,
unsubscribe, commit, committed, store_offsets, memberid, consumer_group_metadata, close — and the app side
of rebalances: the app's on_assign / on_revoke / on_lost callbacks run here, in the thread that called
poll()/consume() (or close()), and the group's start offsets are applied to the Consumer.

The group itself runs in the `cgrp` actor (spawned by name, CGRP_FACTORY) on main's host. This side keeps only what the
app thread touches per call: the stored offsets not yet shipped (they ride on the next op to the actor), the
partitions the group gave us, and the member id / generation pushed by the actor.

Hooks the Consumer provides (docs/consumer-ops.md, "Changes (groups)"): ``_apply_assignment(partitions,
incremental=True, add=bool)``, ``position(partitions)``, ``assignment()``; optional ``_app_queue`` (an
AppQueue this client's queue is forwarded to) and ``_deliver_error(KafkaError)``. The Consumer hands it the
client handle's host-death notices (``on_actors_down``): a cgrp actor that died with its host is a lost
assignment and a rejoin.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kqactors.core.group.settings import GroupSettings
from kqactors.errors import KafkaError, KafkaException
from kqactors.message import OFFSET_BEGINNING, OFFSET_END, OFFSET_INVALID, TopicPartition
from kqactors.ops.client import runtime_failure_code
from kqactors.ops.group import (
    APP_OP_TYPES,
    ASSIGN,
    CGRP_CLOSE,
    CGRP_COMMIT,
    CGRP_COMMIT_RESULT,
    CGRP_COMMITTED,
    CGRP_ERROR,
    CGRP_FETCH_START,
    CGRP_FETCH_STOP,
    CGRP_POLL,
    CGRP_REBALANCE,
    CGRP_REBALANCE_DONE,
    CGRP_RESUME,
    CGRP_STATE,
    CGRP_SUBSCRIBE,
    CGRP_UNSUBSCRIBE,
    LOST,
    REVOKE,
    partitions_from_wire,
)
from kqactors.runtime.op import ActorError, Op

__all__ = ["GroupClient", "GroupMetadata", "GROUP_OP_TYPES", "CGRP_FACTORY"]

log = logging.getLogger(__name__)

CGRP_FACTORY = "kqactors.actors.cgrp:CgrpActor"
GROUP_OP_TYPES = APP_OP_TYPES
"""Op types the Consumer hands to ``GroupClient.handle_op`` (they also carry ``op.serve`` when forwarded)."""

_POLL_REPORT_S = 0.25  # how often poll() tells the actor (max.poll.interval.ms) and ships stored offsets
_DEFAULT_TIMEOUT_S = 10.0
_KEPT_ERRORS = 100


@dataclass(frozen=True)
class GroupMetadata:
    """What consumer_group_metadata() returns (send_offsets_to_transaction needs these)."""

    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None


def _plain(config: Any) -> dict[str, Any]:
    """The configuration the cgrp actor gets: all of it (its coordinator connections are broker actors, which
    read the connection, socket and logging properties too)."""
    data = config.to_dict() if hasattr(config, "to_dict") else dict(config)
    return {k: v for k, v in data.items() if v is not None}


def _error_from_tuple(data: Any) -> KafkaError | None:
    return KafkaError.from_tuple(data) if data else None


def _check_callback(name: str, fn: Any) -> None:
    if fn is not None and not callable(fn):
        raise TypeError(f"{name} must be callable or None, not {type(fn).__name__}")


def _check_partitions(partitions: Any, what: str) -> list[TopicPartition]:
    if not isinstance(partitions, (list, tuple)):
        raise TypeError(f"{what} must be a list of TopicPartition")
    for tp in partitions:
        if not isinstance(tp, TopicPartition):
            raise TypeError(f"{what} must be a list of TopicPartition, not {type(tp).__name__}")
    return list(partitions)


class GroupClient:
    """The group half of a Consumer. ``consumer`` is the facade, ``runtime`` its Runtime (with `main` running),
    ``config`` its validated configuration (librdkafka names; callables such as on_commit stay here)."""

    def __init__(self, consumer: Any, runtime: Any, config: Any, actor_name: str = "cgrp") -> None:
        shipped = _plain(config)
        self.settings = GroupSettings.from_config(shipped)  # raises KafkaException(_INVALID_ARG) early
        self._consumer = consumer
        self._rt = runtime
        self._name = actor_name
        get = config.get if hasattr(config, "get") else dict(config).get
        callbacks = config.callbacks() if hasattr(config, "callbacks") else {}
        self._on_commit = callbacks.get("on_commit") or get("on_commit")
        self._error_cb = callbacks.get("error_cb") or get("error_cb")
        _check_callback("on_commit", self._on_commit)
        self._queue = runtime.new_queue(serve=self.handle_op)
        target = getattr(consumer, "_app_queue", None) or getattr(runtime, "events", None)
        if target is not None:
            self._queue.forward_to(target)
        host = runtime.host_of("main") if hasattr(runtime, "host_of") else None
        # Not waited for: the constructor returns while main's host starts; ops sent to the actor meanwhile
        # are held by its host until its SPAWN is served (the settings were validated above).
        runtime.spawn(actor_name, CGRP_FACTORY, {"config": shipped, "app_qid": self._queue.qid},
                      host=host if host is not None else 0, wait=False)
        self._topics: list[str] = []
        self._resubscribe = False
        #: the member a cgrp actor that died with its host was, for its successor to carry on as (CGRP_RESUME)
        self._resume: dict[str, Any] | None = None
        self._callbacks: dict[str, Callable[..., Any] | None] = {ASSIGN: None, REVOKE: None, LOST: None}
        self._subscribed = False
        self._assigned: set[tuple[str, int]] = set()
        self._rebalance: tuple[str, list[TopicPartition]] | None = None
        self._app_started: set[tuple[str, int]] = set()
        self._reset_policy = get("auto.offset.reset") or "latest"
        self._explicit: dict[tuple[str, int], tuple[int, int, str | None]] = {}
        self._shipped_positions: dict[tuple[str, int], int] = {}
        #: the last store_offsets() value shipped per partition: a restarted cgrp gets them again (CGRP_RESUME)
        self._explicit_shipped: dict[tuple[str, int], tuple[int, int, str | None]] = {}
        self._member_id = ""
        self._generation_id = -1
        self._join_state = "INIT"
        self._coordinator = -1
        self.rebalance_count = 0  # assign and revoke callbacks run (statistics)
        self.rebalanced_at = time.monotonic()
        self._last_report = 0.0
        self._commit_tags = 0
        self._next_manual_commit = time.monotonic() + self.settings.auto_commit_interval_ms / 1000
        self._closed = False
        self.errors: list[KafkaError] = []  # the last errors surfaced (the Consumer's poll() returned them)

    # ---- helpers ---------------------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("Consumer closed")

    def _request(self, op: Op, timeout: float) -> dict[str, Any]:
        self._send_resume()
        try:
            reply = self._rt.request(self._name, op, timeout=timeout)
        except ActorError as exc:
            code = runtime_failure_code(exc.code, KafkaError._DESTROY)
            raise KafkaException(KafkaError(code, f"consumer group: {exc}")) from None
        body = reply.payload or {}
        error = _error_from_tuple(body.get("error"))
        if error is not None and not body.get("partitions"):
            raise KafkaException(error)
        return body

    def _position_rows(self, keys: set[tuple[str, int]] | None = None) -> list[list[Any]]:
        """enable.auto.offset.store: the consumer's positions (next offset after the last message handed out)
        that changed since they were last shipped."""
        rows: list[list[Any]] = []
        keys = self._assigned if keys is None else keys
        if not self.settings.enable_auto_offset_store:
            return rows
        for key in sorted(keys):
            try:
                tp = self._consumer.position([TopicPartition(*key)])[0]
            except Exception:  # noqa: BLE001 - not (or no longer) assigned in the consumer: nothing to store
                continue
            if tp.offset >= 0 and self._shipped_positions.get(key) != tp.offset:
                self._shipped_positions[key] = tp.offset
                epoch = tp.leader_epoch if tp.leader_epoch is not None else -1
                rows.append([tp.topic, tp.partition, tp.offset, epoch, None, False])
        return rows

    def _explicit_rows(self, keys: set[tuple[str, int]] | None = None) -> list[list[Any]]:
        """Offsets stored with store_offsets() since the last op to the actor."""
        rows = []
        for key in sorted(self._explicit if keys is None else set(self._explicit) & keys):
            offset, epoch, metadata = self._explicit.pop(key)
            self._explicit_shipped[key] = (offset, epoch, metadata)
            rows.append([key[0], key[1], offset, epoch, metadata, True])
        return rows

    def _stored_rows(self, only: set[tuple[str, int]] | None = None) -> list[list[Any]]:
        return self._position_rows(only) + self._explicit_rows(only)

    # ---- app API ---------------------------------------------------------------------------------------

    def subscribe(self, topics: list[str], on_assign: Callable[..., Any] | None = None,
                  on_revoke: Callable[..., Any] | None = None, on_lost: Callable[..., Any] | None = None) -> None:
        """Join the group for these topics (``^`` prefix: regular expression). Callbacks get
        (consumer, partitions) and run inside poll()/consume(); without on_assign the assignment is applied
        automatically, on_lost defaults to on_revoke."""
        self._check_open()
        if isinstance(topics, str) or not isinstance(topics, (list, tuple)) or not topics:
            raise TypeError("subscribe() expects a non-empty list of topic names")
        for topic in topics:
            if not isinstance(topic, str) or not topic:
                raise TypeError(f"topic names must be non-empty strings, not {topic!r}")
        for name, fn in (("on_assign", on_assign), ("on_revoke", on_revoke), ("on_lost", on_lost)):
            _check_callback(name, fn)
        self._callbacks = {ASSIGN: on_assign, REVOKE: on_revoke, LOST: on_lost or on_revoke}
        self._request(Op(CGRP_SUBSCRIBE, {"topics": list(topics)}), _DEFAULT_TIMEOUT_S)
        self._subscribed = True
        self._topics = list(topics)

    def unsubscribe(self) -> None:
        """Leave the group (revoke callbacks run on the next poll()); stored offsets are committed first
        when enable.auto.commit is set."""
        self._check_open()
        self._request(Op(CGRP_UNSUBSCRIBE, {"stored": self._stored_rows()}), _DEFAULT_TIMEOUT_S)
        self._subscribed = False

    def commit(self, message: Any = None, offsets: list[TopicPartition] | None = None,
               asynchronous: bool = True) -> list[TopicPartition] | None:
        """Commit ``message``'s offset + 1, or ``offsets``, or every stored offset of the assignment.
        Synchronous: returns the committed partitions (each may carry .error) or raises KafkaException;
        asynchronous: returns None and the outcome goes to on_commit from poll()."""
        self._check_open()
        if message is not None and offsets is not None:
            raise KafkaException(KafkaError(KafkaError._INVALID_ARG, "commit(): give message or offsets, not both"))
        rows = None
        if message is not None:
            if message.error() is not None and message.offset() is None:
                raise KafkaException(KafkaError(KafkaError._INVALID_ARG, "cannot commit an error message"))
            epoch = message.leader_epoch() if hasattr(message, "leader_epoch") else None
            rows = [[message.topic(), message.partition(), message.offset() + 1, epoch, None]]
        elif offsets is not None:
            rows = [[tp.topic, tp.partition, tp.offset, tp.leader_epoch, tp.metadata]
                    for tp in _check_partitions(offsets, "offsets")]
        elif not self._subscribed:
            rows = self._manual_positions()
        payload: dict[str, Any] = {"offsets": rows, "stored": self._stored_rows()}
        if asynchronous:
            self._commit_tags += 1
            payload["tag"] = self._commit_tags
            if not self._send(Op(CGRP_COMMIT, payload)):
                raise KafkaException(KafkaError(KafkaError._TRANSPORT, "consumer group is restarting"))
            return None
        body = self._request(Op(CGRP_COMMIT, payload), max(_DEFAULT_TIMEOUT_S, self.settings.session_timeout_ms / 1000))
        result = partitions_from_wire(body.get("partitions") or [])
        self._note_committed(result)
        error = _error_from_tuple(body.get("error"))
        if error is not None:
            raise KafkaException(error)
        return result

    def auto_commit_assigned(self, keys: set[tuple[str, int]] | None = None, wait: float = 0.0) -> None:
        """enable.auto.commit with assign(): librdkafka commits a manual assignment's stored offsets too —
        every auto.commit.interval.ms, for partitions leaving the assignment, and at close. The group actor
        does so only for a member's partitions, so this side commits a manual assignment's (``keys``, default
        all of it) as an app commit without a member id. ``wait`` > 0: wait that long for the outcome."""
        if self._subscribed or self._closed or not self.settings.enable_auto_commit:
            return
        keys = self._consumer_keys() if keys is None else keys
        # the stored offsets (of messages handed out, or store_offsets()) not committed yet, as librdkafka
        rows = [[t, p, offset, epoch if epoch >= 0 else None, metadata]
                for t, p, offset, epoch, metadata in self._consumer._positions.uncommitted() if (t, p) in keys]
        if not rows:
            return
        self._commit_tags += 1
        payload = {"offsets": rows, "stored": [], "tag": self._commit_tags}
        if wait <= 0:
            self._send(Op(CGRP_COMMIT, payload))
            return
        try:
            body = self._request(Op(CGRP_COMMIT, {"offsets": rows, "stored": []}), wait)
        except KafkaException as exc:
            log.warning("auto-commit of the assignment failed: %s", exc.args[0])
            if self._on_commit is not None:
                self._on_commit(exc.args[0], [TopicPartition(r[0], r[1], r[2]) for r in rows])
            return
        committed = partitions_from_wire(body.get("partitions") or [])
        self._note_committed(committed)
        if self._on_commit is not None:
            self._on_commit(_error_from_tuple(body.get("error")), committed)

    def _note_committed(self, partitions: list[TopicPartition]) -> None:
        """Offsets the group now holds for this member's partitions (statistics: committed_offset, lag)."""
        positions = self._consumer._positions
        for tp in partitions:
            if tp.error is None and tp.offset >= 0:
                positions.committed(tp.topic, tp.partition, tp.offset)

    def _manual_positions(self) -> list[list[Any]] | None:
        """commit() without a subscription (assign()): the consumer's positions are what is committed."""
        try:
            assigned = self._consumer.assignment()
            positions = self._consumer.position(assigned) if assigned else []
        except Exception:  # noqa: BLE001
            return None
        rows = [[tp.topic, tp.partition, tp.offset, tp.leader_epoch, None] for tp in positions if tp.offset >= 0]
        if not rows:
            raise KafkaException(KafkaError(KafkaError._NO_OFFSET, "no consumed position to commit"))
        return rows

    def committed(self, partitions: list[TopicPartition], timeout: float | None = None) -> list[TopicPartition]:
        """The group's committed offsets (OFFSET_INVALID where none); raises KafkaException(_TIMED_OUT)."""
        self._check_open()
        partitions = _check_partitions(partitions, "partitions")
        timeout = _DEFAULT_TIMEOUT_S if timeout is None or timeout < 0 else float(timeout)
        if timeout <= 0:
            raise ValueError("committed() timeout must be positive")
        rows = [[tp.topic, tp.partition] for tp in partitions]
        body = self._request(Op(CGRP_COMMITTED, {"partitions": rows, "timeout_ms": int(timeout * 1000)}),
                             timeout + 1.0)
        error = _error_from_tuple(body.get("error"))
        if error is not None:
            raise KafkaException(error)
        return partitions_from_wire(body.get("partitions") or [])

    def store_offsets(self, message: Any = None, offsets: list[TopicPartition] | None = None) -> None:
        """Store ``message``'s offset + 1 (or ``offsets``) for the next commit; needs
        enable.auto.offset.store=false. Partitions not assigned raise KafkaException(_STATE)."""
        self._check_open()
        if self.settings.enable_auto_offset_store:
            raise KafkaException(KafkaError(KafkaError._INVALID_ARG,
                                            "store_offsets() requires enable.auto.offset.store=false"))
        if (message is None) == (offsets is None):
            raise KafkaException(KafkaError(KafkaError._INVALID_ARG, "store_offsets(): give message or offsets"))
        if message is not None:
            epoch = message.leader_epoch() if hasattr(message, "leader_epoch") else None
            tps = [TopicPartition(message.topic(), message.partition(), message.offset() + 1, None, epoch)]
        else:
            tps = _check_partitions(offsets, "offsets")
        failed = [tp for tp in tps if (tp.topic, tp.partition) not in self._assigned]
        for tp in tps:
            if tp.offset < 0:
                raise KafkaException(KafkaError(KafkaError._INVALID_ARG, f"cannot store logical offset {tp.offset}"))
        for tp in tps:
            if (tp.topic, tp.partition) in self._assigned:
                epoch = tp.leader_epoch if tp.leader_epoch is not None else -1
                self._explicit[(tp.topic, tp.partition)] = (tp.offset, epoch, tp.metadata)
        if failed:
            raise KafkaException(KafkaError(KafkaError._STATE, f"{failed[0].topic} [{failed[0].partition}] is not "
                                            "assigned to this consumer"))

    def memberid(self) -> str | None:
        self._check_open()
        return self._member_id or None

    def consumer_group_metadata(self) -> GroupMetadata:
        self._check_open()
        return GroupMetadata(self.settings.group_id, self._generation_id, self._member_id,
                             self.settings.group_instance_id)

    @property
    def subscribed(self) -> bool:
        return self._subscribed

    @property
    def in_rebalance_callback(self) -> bool:
        return self._rebalance is not None

    # ---- Consumer hooks --------------------------------------------------------------------------------

    def on_poll(self) -> None:
        """Call at every poll()/consume(): serves group ops not forwarded to the consumer's queue and tells
        the actor the app is alive (max.poll.interval.ms), shipping stored offsets, at most every 250 ms."""
        if self._closed:
            return
        if self._queue.forwarded_to is None:
            while (op := self._queue.poll(0)) is not None:
                self.handle_op(op)
        now = time.monotonic()
        if now >= self._next_manual_commit:
            self._next_manual_commit = now + self.settings.auto_commit_interval_ms / 1000
            self.auto_commit_assigned()
        if now - self._last_report >= _POLL_REPORT_S:
            self._last_report = now
            self._send_resume()
            if self._resubscribe and self._send(Op(CGRP_SUBSCRIBE, {"topics": self._topics})):
                self._resubscribe = False
            self._send(Op(CGRP_POLL, {"stored": self._stored_rows()}))

    def _send(self, op: Op) -> bool:
        """Send to the actor; False while its host is restarting (the op is lost with the old actor)."""
        try:
            self._rt.send(self._name, op)
            return True
        except ActorError as exc:
            log.debug("consumer group actor unreachable: %s", exc)
            return False

    def on_actors_down(self, host: str, names: list[str], restarts: int) -> None:
        """A host died (the client handle's notice, served in poll()'s thread); only the cgrp actor's own
        host matters here."""
        if not self._closed and self._name in names:
            self._actor_restarted()

    def _send_resume(self) -> None:
        """Before anything else reaches a restarted cgrp actor: who it is (see _actor_restarted)."""
        if self._resume is not None and self._send(Op(CGRP_RESUME, self._resume)):
            self._resume = None

    def _actor_restarted(self) -> None:
        """The cgrp actor's host died and is restarted with a fresh actor. A steady member (member id,
        generation, no rebalance callback pending) keeps its assignment and positions: the new actor is told
        to carry on as that member (CGRP_RESUME; the coordinator still counts it in, its session has not
        expired) — nothing is revoked, lost or fetched again. Otherwise what we held is lost (on_lost runs)
        and the subscription is sent again so the new actor rejoins the group."""
        if (self._subscribed and self._member_id and self._generation_id >= 0 and self._rebalance is None
                and not self.settings.consumer_protocol):
            log.info("consumer group actor restarted: carrying on as member %s (generation %d)", self._member_id,
                     self._generation_id)
            self._resume = {"topics": list(self._topics), "member_id": self._member_id,
                            "generation_id": self._generation_id, "protocol": None,
                            "assignment": [list(key) for key in sorted(self._assigned)]}
            # the offsets the dead actor held to auto-commit went with it: ship every one again
            self._shipped_positions.clear()
            for key, value in self._explicit_shipped.items():
                self._explicit.setdefault(key, value)
            return
        if not self._subscribed and not self._assigned:
            # assign() alone: the actor only commits offsets for it, nothing was held or is to be rejoined
            log.info("consumer group actor restarted (no subscription: nothing to rejoin)")
            return
        log.warning("consumer group actor restarted: assignment lost, rejoining")
        lost = [TopicPartition(t, p) for t, p in sorted(self._assigned)]
        self._drop(lost)
        callback = self._callbacks.get(LOST)
        if lost and callback is not None:
            callback(self._consumer, lost)
        self._resubscribe = self._subscribed

    def handle_op(self, op: Op) -> None:
        """One group op from the actor (served in the app thread inside poll()/consume()/close())."""
        payload = op.payload or {}
        if op.type == CGRP_REBALANCE:
            self._run_rebalance(payload["kind"], partitions_from_wire(payload["partitions"]))
        elif op.type == CGRP_FETCH_START:
            start = []
            for tp in partitions_from_wire(payload["partitions"]):
                key = (tp.topic, tp.partition)
                self._assigned.add(key)
                if key in self._app_started:
                    self._app_started.discard(key)  # the app's own assign() already started it
                    continue
                tp.offset = self._start_offset(tp.offset)
                start.append(tp)
            if start:
                self._consumer._apply_assignment(start, incremental=True, add=True)
        elif op.type == CGRP_FETCH_STOP:
            self._drop(partitions_from_wire(payload["partitions"]))
        elif op.type == CGRP_COMMIT_RESULT:
            committed = partitions_from_wire(payload.get("partitions") or [])
            self._note_committed(committed)
            if self._on_commit is not None:
                self._on_commit(_error_from_tuple(payload.get("error")), committed)
        elif op.type == CGRP_STATE:
            self._member_id = payload.get("member_id") or ""
            self._generation_id = int(payload.get("generation_id", -1))
            self._join_state = payload.get("join_state", "")
            self._coordinator = int(payload.get("coordinator", -1))
        elif op.type == CGRP_ERROR:
            self._surface(KafkaError.from_tuple(payload["error"]), payload.get("topic"))
        else:
            log.debug("group client: unexpected op %s", op.type)

    def stats(self) -> dict[str, Any]:
        """librdkafka's ``cgrp`` statistics, from what the app side knows of the group."""
        return {"state": "up" if self._coordinator >= 0 else "query-coord", "join_state": self._join_state.lower(),
                "rebalance_age": int((time.monotonic() - self.rebalanced_at) * 1000),
                "rebalance_cnt": self.rebalance_count, "assignment_size": len(self._consumer_keys())}

    def _surface(self, error: KafkaError, topic: str | None = None) -> None:
        """A group error for the app: the Consumer's poll() returns it (a fatal one goes to error_cb); the
        last _KEPT_ERRORS are also kept in ``errors``."""
        self.errors.append(error)
        del self.errors[:-_KEPT_ERRORS]
        deliver = getattr(self._consumer, "_deliver_error", None)
        if deliver is not None:
            deliver(error, topic)
        elif self._error_cb is not None:
            self._error_cb(error)

    def _drop(self, partitions: list[TopicPartition]) -> None:
        gone = [tp for tp in partitions if (tp.topic, tp.partition) in self._assigned]
        if gone:
            keys = {(tp.topic, tp.partition) for tp in gone}
            self._assigned -= keys
            self._app_started -= keys
            for key in keys:
                self._explicit.pop(key, None)
                self._explicit_shipped.pop(key, None)
                self._shipped_positions.pop(key, None)
            self._consumer._apply_assignment([TopicPartition(tp.topic, tp.partition) for tp in gone],
                                             incremental=True, add=False)

    def _run_rebalance(self, kind: str, partitions: list[TopicPartition]) -> None:
        """Run the app's callback (or the default), then tell the actor. Revoked partitions stop delivering
        by the time the callback returns; their stored offsets go with REBALANCE_DONE (committed on revoke).

        The app may apply the change itself from the callback, on the Consumer (then its assign resolves
        OFFSET_STORED through ``resolve_stored_offsets`` and the group's later start offsets are skipped)."""
        keys = {(tp.topic, tp.partition) for tp in partitions}
        positions = self._position_rows(keys & self._assigned) if kind == REVOKE else []
        before = self._consumer_keys()
        callback = self._callbacks.get(kind)
        self._rebalance = (kind, partitions)
        self.rebalance_count += 1
        self.rebalanced_at = time.monotonic()
        failure: BaseException | None = None
        try:
            if callback is not None:
                callback(self._consumer, partitions)
        except BaseException as exc:  # noqa: BLE001 - finish the rebalance, then let the app see it
            failure = exc
        finally:
            self._rebalance = None
        after = self._consumer_keys()
        if kind == ASSIGN:
            self._app_started |= (after - before) & keys  # the app assigned them on the Consumer itself
            self._assigned |= self._app_started & keys
            rows = [[tp.topic, tp.partition, tp.offset] for tp in partitions if (tp.topic, tp.partition) in keys]
            self._send(Op(CGRP_REBALANCE_DONE, {"partitions": rows, "stored": []}))
        else:
            stored = positions + self._explicit_rows(keys) if kind == REVOKE else []
            self._drop(partitions)
            self._send(Op(CGRP_REBALANCE_DONE, {"partitions": None, "stored": stored}))
        if failure is not None:
            raise failure

    def _consumer_keys(self) -> set[tuple[str, int]]:
        try:
            return {(tp.topic, tp.partition) for tp in self._consumer.assignment()}
        except Exception:  # noqa: BLE001
            return set()

    def _reset_offset(self) -> int:
        policy = str(self._reset_policy).lower()
        if policy in ("earliest", "smallest", "beginning"):
            return OFFSET_BEGINNING
        return OFFSET_END

    def _start_offset(self, offset: int) -> int:
        """A partition without a committed offset starts per auto.offset.reset (as librdkafka)."""
        if offset >= 0 or offset in (OFFSET_BEGINNING, OFFSET_END):
            return offset
        if str(self._reset_policy).lower() == "error":
            self._surface(KafkaError(KafkaError._AUTO_OFFSET_RESET,
                                     "no committed offset and auto.offset.reset=error: starting at the end"))
        return self._reset_offset()

    def resolve_stored_offsets(self, parts: list[Any]) -> None:
        """The Consumer's assign() got OFFSET_STORED partitions: set each ``part.start_offset`` to the
        committed offset (else auto.offset.reset). Blocking (committed() through the coordinator)."""
        if self._rebalance is not None:
            self._app_started.update((p.topic, p.partition) for p in parts)
        try:
            found = self.committed([TopicPartition(p.topic, p.partition) for p in parts],
                                   timeout=self.settings.session_timeout_ms / 1000)
            committed = {(tp.topic, tp.partition): tp.offset for tp in found}
        except KafkaException as exc:
            log.warning("committed offsets unavailable (%s): using auto.offset.reset", exc)
            committed = {}
        for part in parts:
            part.start_offset = self._start_offset(committed.get((part.topic, part.partition), OFFSET_INVALID))

    def close(self, timeout: float = _DEFAULT_TIMEOUT_S) -> None:
        """Final commit (enable.auto.commit), revoke callbacks, LeaveGroup; waits up to ``timeout``."""
        if self._closed:
            return
        forwarded = self._queue.forwarded_to
        self._queue.unforward()  # revoke callbacks of the close run here, not in a later poll()
        if forwarded is not None:
            pending = forwarded.purge()
            for op in pending:  # keep the consumer's own ops; serve ours now
                if op.serve == self.handle_op:
                    self.handle_op(op)
                else:
                    forwarded.enqueue(op)
        deadline = time.monotonic() + timeout
        self.auto_commit_assigned(wait=timeout)
        try:
            self._rt.request_async(self._name, Op(CGRP_CLOSE, {"stored": self._stored_rows()}), self._queue,
                                   timeout)
            while time.monotonic() < deadline:
                op = self._queue.poll(min(0.1, max(0.0, deadline - time.monotonic())))
                if op is None:
                    continue
                if op.type == CGRP_CLOSE:
                    break
                self.handle_op(op)
        except ActorError as exc:
            log.debug("group close: %s", exc)
        finally:
            self._closed = True
            self._assigned.clear()
            try:
                self._rt.stop(self._name)
            except Exception:  # noqa: BLE001 - the runtime may already be closing
                pass

