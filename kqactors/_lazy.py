"""Runs in: every process. Owns lazy package exports (PEP 562): a package lists which submodule defines each
public name, and a name's submodule is imported at the name's first use, so importing the package (or one of
its submodules) loads nothing else. Used where hosts must not pay for what they do not run (kqactors,
kqactors.config, kqactors.records)."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any


def lazy_exports(package: str, module_of: dict[str, str],
                 namespace: dict[str, Any]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of ``package`` (whose globals are ``namespace``): a name of
    ``module_of`` is read from ``package.<its module>`` at first use and then kept as a plain attribute.
    ``"module:attribute"`` exports that module's attribute under another name; ``"module:"`` is the submodule
    itself."""

    def __getattr__(name: str) -> Any:
        where = module_of.get(name)
        if where is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module, colon, attribute = where.partition(":")
        loaded = importlib.import_module(f"{package}.{module}")
        value = loaded if colon and not attribute else getattr(loaded, attribute or name)
        namespace[name] = value  # later lookups are plain module attributes
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(module_of))

    return __getattr__, __dir__
