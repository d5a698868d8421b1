"""Fixtures of the unit tests: ``impl`` runs a test on both implementations of the app-side hot path (the
producer's buffers and packing, the consumer's MessageBatch.take), the pure-Python twins and the C extension
``kqactors.native._native`` (DESIGN.md §3 rule 6); ``native`` is that extension alone and ``native_records`` the
toppar hosts' one, ``kqactors.native._native_records`` (the record codec tests compare it with its references).

A native case fails (it does not skip) when its extension is not built: CI always has a compiler, so a
missing extension there is a build problem to see. Only ``KQACTORS_NATIVE=0`` skips it, on purpose.
"""

from __future__ import annotations

import pytest

from kqactors.native import NATIVE_DISABLED, native_module, records_module


def require_native(load=native_module, name="kqactors.native._native"):
    """The extension module ``load()`` returns, or a skip (KQACTORS_NATIVE=0) / a failure (not built)."""
    if NATIVE_DISABLED:
        pytest.skip("KQACTORS_NATIVE=0: the native path is switched off")
    module = load()
    if module is None:
        pytest.fail(f"{name} is not built (pip install -e . or python setup.py build_ext --inplace); "
                    "set KQACTORS_NATIVE=0 to test the pure-Python path alone")
    return module


@pytest.fixture(params=["python", "native"], scope="module")
def impl(request):
    """None for the pure-Python twins, else the ``kqactors.native._native`` module."""
    return None if request.param == "python" else require_native()


@pytest.fixture(scope="module")
def native():
    return require_native()


@pytest.fixture(scope="module")
def native_records():
    return require_native(records_module, "kqactors.native._native_records")
