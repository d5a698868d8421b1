"""kqactors.ingest is an application of the client: it imports the public API (kqactors, kqactors.errors) and
its own modules, never the client's internals, the actors or the runtime."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[3] / "kqactors"
ALLOWED = ("kqactors.ingest", "kqactors.errors")


def test_ingest_uses_only_the_public_api():
    offences = []
    modules = sorted((PACKAGE / "ingest").rglob("*.py")) + [PACKAGE / "cli" / "ingest.py"]
    for path in modules:
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            for name in names:
                if name.startswith("kqactors") and name != "kqactors" and not name.startswith(ALLOWED):
                    offences.append(f"{path.name} imports {name}")
    assert modules and not offences, offences


def test_every_module_says_where_it_runs():
    for path in sorted((PACKAGE / "ingest").glob("*.py")):
        doc = ast.get_docstring(ast.parse(path.read_text())) or ""
        assert "Runs in:" in doc, f"{path.name}: the docstring says where it runs"
