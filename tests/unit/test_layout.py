"""The package's layering rules (docs/architecture.md, "Rules the layout keeps"), read from the imports of
every module, lazy ones inside functions included."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "kqactors"

# package → the kqactors packages its modules must never import
FORBIDDEN = {
    "runtime": {"actors", "client", "core", "ops", "protocol", "records", "config", "errors", "message"},
    "protocol": {"actors", "client", "core", "runtime"},
    "core": {"actors", "client", "runtime"},
    "ops": {"actors", "client", "core", "runtime", "protocol"},
    "actors": {"client"},
    "client": {"actors"},
    "aio": {"actors"},
    "spark": {"actors", "core", "runtime", "ops"},
    "records": {"actors", "client", "core", "runtime", "ops"},
}


def _imported_kqactors_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return {name for name in names if name.startswith("kqactors.")}


def _modules_of(package: str) -> list[Path]:
    return sorted(p for p in (PACKAGE / package).rglob("*.py") if "generated" not in p.parts)


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_a_package_imports_no_layer_it_must_not_know(package: str) -> None:
    modules = _modules_of(package)
    assert modules, f"kqactors/{package} has no modules"
    offences = []
    for path in modules:
        for name in _imported_kqactors_modules(path):
            top = name.split(".")[1]
            if top in FORBIDDEN[package]:
                offences.append(f"{path.relative_to(PACKAGE.parent)} imports {name}")
    assert not offences, "\n".join(offences)


def test_op_types_are_defined_once() -> None:
    """Every op type string is assigned in exactly one module of kqactors/ops."""
    seen: dict[str, str] = {}
    duplicates = []
    for path in _modules_of("ops"):
        for node in ast.parse(path.read_text()).body:
            if (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                    and node.targets[0].id.isupper() and isinstance(node.value, ast.Constant)
                    and isinstance(node.value.value, str)):
                value = node.value.value
                if value in seen:
                    duplicates.append(f"{value!r} in {seen[value]} and {path.name}")
                seen[value] = path.name
    assert len(seen) > 40, "the op contracts were not found"
    assert not duplicates, duplicates


def test_the_checker_sees_a_forbidden_import(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from kqactors.actors.main import MainActor\n")
    assert "kqactors.actors.main" in _imported_kqactors_modules(module)
