"""``kqactors topics|groups|cluster ...``: the AdminClient from the shell, text tables or ``--json``.

Runs in: the user's shell process (kqactors.admin.AdminClient spawns its main host). Owns the admin command
lines and how their answers are shown: a column table for people, one JSON document for scripts (``--json``).
Every call goes through the public AdminClient API; like ``kqactors cat``, no embedded broker is started.

Exit status: 0 when every item succeeded, 1 when any failed (the others are still shown; each failure is a
``% ERROR:`` line on stderr), 2 for bad options (no broker given, malformed ``-X``/``--set``).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from typing import Any, TextIO

from kqactors.errors import KafkaError, KafkaException

__all__ = ["add_parser", "table", "run_admin"]

OK, FAILED, USAGE = 0, 1, 2


def add_parser(subparsers: Any) -> None:
    """Register ``topics``, ``groups`` and ``cluster`` on the ``kqactors`` command's subparsers."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("-b", "--bootstrap", dest="brokers", default=None, help="bootstrap broker(s) host[:port],...")
    common.add_argument("-X", dest="properties", action="append", default=[], metavar="PROP=VAL",
                        help="client configuration property (repeatable)")
    common.add_argument("--json", action="store_true", help="print one JSON document instead of a table")
    common.add_argument("--timeout", type=float, default=15.0, help="seconds to wait for answers (default 15)")

    topics = subparsers.add_parser("topics", help="list, describe, create, delete topics; alter their configs",
                                   description="Topic administration through the AdminClient.")
    topics.set_defaults(handler=lambda _o: _missing(topics))
    tsub = topics.add_subparsers(dest="action", metavar="ACTION")
    tl = tsub.add_parser("list", parents=[common], help="topics with partition and replica counts")
    tl.add_argument("--internal", action="store_true", help="include internal topics (names starting with _)")
    tl.set_defaults(handler=_run(_topics_list))
    td = tsub.add_parser("describe", parents=[common], help="partitions, leaders, replicas, ISRs (and configs)")
    td.add_argument("topics", nargs="+", metavar="TOPIC")
    td.add_argument("--configs", action="store_true", help="also show each topic's configuration")
    td.set_defaults(handler=_run(_topics_describe))
    tc = tsub.add_parser("create", parents=[common], help="create topics")
    tc.add_argument("topics", nargs="+", metavar="TOPIC")
    tc.add_argument("-p", "--partitions", type=int, default=-1, help="partitions (default: the broker's)")
    tc.add_argument("-r", "--replication-factor", type=int, default=-1, help="replicas (default: the broker's)")
    tc.add_argument("-c", "--config", action="append", default=[], metavar="KEY=VALUE", help="topic config")
    tc.set_defaults(handler=_run(_topics_create))
    tdel = tsub.add_parser("delete", parents=[common], help="delete topics")
    tdel.add_argument("topics", nargs="+", metavar="TOPIC")
    tdel.set_defaults(handler=_run(_topics_delete))
    ta = tsub.add_parser("alter-config", parents=[common], help="set or delete topic configs (incremental)")
    ta.add_argument("topic", metavar="TOPIC")
    ta.add_argument("--set", dest="set_", action="append", default=[], metavar="KEY=VALUE")
    ta.add_argument("--delete", action="append", default=[], metavar="KEY")
    ta.set_defaults(handler=_run(_topics_alter_config))

    groups = subparsers.add_parser("groups", help="list, describe, delete consumer groups; show their offsets",
                                   description="Consumer group administration through the AdminClient.")
    groups.set_defaults(handler=lambda _o: _missing(groups))
    gsub = groups.add_subparsers(dest="action", metavar="ACTION")
    gl = gsub.add_parser("list", parents=[common], help="groups with state and type")
    gl.set_defaults(handler=_run(_groups_list))
    gd = gsub.add_parser("describe", parents=[common], help="state, coordinator, members and assignments")
    gd.add_argument("groups", nargs="+", metavar="GROUP")
    gd.set_defaults(handler=_run(_groups_describe))
    gdel = gsub.add_parser("delete", parents=[common], help="delete (empty) groups")
    gdel.add_argument("groups", nargs="+", metavar="GROUP")
    gdel.set_defaults(handler=_run(_groups_delete))
    go = gsub.add_parser("offsets", parents=[common], help="committed offsets, end offsets and lag")
    go.add_argument("group", metavar="GROUP")
    go.set_defaults(handler=_run(_groups_offsets))

    cluster = subparsers.add_parser("cluster", help="describe the cluster",
                                    description="Cluster information through the AdminClient.")
    cluster.set_defaults(handler=lambda _o: _missing(cluster))
    csub = cluster.add_subparsers(dest="action", metavar="ACTION")
    cd = csub.add_parser("describe", parents=[common], help="cluster id, controller and brokers")
    cd.set_defaults(handler=_run(_cluster_describe))


def _missing(parser: argparse.ArgumentParser) -> int:
    parser.print_help(sys.stderr)
    return USAGE


class _Usage(ValueError):
    """A bad option value: exit 2."""


def _pairs(items: Sequence[str], what: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise _Usage(f"{what} expects KEY=VALUE, got {item!r}")
        out[key.strip()] = value
    return out


def _run(action: Callable[[Any, argparse.Namespace, _Output], None]) -> Callable[[argparse.Namespace], int]:
    """Wrap an action: build the AdminClient from -b/-X, run, map failures to exit codes."""
    def handler(args: argparse.Namespace, stdout: TextIO | None = None, stderr: TextIO | None = None) -> int:
        return run_admin(action, args, stdout or sys.stdout, stderr or sys.stderr)
    return handler


def run_admin(action: Callable[[Any, argparse.Namespace, _Output], None], args: argparse.Namespace,
              stdout: TextIO, stderr: TextIO) -> int:
    """Run one admin ``action`` for ``args`` writing to ``stdout``/``stderr``; returns the exit status."""
    from kqactors.admin import AdminClient

    try:
        config = _pairs(args.properties, "-X")
        if args.brokers:
            config["bootstrap.servers"] = args.brokers
        if not (config.get("bootstrap.servers") or config.get("metadata.broker.list")):
            raise _Usage("no broker: give -b host:port (or -X bootstrap.servers=...)")
        output = _Output(stdout, stderr, args.json)
        with AdminClient(config) as admin:
            action(admin, args, output)
        output.flush()
        return FAILED if output.failed else OK
    except _Usage as exc:
        stderr.write(f"kqactors {args.command}: {exc}\n")
        return USAGE
    except KafkaException as exc:
        stderr.write(f"% ERROR: {_text(exc)}\n")
        return FAILED
    except (ValueError, TypeError) as exc:
        stderr.write(f"kqactors {args.command}: {exc}\n")
        return USAGE


class _Output:
    """Collects an action's result (rows or a JSON document) and its per-item failures."""

    def __init__(self, stdout: TextIO, stderr: TextIO, as_json: bool) -> None:
        self.stdout, self.stderr, self.as_json = stdout, stderr, as_json
        self.failed = False
        self.document: Any = None
        self.text: list[str] = []

    def error(self, what: str, exc: BaseException) -> None:
        self.failed = True
        self.stderr.write(f"% ERROR: {what}: {_text(exc)}\n")

    def flush(self) -> None:
        if self.as_json:
            self.stdout.write(json.dumps(self.document, sort_keys=True) + "\n")
        elif self.text:
            self.stdout.write("\n".join(self.text) + "\n")
        self.stdout.flush()


def _text(exc: BaseException) -> str:
    error = exc.args[0] if isinstance(exc, KafkaException) and exc.args else None
    if isinstance(error, KafkaError):
        return f"{error.name()}: {error.str()}"
    return str(exc)


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    """Left-aligned columns separated by two spaces (numbers right-aligned), header first."""
    cells = [[str(h) for h in headers]] + [["" if v is None else str(v) for v in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    numeric = [all(isinstance(row[i], int) for row in rows) and bool(rows) for i in range(len(headers))]
    lines = []
    for row in cells:
        parts = [cell.rjust(widths[i]) if numeric[i] else cell.ljust(widths[i]) for i, cell in enumerate(row)]
        lines.append("  ".join(parts).rstrip())
    return lines


def _results(futures: dict[Any, Any], timeout: float, out: _Output, what: str) -> dict[Any, Any]:
    """Each future's result, or its failure reported (and left out)."""
    answers = {}
    for key, future in futures.items():
        try:
            answers[key] = future.result(timeout)
        except KafkaException as exc:
            out.error(f"{what} {getattr(key, 'name', key)}", exc)
        except TimeoutError as exc:
            out.error(f"{what} {getattr(key, 'name', key)}", TimeoutError(f"no answer within {timeout} s ({exc})"))
    return answers


# ---- topics ------------------------------------------------------------------------------------------------
def _topics_list(admin: Any, args: argparse.Namespace, out: _Output) -> None:
    metadata = admin.list_topics(timeout=args.timeout)
    rows = []
    for name in sorted(metadata.topics):
        if name.startswith("_") and not args.internal:
            continue
        meta = metadata.topics[name]
        replication = max((len(p.replicas) for p in meta.partitions.values()), default=0)
        rows.append((name, len(meta.partitions), replication, meta.error.str() if meta.error else ""))
    out.document = [{"topic": n, "partitions": p, "replication_factor": r, "error": e or None}
                    for n, p, r, e in rows]
    out.text = table(("TOPIC", "PARTITIONS", "REPLICATION", "ERROR"), rows)


def _node(node: Any) -> int | None:
    return None if node is None else node.id


def _topics_describe(admin: Any, args: argparse.Namespace, out: _Output) -> None:
    from kqactors import TopicCollection
    from kqactors.admin import ConfigResource

    described = _results(admin.describe_topics(TopicCollection(list(args.topics)), request_timeout=args.timeout),
                         args.timeout + 5, out, "topic")
    configs: dict[str, dict[str, str]] = {}
    if args.configs and described:
        resources = {name: ConfigResource("topic", name) for name in described}
        futures = admin.describe_configs(list(resources.values()), request_timeout=args.timeout)
        by_name = {resource.name: future for resource, future in futures.items()}
        for name, entries in _results(by_name, args.timeout + 5, out, "configs of topic").items():
            configs[name] = {key: entry.value for key, entry in sorted(entries.items())}
    document = []
    for name in args.topics:
        if name not in described:
            continue
        topic = described[name]
        partitions = [{"partition": p.id, "leader": _node(p.leader), "replicas": [n.id for n in p.replicas],
                       "isr": [n.id for n in p.isr]} for p in topic.partitions]
        entry = {"topic": name, "topic_id": str(topic.topic_id), "internal": topic.is_internal,
                 "partitions": partitions}
        if args.configs:
            entry["configs"] = configs.get(name, {})
        document.append(entry)
        out.text.append(f"topic {name}  id {topic.topic_id}  partitions {len(partitions)}"
                        + ("  (internal)" if topic.is_internal else ""))
        out.text += ["  " + line for line in table(
            ("PARTITION", "LEADER", "REPLICAS", "ISR"),
            [(p["partition"], p["leader"], ",".join(map(str, p["replicas"])), ",".join(map(str, p["isr"])))
             for p in partitions])]
        if args.configs:
            out.text += ["  " + line for line in table(("CONFIG", "VALUE"), sorted(configs.get(name, {}).items()))]
    out.document = document


def _topics_create(admin: Any, args: argparse.Namespace, out: _Output) -> None:
    from kqactors.admin import NewTopic

    try:
        config = _pairs(args.config, "-c")
    except _Usage:
        raise
    new = [NewTopic(name, args.partitions, args.replication_factor, config=config or None) for name in args.topics]
    done = _results(admin.create_topics(new, operation_timeout=args.timeout, request_timeout=args.timeout),
                    args.timeout + 5, out, "create topic")
    out.document = {"created": sorted(done)}
    out.text = [f"created topic {name}" for name in args.topics if name in done]


def _topics_delete(admin: Any, args: argparse.Namespace, out: _Output) -> None:
    done = _results(admin.delete_topics(list(args.topics), operation_timeout=args.timeout,
                                        request_timeout=args.timeout), args.timeout + 5, out, "delete topic")
    out.document = {"deleted": sorted(done)}
    out.text = [f"deleted topic {name}" for name in args.topics if name in done]


def _topics_alter_config(admin: Any, args: argparse.Namespace, out: _Output) -> None:
    from kqactors.admin import AlterConfigOpType, ConfigEntry, ConfigResource

    sets = _pairs(args.set_, "--set")
    if not sets and not args.delete:
        raise _Usage("alter-config needs --set KEY=VALUE and/or --delete KEY")
    entries = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in sets.items()]
    entries += [ConfigEntry(k, None, incremental_operation=AlterConfigOpType.DELETE) for k in args.delete]
    resource = ConfigResource("topic", args.topic, incremental_configs=entries)
    futures = admin.incremental_alter_configs([resource], request_timeout=args.timeout)
    done = _results({args.topic: futures[resource]}, args.timeout + 5, out, "alter configs of topic")
    out.document = {"topic": args.topic, "set": sets, "deleted": list(args.delete), "ok": bool(done)}
    if done:
        out.text = [f"topic {args.topic}: set {k}={v}" for k, v in sets.items()]
        out.text += [f"topic {args.topic}: deleted {k} (back to its default)" for k in args.delete]


# ---- groups ------------------------------------------------------------------------------------------------
def _enum_name(value: Any) -> str | None:
    return None if value is None else getattr(value, "name", str(value))


def _groups_list(admin: Any, args: argparse.Namespace, out: _Output) -> None:
    result = admin.list_consumer_groups(request_timeout=args.timeout).result(args.timeout + 5)
    for error in result.errors or ():
        out.error("list groups", KafkaException(error) if isinstance(error, KafkaError) else error)
    rows = sorted((g.group_id, _enum_name(getattr(g, "state", None)), _enum_name(getattr(g, "type", None)),
                   "yes" if g.is_simple_consumer_group else "no") for g in result.valid)
    out.document = [{"group": g, "state": s, "type": t, "simple": simple == "yes"} for g, s, t, simple in rows]
    out.text = table(("GROUP", "STATE", "TYPE", "SIMPLE"), rows)


def _groups_describe(admin: Any, args: argparse.Namespace, out: _Output) -> None:
    described = _results(admin.describe_consumer_groups(list(args.groups), request_timeout=args.timeout),
                         args.timeout + 5, out, "group")
    document = []
    for name in args.groups:
        if name not in described:
            continue
        group = described[name]
        members = []
        for member in group.members or ():
            assigned = [f"{tp.topic}[{tp.partition}]" for tp in
                        (member.assignment.topic_partitions if member.assignment else [])]
            members.append({"member_id": member.member_id, "client_id": member.client_id, "host": member.host,
                            "group_instance_id": member.group_instance_id, "assignment": assigned})
        entry = {"group": name, "state": _enum_name(group.state), "type": _enum_name(getattr(group, "type", None)),
                 "simple": group.is_simple_consumer_group, "coordinator": _node(group.coordinator),
                 "assignor": group.partition_assignor or None, "members": members}
        document.append(entry)
        out.text.append(f"group {name}  state {entry['state']}  type {entry['type']}  coordinator "
                        f"{entry['coordinator']}  assignor {entry['assignor'] or '-'}  members {len(members)}")
        if members:
            out.text += ["  " + line for line in table(
                ("MEMBER", "CLIENT", "HOST", "ASSIGNMENT"),
                [(m["member_id"], m["client_id"], m["host"], ",".join(m["assignment"])) for m in members])]
    out.document = document


def _groups_delete(admin: Any, args: argparse.Namespace, out: _Output) -> None:
    done = _results(admin.delete_consumer_groups(list(args.groups), request_timeout=args.timeout),
                    args.timeout + 5, out, "delete group")
    out.document = {"deleted": sorted(done)}
    out.text = [f"deleted group {name}" for name in args.groups if name in done]


def _groups_offsets(admin: Any, args: argparse.Namespace, out: _Output) -> None:
    from kqactors import ConsumerGroupTopicPartitions, TopicPartition
    from kqactors.admin import OffsetSpec

    futures = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(args.group)],
                                                request_timeout=args.timeout)
    answers = _results(futures, args.timeout + 5, out, "offsets of group")
    if args.group not in answers:
        out.document = []
        return
    committed = sorted((tp.topic, tp.partition, tp.offset) for tp in answers[args.group].topic_partitions)
    ends: dict[tuple[str, int], int] = {}
    if committed:
        latest = admin.list_offsets({TopicPartition(t, p): OffsetSpec.latest() for t, p, _o in committed},
                                    request_timeout=args.timeout)
        for tp, result in _results(latest, args.timeout + 5, out, "end offset of").items():
            ends[(tp.topic, tp.partition)] = result.offset
    rows = []
    for topic, partition, offset in committed:
        end = ends.get((topic, partition))
        lag = end - offset if end is not None and offset >= 0 else None
        rows.append((topic, partition, offset, end, lag))
    out.document = [{"topic": t, "partition": p, "committed": o, "end": e, "lag": lag} for t, p, o, e, lag in rows]
    out.text = table(("TOPIC", "PARTITION", "COMMITTED", "END", "LAG"), rows)


# ---- cluster -----------------------------------------------------------------------------------------------
def _cluster_describe(admin: Any, args: argparse.Namespace, out: _Output) -> None:
    result = admin.describe_cluster(request_timeout=args.timeout).result(args.timeout + 5)
    controller = _node(result.controller)
    nodes = sorted(result.nodes or (), key=lambda n: n.id)
    out.document = {"cluster_id": result.cluster_id, "controller": controller,
                    "brokers": [{"id": n.id, "host": n.host, "port": n.port, "rack": n.rack} for n in nodes]}
    out.text = [f"cluster {result.cluster_id}  controller {controller}  brokers {len(nodes)}"]
    out.text += ["  " + line for line in table(
        ("BROKER", "HOST", "PORT", "RACK", ""),
        [(n.id, n.host, n.port, n.rack or "", "controller" if n.id == controller else "") for n in nodes])]
