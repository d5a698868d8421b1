"""Runs in: developer tool / tests (never at client runtime). Owns generating kqactors/protocol/generated/.

Usage: ``python -m kqactors.protocol.codegen [--specs DIR] [--out DIR]``. The specs directory defaults to
``$KQ_PROTOCOL_SPECS`` or ``<repo>/../shared/kafka-protocol/message``; the output to the package's own
``generated`` directory. Output is deterministic so a test can regenerate and diff.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from kqactors.protocol.codegen.emit import HEADER, ModuleEmitter
from kqactors.protocol.codegen.spec import MessageSpec, default_specs_dir, load_spec, snake_case

# The APIs the client speaks (request/response pairs), by spec name without the Request/Response suffix.
APIS: tuple[str, ...] = (
    "ApiVersions", "Metadata", "Produce", "Fetch", "ListOffsets", "OffsetForLeaderEpoch", "FindCoordinator",
    "JoinGroup", "SyncGroup", "Heartbeat", "LeaveGroup", "OffsetCommit", "OffsetFetch", "OffsetDelete",
    "DescribeGroups", "ListGroups", "DeleteGroups", "ConsumerGroupHeartbeat", "ConsumerGroupDescribe", "CreateTopics", "DeleteTopics",
    "CreatePartitions", "DeleteRecords", "DescribeConfigs", "AlterConfigs", "IncrementalAlterConfigs",
    "DescribeCluster", "CreateAcls", "DescribeAcls", "DeleteAcls", "DescribeUserScramCredentials",
    "AlterUserScramCredentials", "ElectLeaders", "InitProducerId", "AddPartitionsToTxn", "AddOffsetsToTxn", "EndTxn",
    "TxnOffsetCommit", "SaslHandshake", "SaslAuthenticate",
)
# Non-API modules: module name → spec names.
EXTRA_MODULES: dict[str, tuple[str, ...]] = {
    "headers": ("RequestHeader", "ResponseHeader"),
    "consumer_protocol": ("ConsumerProtocolSubscription", "ConsumerProtocolAssignment"),
}
PACKAGE_GENERATED = Path(__file__).resolve().parents[1] / "generated"


def _render_module(module: str, specs: list[MessageSpec], doc: str) -> str:
    emitter = ModuleEmitter(doc)
    for spec in specs:
        emitter.add_message(spec)
    return emitter.render()


def _render_registry(entries: list[tuple[int, str, str, MessageSpec]]) -> str:
    lines = [HEADER.rstrip("\n"),
             '"""Runs in: any process. Table of the generated APIs (modules are imported lazily by',
             'kqactors.protocol.api).',
             "",
             "API_TABLE: api key → (name, module, request class, response class, valid versions,",
             'first flexible version or None)."""', "", "API_TABLE = {"]
    for key, name, module, request in sorted(entries, key=lambda e: e[0]):
        first_flexible = request.flexible[0] if request.flexible else None
        lines.append(f"    {key}: ({name!r}, {module!r}, {name + 'Request'!r}, {name + 'Response'!r}, "
                     f"{request.valid!r}, {first_flexible!r}),")
    lines.append("}")
    return "\n".join(lines) + "\n"


def render_all(specs_dir: Path) -> dict[str, str]:
    """Return {file name: source} for every generated file."""
    files: dict[str, str] = {}
    registry: list[tuple[int, str, str, MessageSpec]] = []
    for api in APIS:
        request = load_spec(specs_dir / f"{api}Request.json")
        response = load_spec(specs_dir / f"{api}Response.json")
        module = snake_case(api)
        doc = (f"Runs in: any process. Wire codec for {api} (api key {request.api_key}), versions "
               f"{request.valid[0]}-{request.valid[1]}: request and response classes.")
        files[f"{module}.py"] = _render_module(module, [request, response], doc)
        registry.append((request.api_key, api, module, request))
    for module, names in EXTRA_MODULES.items():
        specs = [load_spec(specs_dir / f"{name}.json") for name in names]
        doc = f"Runs in: any process. Wire codec for {', '.join(names)}."
        files[f"{module}.py"] = _render_module(module, specs, doc)
    files["__init__.py"] = _render_registry(registry)
    return files


def generate(specs_dir: Path | None = None, out_dir: Path | None = None) -> list[Path]:
    specs_dir = Path(specs_dir) if specs_dir else default_specs_dir()
    out_dir = Path(out_dir) if out_dir else PACKAGE_GENERATED
    if not specs_dir.is_dir():
        raise FileNotFoundError(f"Kafka message specs not found at {specs_dir} (set KQ_PROTOCOL_SPECS)")
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name, source in render_all(specs_dir).items():
        path = out_dir / name
        path.write_text(source, encoding="utf-8")
        written.append(path)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kqactors.protocol.codegen", description=__doc__)
    parser.add_argument("--specs", type=Path, default=None, help="directory of Kafka message JSON specs")
    parser.add_argument("--out", type=Path, default=None, help="output directory (default: the package)")
    args = parser.parse_args(argv)
    paths = generate(args.specs, args.out)
    print(f"wrote {len(paths)} files to {paths[0].parent}")
    return 0
