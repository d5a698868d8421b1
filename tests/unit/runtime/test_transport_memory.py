"""The memory a process keeps for the ops it holds: received through the ZeroMQ transport, a small op costs
its own bytes, not a share of libzmq's read buffers (the soak's producer main host, which holds every batch
until the broker answers, kept ~7x the bytes of the batches it held)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

_HOLD = textwrap.dedent("""
    import ctypes, sys, time
    import zmq
    from kqactors.runtime.op import Op
    from kqactors.runtime.transport_zmq import ZmqInbox, ZmqOutbox, make_run_dir, new_context, remove_run_dir

    class MallInfo2(ctypes.Structure):
        _fields_ = [(name, ctypes.c_size_t) for name in
                    "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost".split()]

    mallinfo2 = ctypes.CDLL(None).mallinfo2
    mallinfo2.restype = MallInfo2

    def in_use():
        info = mallinfo2()
        return info.uordblks + info.hblkhd

    COUNT, SIZE = 2000, 2700  # a producer's XMIT of a 100 B x ~20 batch
    context = new_context() if sys.argv[1] == "runtime" else zmq.Context()
    run_dir = make_run_dir()
    inbox, outbox = ZmqInbox(context, run_dir, "rx"), ZmqOutbox(context, run_dir)
    outbox.send("rx", [Op("WARM", None, target="x")])
    while not inbox.recv_within(100):
        pass
    before = in_use()
    held = []
    for i in range(COUNT):
        outbox.send("rx", [Op("XMIT", {"n": i}, [bytes([i % 251]) * SIZE], target="x")])
    deadline = time.monotonic() + 30
    while len(held) < COUNT and time.monotonic() < deadline:
        for batch in inbox.recv_within(100):
            held.extend(batch)
    assert len(held) == COUNT and all(bytes(op.frames[0]) == bytes([op.payload["n"] % 251]) * SIZE
                                      for op in held)
    print((in_use() - before) / COUNT)
    outbox.close()
    inbox.close()
    remove_run_dir(run_dir)
""")


def _bytes_kept_per_held_op(context_kind: str) -> float:
    out = subprocess.run([sys.executable, "-c", _HOLD, context_kind], capture_output=True, text=True,
                         check=True, timeout=120).stdout
    return float(out.split()[-1])


def test_a_held_op_keeps_about_its_own_bytes() -> None:
    runtime = _bytes_kept_per_held_op("runtime")
    plain = _bytes_kept_per_held_op("plain")
    # 2,700 B of frame, the zmq message and the op's Python objects above 512 B: well under 2x the frame.
    # A plain context's zero-copy receive keeps a view into a shared read block per message (~7 KB here).
    assert runtime < 2 * 2700, (runtime, plain)
    assert plain > 1.5 * runtime, (runtime, plain)
