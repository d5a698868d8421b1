"""Unit tests of producer_unassigned: messages held for a topic without metadata are placed in produce order,
a produce() racing the release waits for it, a failed lookup fails every held message once, a lookup without
an answer is repeated, and messages held past message.timeout.ms expire."""

from __future__ import annotations

import threading
import time

from kqactors.client.producer.unassigned import RETRY, HeldMessage, UnassignedMessages


def _msg(n: int) -> HeldMessage:
    return HeldMessage(-1, None, b"%d" % n, None, 0, None, 1)


class Recorder:
    def __init__(self, count: int | None) -> None:
        self.count = count
        self.go = threading.Event()
        self.done = threading.Event()
        self.released: list[tuple[str, list[bytes], int]] = []
        self.failed: list[tuple[str, list[bytes]]] = []
        self.during_release = None

    def resolve(self, topic: str) -> int | None:
        self.go.wait(10)
        return self.count

    def release(self, topic: str, messages: list[HeldMessage], count: int) -> None:
        if self.during_release is not None:
            self.during_release()
        self.released.append((topic, [m.value for m in messages], count))
        self.done.set()

    def fail(self, topic: str, messages: list[HeldMessage]) -> None:
        self.failed.append((topic, [m.value for m in messages]))
        self.done.set()


def test_held_messages_are_released_in_order_once_the_count_is_known() -> None:
    rec = Recorder(3)
    held = UnassignedMessages(rec.resolve, rec.release, rec.fail)
    try:
        assert not held.hold("t", _msg(0), start=False)  # not held: the caller goes on
        assert held.hold("t", _msg(0), start=True)
        for n in range(1, 5):
            assert held.hold("t", _msg(n), start=False)  # queued behind the first
        rec.go.set()
        assert rec.done.wait(10)
        assert rec.released == [("t", [b"0", b"1", b"2", b"3", b"4"], 3)]
        assert "t" not in held.held
        assert not held.hold("t", _msg(5), start=False)
    finally:
        held.close()


def test_a_produce_racing_the_release_waits_and_goes_behind() -> None:
    rec = Recorder(1)
    held = UnassignedMessages(rec.resolve, rec.release, rec.fail)
    outcome: list[bool] = []
    racer = threading.Thread(target=lambda: outcome.append(held.hold("t", _msg(9), start=False)))

    def start_racer() -> None:
        racer.start()
        racer.join(0.2)  # it cannot finish while the release holds the lock
        assert racer.is_alive()

    rec.during_release = start_racer
    try:
        held.hold("t", _msg(0), start=True)
        rec.go.set()
        assert rec.done.wait(10)
        racer.join(10)
        assert outcome == [False]  # released meanwhile: the racer appends after the held messages
        assert rec.released == [("t", [b"0"], 1)]
    finally:
        held.close()


def test_a_failed_lookup_fails_every_held_message_once() -> None:
    rec = Recorder(None)
    held = UnassignedMessages(rec.resolve, rec.release, rec.fail)
    try:
        held.hold("gone", _msg(0), start=True)
        held.hold("gone", _msg(1), start=False)
        rec.go.set()
        assert rec.done.wait(10)
        assert rec.failed == [("gone", [b"0", b"1"])] and rec.released == []
        assert held.take_all() == {}
    finally:
        held.close()


def test_take_all_empties_what_is_held() -> None:
    rec = Recorder(2)  # resolve blocks until go: the messages stay held
    held = UnassignedMessages(rec.resolve, rec.release, rec.fail)
    try:
        held.hold("a", _msg(0), start=True)
        held.hold("b", _msg(1), start=True)
        taken = held.take_all()
        assert {topic: [m.value for m in msgs] for topic, msgs in taken.items()} == {"a": [b"0"], "b": [b"1"]}
        rec.go.set()
    finally:
        held.close()
    assert rec.released == [] and rec.failed == []


def test_no_answer_is_asked_again_until_one_comes() -> None:
    """RETRY (no broker reachable, topic still propagating): the topic stays held and is looked up again."""
    answers = [RETRY, RETRY, 2]
    asked: list[float] = []
    released: list[tuple[str, list[bytes], int]] = []
    done = threading.Event()

    def resolve(topic: str) -> object:
        asked.append(time.monotonic())
        return answers.pop(0)

    def release(topic: str, messages: list[HeldMessage], count: int) -> None:
        released.append((topic, [m.value for m in messages], count))
        done.set()

    held = UnassignedMessages(resolve, release, lambda topic, messages: None)
    try:
        held.hold("t", _msg(0), start=True)
        assert done.wait(10)
        assert released == [("t", [b"0"], 2)] and len(asked) == 3
        assert asked[2] - asked[0] >= 0.25  # backing off between the lookups (0.1 s, then 0.2 s)
    finally:
        held.close()


def test_messages_held_past_the_timeout_expire_oldest_first() -> None:
    expired: list[tuple[str, list[bytes]]] = []
    held = UnassignedMessages(lambda topic: RETRY, lambda *a: None, lambda *a: None, timeout_s=1.0,
                              on_expired=lambda topic, messages: expired.append((topic, [m.value for m in messages])))
    try:
        now = time.monotonic()
        for n, age in enumerate((3.0, 1.5, 0.5)):
            held.hold("t", _msg(n)._replace(held_at=now - age), start=n == 0)
        held.hold("u", _msg(9), start=True)  # held_at None: never expires here
        assert held.expire(now) == 2
        assert expired == [("t", [b"0", b"1"])]
        assert [m.value for m in held.held["t"]] == [b"2"] and "u" in held.held  # still held and looked up
        assert held.expire(now + 0.6) == 1 and held.expire(now + 100) == 0
    finally:
        held.close()
