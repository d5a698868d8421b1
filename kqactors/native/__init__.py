"""The switch for kqactors' optional C speed-ups, two extension modules built by setup.py.

``kqactors.native._native`` (kqactors/native/_native*.c; the overview is in _native.c), in the app process: the
producer's per-message work (packing, buffer append, delivery reports; producer_buffers,
producer_core.packing), ``ProducerCore`` (the C base of kqactors.client.producer.producer.Producer, whose produce() does the
common case in C and passes every other call on to ``Producer._produce_py``, the Python body: the
reference, and produce() itself when NATIVE is None) and the consumer's Message building in
MessageBatch.take() (consumer_core.packing). ``kqactors.native._native_records`` (kqactors/native/_native_records.c), in
toppar hosts: the record codec's per-record loops, ``pack_v2_records`` (indexing fetched records for the
consumer) and ``append_packed`` (encoding produced records), called by consumer_core/packing.py and
records/batch_v2.py. Each C file's header lists what each function is the twin of.

Runs in: any process that imports the producer, the consumer or the record codec. ``NATIVE`` and
``NATIVE_RECORDS`` are the extension modules when they were built and import, unless the environment sets
``KQACTORS_NATIVE=0`` (which switches off both); otherwise None and the pure-Python twins run. Either way
the behaviour is the same (DESIGN.md §3 rule 6): the unit tests run both and compare them.
``NATIVE_AVAILABLE`` / ``NATIVE_RECORDS_AVAILABLE`` say whether an extension imports at all (tests use them
regardless of the switch).
"""

from __future__ import annotations

import os
from types import ModuleType

__all__ = ["NATIVE", "NATIVE_AVAILABLE", "NATIVE_DISABLED", "NATIVE_RECORDS", "NATIVE_RECORDS_AVAILABLE",
           "native_module", "records_module"]

NATIVE_DISABLED = os.environ.get("KQACTORS_NATIVE", "").strip() == "0"


def native_module() -> ModuleType | None:
    """The extension module bound to kqactors' Message class, or None when it is not built."""
    try:
        from kqactors.native import _native
    except ImportError:
        return None
    from kqactors import message

    _native.bind_message(message.Message)
    message.use_tracker(_native.track)
    return _native


def records_module() -> ModuleType | None:
    """The record codec's extension module, or None when it is not built."""
    try:
        from kqactors.native import _native_records
    except ImportError:
        return None
    return _native_records


_module = native_module()
NATIVE_AVAILABLE = _module is not None
NATIVE: ModuleType | None = None if NATIVE_DISABLED else _module

_records_module = records_module()
NATIVE_RECORDS_AVAILABLE = _records_module is not None
NATIVE_RECORDS: ModuleType | None = None if NATIVE_DISABLED else _records_module
