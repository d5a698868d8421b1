"""Fixtures of the record codec tests: ``native_records`` is the C extension ``kqactors._native_records``
whose functions the tests compare with their pure-Python references (DESIGN.md §3 rule 6).

As in tests/unit/producer/conftest.py, a missing extension fails (CI always has a compiler, so it is a build
problem to see); only ``KQACTORS_NATIVE=0`` skips, on purpose.
"""

from __future__ import annotations

import pytest

from kqactors.native import NATIVE_DISABLED, records_module


@pytest.fixture(scope="module")
def native_records():
    """The extension module, or a skip (KQACTORS_NATIVE=0) / a failure (not built)."""
    if NATIVE_DISABLED:
        pytest.skip("KQACTORS_NATIVE=0: the native path is switched off")
    module = records_module()
    if module is None:
        pytest.fail("kqactors._native_records is not built (pip install -e . or python setup.py build_ext "
                    "--inplace); set KQACTORS_NATIVE=0 to test the pure-Python path alone")
    return module
