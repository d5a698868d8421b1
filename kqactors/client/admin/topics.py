"""The AdminClient's topic and partition methods: create_topics, delete_topics, create_partitions,
describe_topics, describe_cluster, list_topics, cluster_id, delete_records, list_offsets, elect_leaders.

Runs in: the app process. Each method checks its arguments as confluent-kafka does (its Python layer, its C
layer, then librdkafka's checks that fail the futures rather than raise), plans the protocol calls
(kqactors.ops.admin) and sets the futures from the outcomes, on the dispatcher's thread.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Callable
from typing import Any

from kqactors._model import ElectionType, IsolationLevel, TopicCollection, TopicPartitionInfo
from kqactors.admin._cluster import DescribeClusterResult
from kqactors.admin._listoffsets import OFFSET_SPEC_MAX_TIMESTAMP, ListOffsetsResultInfo, OffsetSpec
from kqactors.admin._records import DeletedRecords
from kqactors.admin._topic import NewPartitions, NewTopic, TopicDescription, c_int
from kqactors.client.admin import results as res
from kqactors.client.admin.base import AdminBase
from kqactors.client.admin.dispatch import Outcome, new_future
from kqactors.client.handle import ClusterMetadata, timeout_seconds
from kqactors.errors import KafkaError
from kqactors.message import TopicPartition
from kqactors.ops import admin as aops

__all__ = ["TopicsMixin"]

PARTITIONS_MAX = 100000  # librdkafka's RD_KAFKAP_PARTITIONS_MAX
BROKERS_MAX = 10000  # RD_KAFKAP_BROKERS_MAX
_TIMEOUTS = ("request_timeout", "operation_timeout")


def _assignment(assignment: Any, count: int, low: int, what: str) -> list[list[int]]:
    """A replica assignment as librdkafka takes it: a list of ``low``..``count`` non-empty int lists."""
    message = f"replica_assignment must be a list of int lists with an outer size of {what}"
    if not isinstance(assignment, list) or not low <= len(assignment) <= count:
        raise ValueError(message)
    out = []
    for replicas in assignment:
        if not isinstance(replicas, list) or not replicas:
            raise ValueError(message)
        if not all(isinstance(r, int) for r in replicas):
            raise ValueError(message)
        if len(replicas) > BROKERS_MAX:
            raise ValueError(f"Too many brokers specified (RD_KAFKAP_BROKERS_MAX={BROKERS_MAX})")
        out.append([c_int(r) for r in replicas])
    return out


def _configs(config: dict[Any, Any] | None) -> list[dict[str, str]]:
    return [{"name": str(name), "value": str(value)} for name, value in (config or {}).items()]


def _new_topic(topic: NewTopic) -> dict[str, Any]:
    """The CreateTopics entry of a NewTopic, after librdkafka's checks (ValueError)."""
    name = topic.topic
    if not -1 <= topic.num_partitions <= PARTITIONS_MAX:
        raise ValueError(f"Invalid NewTopic({name}): num_partitions out of expected range 1..{PARTITIONS_MAX} "
                         "or -1 for broker default")
    if not -1 <= topic.replication_factor <= BROKERS_MAX:
        raise ValueError(f"Invalid NewTopic({name}): replication_factor out of expected range -1..{BROKERS_MAX}")
    entry: dict[str, Any] = {"name": name, "num_partitions": topic.num_partitions,
                             "replication_factor": topic.replication_factor, "configs": _configs(topic.config)}
    if topic.replica_assignment is not None:
        if topic.replication_factor != -1:
            raise ValueError("replication_factor and replica_assignment are mutually exclusive")
        count = topic.num_partitions
        if count == -1:
            count = len(topic.replica_assignment) if isinstance(topic.replica_assignment, list) else 0
        assignment = _assignment(topic.replica_assignment, count, count, "num_partitions")
        if assignment and topic.num_partitions == -1:
            raise ValueError("Specifying a default partition count and a replica assignment are mutually exclusive")
        # with an assignment the counts travel as -1 (the protocol's rule)
        entry.update(num_partitions=-1, replication_factor=-1,
                     assignments=[{"partition_index": i, "broker_ids": b} for i, b in enumerate(assignment)])
    return entry


def _new_partitions(spec: NewPartitions) -> dict[str, Any]:
    if not 1 <= spec.new_total_count <= PARTITIONS_MAX:
        raise ValueError(f"Invalid NewPartitions({spec.topic}): new_total_cnt out of expected range "
                         f"1..{PARTITIONS_MAX}")
    entry: dict[str, Any] = {"name": spec.topic, "count": spec.new_total_count, "assignments": None}
    if spec.replica_assignment is not None:
        assignment = _assignment(spec.replica_assignment, spec.new_total_count, 1,
                                 "new_total_count - existing partition count")
        entry["assignments"] = [{"broker_ids": b} for b in assignment]
    return entry


def _per_key(futures: dict[Any, concurrent.futures.Future], outcome: Outcome, what: str,
             items: list[dict[str, Any]], key: Callable[[dict[str, Any]], Any],
             ignore: Callable[[int], bool] = lambda _code: False) -> None:
    """Set each future from its item's error_code/error_message (None on success); a failed call fails all."""
    failure = res.outcome_exception(outcome, what)
    if failure is not None:
        AdminBase._fail(futures.values(), failure)
        return
    found = {key(item): item for item in items}
    for name, future in futures.items():
        item = found.get(name)
        if item is None:
            future.set_exception(res.exception(KafkaError._FAIL, f"{name} missing from the response"))
            continue
        code = int(item.get("error_code") or 0)
        if code and not ignore(code):
            future.set_exception(res.exception(code, item.get("error_message")))
        else:
            future.set_result(None)


class TopicsMixin(AdminBase):
    """Topic, partition and cluster methods of the AdminClient."""

    # ---- create / delete ---------------------------------------------------------------------------------
    def create_topics(self, new_topics: list[NewTopic], **kwargs: Any) -> dict[str, concurrent.futures.Future]:
        """Create topics. Options: ``operation_timeout`` (s: how long the broker waits for the creation to
        complete; 0 returns at once), ``request_timeout`` (s, the whole call), ``validate_only``. Returns
        {topic: future} whose result is None."""
        futures = self._futures([t.topic for t in new_topics])
        options = self._options(kwargs, ("validate_only", *_TIMEOUTS))
        if not isinstance(new_topics, list) or not new_topics:
            raise ValueError("Expected non-empty list of NewTopic objects")
        self._check_open()
        entries = []
        for topic in new_topics:
            if not isinstance(topic, NewTopic):
                raise ValueError("Expected list of NewTopic objects")
            entries.append(_new_topic(topic))
        args = {"topics": entries, "timeout_ms": max(options.operation_timeout_ms, 0),
                "validate_only": options.validate_only}
        no_wait = options.operation_timeout_ms <= 0

        def complete(outcomes: list[Outcome]) -> None:
            # a broker not asked to wait answers REQUEST_TIMED_OUT for a creation that is under way: not an error
            _per_key(futures, outcomes[0], "CreateTopics", ((outcomes[0].get("result") or {}).get("topics") or []),
                     lambda t: t["name"], lambda code: no_wait and code == KafkaError.REQUEST_TIMED_OUT)

        self._submit(aops.CREATETOPICS, [aops.call(["controller"], "admin:CreateTopics", args)], options, complete,
                     futures.values())
        return dict(futures)

    def delete_topics(self, topics: list[str], **kwargs: Any) -> dict[str, concurrent.futures.Future]:
        """Delete topics. Options: ``operation_timeout``, ``request_timeout``. Returns {topic: future} whose
        result is None."""
        futures = self._futures(topics)
        options = self._options(kwargs, _TIMEOUTS)
        if not isinstance(topics, list):
            raise TypeError(f"argument 1 must be list, not {type(topics).__name__}")
        if not topics:
            raise ValueError("Expected non-empty list of topic strings")
        self._check_open()
        names = []
        for topic in topics:
            if topic is None:
                raise ValueError("Expected list of topic strings, not NoneType")
            names.append(str(topic))
        args = {"topic_names": names, "timeout_ms": max(options.operation_timeout_ms, 0)}
        no_wait = options.operation_timeout_ms <= 0

        def complete(outcomes: list[Outcome]) -> None:
            _per_key(futures, outcomes[0], "DeleteTopics",
                     ((outcomes[0].get("result") or {}).get("responses") or []), lambda t: t["name"],
                     lambda code: no_wait and code == KafkaError.REQUEST_TIMED_OUT)

        self._submit(aops.DELETETOPICS, [aops.call(["controller"], "admin:DeleteTopics", args)], options, complete,
                     futures.values())
        return dict(futures)

    def create_partitions(self, new_partitions: list[NewPartitions], **kwargs: Any
                          ) -> dict[str, concurrent.futures.Future]:
        """Grow topics to new partition counts. Options: ``operation_timeout``, ``request_timeout``,
        ``validate_only``. Returns {topic: future} whose result is None."""
        futures = self._futures([p.topic for p in new_partitions])
        options = self._options(kwargs, ("validate_only", *_TIMEOUTS))
        if not isinstance(new_partitions, list) or not new_partitions:
            raise ValueError("Expected non-empty list of NewPartitions objects")
        self._check_open()
        entries = []
        for spec in new_partitions:
            if not isinstance(spec, NewPartitions):
                raise ValueError("Expected list of NewPartitions objects")
            entries.append(_new_partitions(spec))
        args = {"topics": entries, "timeout_ms": max(options.operation_timeout_ms, 0),
                "validate_only": options.validate_only}
        no_wait = options.operation_timeout_ms <= 0

        def complete(outcomes: list[Outcome]) -> None:
            _per_key(futures, outcomes[0], "CreatePartitions",
                     ((outcomes[0].get("result") or {}).get("results") or []), lambda t: t["name"],
                     lambda code: no_wait and code == KafkaError.REQUEST_TIMED_OUT)

        self._submit(aops.CREATEPARTITIONS, [aops.call(["controller"], "admin:CreatePartitions", args)], options,
                     complete, futures.values())
        return dict(futures)

    # ---- metadata ----------------------------------------------------------------------------------------
    def list_topics(self, topic: str | None = None, timeout: float = -1) -> ClusterMetadata:
        """Cluster metadata: every topic, or just ``topic`` (never created by this call). ``timeout`` in
        seconds (-1: socket.timeout.ms)."""
        self._check_open()
        return self._handle.list_topics(topic, timeout)

    def cluster_id(self, timeout: float = -1) -> str | None:
        """The cluster id from fresh metadata (None when the brokers report none)."""
        self._check_open()
        cluster = self._handle.metadata([], timeout_seconds(timeout, self._default_timeout_ms / 1000), False)
        return cluster.cluster_id

    def describe_topics(self, topics: TopicCollection, **kwargs: Any) -> dict[str, concurrent.futures.Future]:
        """Describe topics (ids, partitions with their leader, replicas and ISR as Nodes). Options:
        ``include_authorized_operations``, ``request_timeout``. Returns {topic: future of TopicDescription}."""
        if not isinstance(topics, TopicCollection):
            raise TypeError("Expected input to be instance of TopicCollection")
        names = topics.topic_names
        if not isinstance(names, list):
            raise TypeError("Expected list of topic names to be described")
        futures = self._futures(names)
        options = self._options(kwargs, ("request_timeout", "include_authorized_operations"))
        for index, name in enumerate(names):
            if not isinstance(name, str):
                raise TypeError(f"Expected list of topics strings, not {type(name).__name__}")
            if not name:
                raise ValueError(f"Empty topic name at index {index} isn't allowed")
        self._check_open()
        if not names:
            return dict(futures)
        if len(set(names)) != len(names):
            self._fail(futures.values(), res.exception(KafkaError._INVALID_ARG, "Duplicate topics not allowed"))
            return dict(futures)
        args = {"topics": [{"name": name} for name in names], "allow_auto_topic_creation": False,
                "include_topic_authorized_operations": options.include_authorized_operations}

        def complete(outcomes: list[Outcome]) -> None:
            failure = res.outcome_exception(outcomes[0], "DescribeTopics")
            if failure is not None:
                self._fail(futures.values(), failure)
                return
            result = outcomes[0]["result"]
            nodes = res.nodes_by_id(result.get("brokers") or [])
            found = {t["name"]: t for t in result.get("topics") or []}
            for name, future in futures.items():
                topic = found.get(name)
                code = KafkaError.UNKNOWN_TOPIC_OR_PART if topic is None else int(topic["error_code"])
                if code:
                    future.set_exception(res.exception(code))
                    continue
                partitions = [TopicPartitionInfo(p["partition_index"], res.node_of(nodes, p["leader_id"]),
                                                 [res.node_of(nodes, r) for r in p["replica_nodes"]],
                                                 [res.node_of(nodes, r) for r in p["isr_nodes"]])
                              for p in sorted(topic["partitions"], key=lambda p: p["partition_index"])]
                operations = res.acl_operations(topic.get("topic_authorized_operations")) \
                    if options.include_authorized_operations else None
                future.set_result(TopicDescription(name, res.uuid_of(topic.get("topic_id")),
                                                   bool(topic.get("is_internal")), partitions, operations))

        self._submit(aops.DESCRIBETOPICS, [aops.call(["controller"], "admin:Metadata", args)], options, complete,
                     futures.values())
        return dict(futures)

    def describe_cluster(self, **kwargs: Any) -> concurrent.futures.Future:
        """Describe the cluster: its id, controller and nodes. Options: ``include_authorized_operations``,
        ``request_timeout``. Returns a future of DescribeClusterResult."""
        future = new_future()
        options = self._options(kwargs, ("request_timeout", "include_authorized_operations"))
        self._check_open()
        args = {"topics": [], "allow_auto_topic_creation": False,
                "include_cluster_authorized_operations": options.include_authorized_operations}

        def complete(outcomes: list[Outcome]) -> None:
            failure = res.outcome_exception(outcomes[0], "DescribeCluster")
            if failure is not None:
                future.set_exception(failure)
                return
            result = outcomes[0]["result"]
            nodes = res.nodes_by_id(result.get("brokers") or [])
            operations = res.acl_operations(result.get("cluster_authorized_operations")) \
                if options.include_authorized_operations else None
            future.set_result(DescribeClusterResult(res.node_of(nodes, int(result.get("controller_id", -1))),
                                                    list(nodes.values()), result.get("cluster_id"), operations))

        self._submit(aops.DESCRIBECLUSTER, [aops.call(["controller"], "admin:Metadata", args)], options, complete,
                     [future])
        return future

    # ---- records and offsets -----------------------------------------------------------------------------
    def delete_records(self, topic_partition_offsets: list[TopicPartition], **kwargs: Any
                       ) -> dict[TopicPartition, concurrent.futures.Future]:
        """Delete each partition's records before its ``offset`` (OFFSET_END: all). Options:
        ``operation_timeout``, ``request_timeout``. Returns {TopicPartition: future of DeletedRecords}."""
        request = topic_partition_offsets
        if not isinstance(request, list):
            raise TypeError(f"Expected Request to be a list, got '{type(request).__name__}' ")
        for tp in request:
            if not isinstance(tp, TopicPartition):
                raise TypeError(f"Element of the request list must be of type 'TopicPartition' got "
                                f"'{type(tp).__name__}' ")
            if tp.partition < 0:
                raise ValueError("'partition' cannot be negative")
        futures = self._futures(request, TopicPartition)
        options = self._options(kwargs, _TIMEOUTS)
        self._check_open()
        if not request:
            return dict(futures)
        if len({(tp.topic, tp.partition) for tp in request}) != len(request):
            self._fail(futures.values(), res.exception(KafkaError._INVALID_ARG, "Duplicate partitions not allowed"))
            return dict(futures)
        rows = [[tp.topic, tp.partition, tp.offset] for tp in request]
        common = {"timeout_ms": max(options.operation_timeout_ms, 0)}

        def complete(outcomes: list[Outcome]) -> None:
            def value(row: list[Any]) -> Any:
                return DeletedRecords(row[3])
            self._set_rows(futures, outcomes[0], "DeleteRecords", value)

        self._submit(aops.DELETERECORDS, [aops.call(["leaders"], "admin:DeleteRecords", common, rows)], options,
                     complete, futures.values())
        return dict(futures)

    def list_offsets(self, topic_partition_offsets: dict[TopicPartition, OffsetSpec], **kwargs: Any
                     ) -> dict[TopicPartition, concurrent.futures.Future]:
        """Look up offsets: each partition's earliest, latest, max-timestamp offset or the first at a timestamp
        (OffsetSpec). Options: ``isolation_level`` (IsolationLevel), ``request_timeout``. Returns
        {TopicPartition: future of ListOffsetsResultInfo}."""
        specs = topic_partition_offsets
        if not isinstance(specs, dict):
            raise TypeError("Expected topic_partition_offsets to be dict of [TopicPartitions,OffsetSpec] for list "
                            "offsets request")
        for tp, spec in specs.items():
            if tp is None:
                raise TypeError("partition cannot be None")
            if not isinstance(tp, TopicPartition):
                raise TypeError("partition must be a TopicPartition")
            if tp.topic is None:
                raise TypeError("partition topic name cannot be None")
            if not isinstance(tp.topic, str):
                raise TypeError("partition topic name must be string")
            if not tp.topic:
                raise ValueError("partition topic name cannot be empty")
            if tp.partition < 0:
                raise ValueError("partition index must be non-negative")
            if spec is None:
                raise TypeError("OffsetSpec cannot be None")
            if not isinstance(spec, OffsetSpec):
                raise TypeError("Value must be a OffsetSpec")
        kwargs = dict(kwargs)
        if "isolation_level" in kwargs:
            level = kwargs.pop("isolation_level")
            if not isinstance(level, IsolationLevel):
                raise TypeError("isolation_level argument should be an IsolationLevel")
            kwargs["isolation_level_value"] = level.value
        asked = [TopicPartition(tp.topic, int(tp.partition), int(spec._value)) for tp, spec in specs.items()]
        futures = self._futures(asked, TopicPartition, TypeError)
        options = self._options(kwargs, ("isolation_level_value", "request_timeout"))
        self._check_open()
        for index, tp in enumerate(asked):
            if tp.offset < OFFSET_SPEC_MAX_TIMESTAMP:
                self._fail(futures.values(), res.exception(
                    KafkaError._INVALID_ARG, f"Partition {index} has an invalid offset {tp.offset}"))
                return dict(futures)
        if not asked:
            return dict(futures)
        rows = [[tp.topic, tp.partition, tp.offset] for tp in asked]

        def complete(outcomes: list[Outcome]) -> None:
            self._set_rows(futures, outcomes[0], "ListOffsets",
                           lambda row: ListOffsetsResultInfo(row[3], row[4], row[5]))

        self._submit(aops.LISTOFFSETS, [aops.call(["leaders"], "ListOffsets",
                                                  {"isolation_level": options.isolation_level}, rows)],
                     options, complete, futures.values())
        return dict(futures)

    def _set_rows(self, futures: dict[TopicPartition, concurrent.futures.Future], outcome: Outcome, what: str,
                  value: Callable[[list[Any]], Any]) -> None:
        """Set per-partition futures from a ["leaders"] call's rows [topic, partition, error_code, ...]."""
        failure = res.outcome_exception(outcome, what)
        if failure is not None:
            self._fail(futures.values(), failure)
            return
        rows = {(row[0], row[1]): row for row in (outcome.get("result") or {}).get("rows") or ()}
        for tp, future in futures.items():
            row = rows.get((tp.topic, tp.partition))
            code = KafkaError._TIMED_OUT if row is None else int(row[2])
            if code:
                future.set_exception(res.exception(code))
            else:
                future.set_result(value(row))

    # ---- leader election ---------------------------------------------------------------------------------
    def elect_leaders(self, election_type: ElectionType, partitions: list[TopicPartition] | None = None,
                      **kwargs: Any) -> concurrent.futures.Future:
        """Elect preferred or unclean leaders of ``partitions`` (None: every partition). Options:
        ``operation_timeout``, ``request_timeout``. Returns a future of {TopicPartition: KafkaError or None}."""
        if not isinstance(election_type, ElectionType):
            raise TypeError("Expected 'election_type' to be of type 'ElectionType'")
        if partitions is not None:
            if not isinstance(partitions, list):
                raise TypeError(f"Expected 'partitions' to be a list, got '{type(partitions).__name__}'")
            for tp in partitions:
                if not isinstance(tp, TopicPartition):
                    raise TypeError(f"Element of the 'partitions' list must be of type 'TopicPartition' got "
                                    f"'{type(tp).__name__}' ")
                if tp.partition < 0:
                    raise ValueError("Elements of the 'partitions' list must not have negative value for "
                                     "'partition' field")
        future = new_future()
        options = self._options(kwargs, _TIMEOUTS)
        self._check_open()
        if partitions is not None and len({(tp.topic, tp.partition) for tp in partitions}) != len(partitions):
            future.set_exception(res.exception(KafkaError._INVALID_ARG, "Duplicate partitions specified"))
            return future
        by_topic: dict[str, list[int]] = {}
        for tp in partitions or ():
            by_topic.setdefault(tp.topic, []).append(tp.partition)
        args = {"election_type": election_type.value, "timeout_ms": max(options.operation_timeout_ms, 0),
                "topic_partitions": None if partitions is None else
                [{"topic": topic, "partitions": parts} for topic, parts in by_topic.items()]}

        def complete(outcomes: list[Outcome]) -> None:
            failure = res.outcome_exception(outcomes[0], "ElectLeaders")
            if failure is None and int((outcomes[0].get("result") or {}).get("error_code") or 0):
                failure = res.exception(int(outcomes[0]["result"]["error_code"]))
            if failure is not None:
                future.set_exception(failure)
                return
            elected: dict[TopicPartition, KafkaError | None] = {}
            for topic in outcomes[0]["result"].get("replica_election_results") or ():
                for part in topic["partition_result"]:
                    code = int(part["error_code"])
                    elected[TopicPartition(topic["topic"], part["partition_id"])] = \
                        res.kafka_error(code, part.get("error_message")) if code else None
            future.set_result(elected)

        self._submit(aops.ELECTLEADERS, [aops.call(["controller"], "admin:ElectLeaders", args)], options, complete,
                     [future])
        return future
