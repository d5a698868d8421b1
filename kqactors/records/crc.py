"""Runs in: wherever record batches are built or checked (toppars, a consumer's decoders). Owns the CRC-32C of
RecordBatch v2 (``crc32c(data) -> int``).

The function is the ``crc32c`` package's C extension, loaded straight from the package's directory: the
package's ``__init__`` imports ``importlib.metadata`` (and through it ``email``) and its command line
(``argparse``) only to set ``__version__``, ~15 ms of every host's start-up. If the extension cannot be found
that way, the package is imported as usual.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
from collections.abc import Callable
from typing import Any


def _load_extension() -> Any:
    spec = importlib.util.find_spec("crc32c")  # finds the package without running its __init__
    directory = (spec.submodule_search_locations or [None])[0] if spec is not None else None
    if directory is None:
        return None
    finder = importlib.machinery.FileFinder(
        directory, (importlib.machinery.ExtensionFileLoader, importlib.machinery.EXTENSION_SUFFIXES))
    extension = finder.find_spec("crc32c._crc32c")
    if extension is None or extension.loader is None:
        return None
    module = importlib.util.module_from_spec(extension)
    extension.loader.exec_module(module)
    return module


def _crc32c() -> Callable[..., int]:
    try:
        module = _load_extension()
    except (ImportError, OSError):
        module = None
    if module is not None and callable(getattr(module, "crc32c", None)):
        return module.crc32c
    from crc32c import crc32c as function  # the package as usual

    return function


crc32c: Callable[..., int] = _crc32c()
