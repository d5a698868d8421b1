"""Runs in: pytest. OpQueue semantics without any process: priority, forwarding chains, the serve handler
of the outermost queue, the version barrier, CB resolution, TERMINATE and poison retries."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kqactors.runtime.op import CB, TERMINATE, Op
from kqactors.runtime.queue import CallbackRegistry, OpQueue


def served_types(queue: OpQueue, **kwargs) -> list[str]:
    seen: list[str] = []
    queue.serve(lambda op: seen.append(op.type), **kwargs)
    return seen


def test_priority_then_fifo() -> None:
    q = OpQueue()
    for name, prio in [("a", 0), ("b", 5), ("c", 0), ("d", 5), ("e", -1), ("f", 9)]:
        q.enqueue(Op(name, priority=prio))
    assert served_types(q) == ["f", "b", "d", "a", "c", "e"]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(min_value=-3, max_value=3), max_size=40))
def test_priority_order_property(priorities: list[int]) -> None:
    q = OpQueue()
    for i, prio in enumerate(priorities):
        q.enqueue(Op(str(i), priority=prio))
    order = [int(t) for t in served_types(q)]
    expected = sorted(range(len(priorities)), key=lambda i: (-priorities[i], i))
    assert order == expected


def test_serve_max_ops_leaves_the_rest() -> None:
    q = OpQueue()
    for i in range(5):
        q.enqueue(Op(str(i)))
    assert served_types(q, max_ops=2) == ["0", "1"]
    assert len(q) == 3


def test_forward_moves_queued_ops_and_new_ones() -> None:
    src, dest = OpQueue(name="src"), OpQueue(name="dest")
    src.enqueue(Op("early"))
    src.forward_to(dest)
    src.enqueue(Op("late"))
    assert len(src) == 2 and len(dest) == 2  # len follows the forward chain
    assert served_types(dest) == ["early", "late"]


def test_forwarded_ops_carry_the_outermost_serve_handler() -> None:
    seen: list[tuple[str, str]] = []
    outer = OpQueue(lambda op: seen.append(("outer", op.type)), name="outer")
    middle = OpQueue(lambda op: seen.append(("middle", op.type)), name="middle")
    inner = OpQueue(lambda op: seen.append(("inner", op.type)), name="inner")
    outer.forward_to(middle)
    middle.forward_to(inner)
    outer.enqueue(Op("x"))
    middle.enqueue(Op("y"))
    inner.enqueue(Op("z"))
    assert outer.destination() is inner
    inner.serve()
    assert seen == [("outer", "x"), ("middle", "y"), ("inner", "z")]


def test_serving_a_forwarded_queue_serves_its_destination() -> None:
    seen: list[str] = []
    src, dest = OpQueue(), OpQueue(lambda op: seen.append("dest:" + op.type))
    src.forward_to(dest)
    dest.enqueue(Op("d"))
    src.serve()
    assert seen == ["dest:d"]


def test_unforward_keeps_handed_over_ops() -> None:
    src, dest = OpQueue(), OpQueue()
    src.forward_to(dest)
    src.enqueue(Op("handed"))
    src.unforward()
    src.enqueue(Op("kept"))
    assert served_types(dest) == ["handed"]
    assert served_types(src) == ["kept"]


def test_forwarding_loops_are_refused() -> None:
    a, b, c = OpQueue(), OpQueue(), OpQueue()
    a.forward_to(b)
    b.forward_to(c)
    with pytest.raises(ValueError):
        c.forward_to(a)
    with pytest.raises(ValueError):
        a.forward_to(a)


def test_version_barrier_drops_outdated_ops() -> None:
    current = {"v": 3}
    q = OpQueue(barrier=lambda op: current["v"])
    for name, version in [("old", 2), ("same", 3), ("unversioned", 0), ("newer", 4)]:
        q.enqueue(Op(name, version=version))
    assert served_types(q) == ["same", "unversioned", "newer"]
    assert q.dropped_outdated == 1


def test_version_checked_when_served_not_when_enqueued() -> None:
    current = {"v": 1}
    q = OpQueue(barrier=lambda op: current["v"])
    q.enqueue(Op("fetch", version=1))
    current["v"] = 2  # e.g. a seek bumped the toppar's version while the fetch was queued
    assert served_types(q) == []


def test_cb_ops_resolve_registered_callbacks() -> None:
    registry = CallbackRegistry()
    got: list[object] = []
    cb_id = registry.register(lambda op: got.append(op.payload))
    q = OpQueue(callbacks=registry)
    q.enqueue(Op("cb", 42, flags=CB, cb_id=cb_id))
    q.enqueue(Op("cb", 43, flags=CB, cb_id=999))  # unknown id: logged, not fatal
    assert q.serve(lambda op: pytest.fail("CB ops must not reach the handler")) == 2
    assert got == [42]
    with pytest.raises(TypeError):
        registry.register("not callable")  # type: ignore[arg-type]


def test_terminate_stops_serving() -> None:
    q = OpQueue()
    q.enqueue(Op("a"))
    q.enqueue(Op(TERMINATE))
    q.enqueue(Op("b"))
    assert q.serve() == 2
    assert q.terminated and len(q) == 1


def test_handler_error_without_poison_hook_propagates() -> None:
    q = OpQueue(lambda op: 1 / 0)
    q.enqueue(Op("x"))
    with pytest.raises(ZeroDivisionError):
        q.serve()


def test_poison_after_second_failure_and_retry_success() -> None:
    poisoned: list[tuple[str, str]] = []
    calls: dict[str, int] = {}

    def handler(op: Op) -> None:
        calls[op.type] = calls.get(op.type, 0) + 1
        if op.type == "always" or (op.type == "once" and calls[op.type] == 1):
            raise RuntimeError(op.type)

    q = OpQueue(handler, on_poison=lambda op, exc: poisoned.append((op.type, str(exc))))
    for name in ("always", "once", "fine"):
        q.enqueue(Op(name))
    assert q.serve() == 3
    assert calls == {"always": 2, "once": 2, "fine": 1}
    assert poisoned == [("always", "always")]
