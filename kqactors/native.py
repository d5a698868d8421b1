"""The switch for kqactors' optional C speed-ups (``kqactors._native``, built from kqactors/_native.c).

Runs in: any process that imports the producer. ``NATIVE`` is the extension module when it was built and
imports, unless the environment sets ``KQACTORS_NATIVE=0``; otherwise None and the pure-Python twins run.
Either way the behaviour is the same (DESIGN.md §3 rule 6): the unit tests run both and compare them.
``NATIVE_AVAILABLE`` says whether the extension imports at all (tests use it regardless of the switch).

What it speeds up: the producer's per-message app-side work — the packers and ``Buffers.append``
(kqactors/producer_buffers.py), the delivery-report loop, and ``ProducerCore``, the C base of
kqactors.producer.Producer whose produce() does the common case in C and passes every other call on to
``Producer._produce_py``, the Python body (the reference, and produce() itself when NATIVE is None).
"""

from __future__ import annotations

import os
from types import ModuleType

__all__ = ["NATIVE", "NATIVE_AVAILABLE", "NATIVE_DISABLED", "native_module"]

NATIVE_DISABLED = os.environ.get("KQACTORS_NATIVE", "").strip() == "0"


def native_module() -> ModuleType | None:
    """The extension module bound to kqactors' Message class, or None when it is not built."""
    try:
        from kqactors import _native
    except ImportError:
        return None
    from kqactors import message

    _native.bind_message(message.Message)
    message.use_tracker(_native.track)
    return _native


_module = native_module()
NATIVE_AVAILABLE = _module is not None
NATIVE: ModuleType | None = None if NATIVE_DISABLED else _module
