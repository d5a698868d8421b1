"""Error codes, KafkaError and KafkaException.

Runs in: every process (app, main, toppar hosts, broker actors). Owns the librdkafka error-code table
(names and numbers as librdkafka defines them), their human descriptions, which codes are retriable, and
the ``KafkaError`` value type that travels between processes as a compact tuple.

Names follow confluent-kafka: the ``RD_KAFKA_RESP_ERR_`` prefix is stripped, so local (client-side)
errors keep one leading underscore (``KafkaError._MSG_TIMED_OUT``) and broker errors have none
(``KafkaError.NOT_LEADER_FOR_PARTITION``).
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "KafkaError",
    "KafkaException",
    "error_from_broker_code",
    "error_name",
    "error_description",
    "is_retriable_code",
    "ERROR_CODES",
]

# One line per code: "<number> <NAME> <own short description>".  Names/numbers are librdkafka's facts;
# descriptions are kqactors' own wording.  Negative codes (except -1) are local, client-side errors.
_TABLE = """
-199 _BAD_MSG Received a message that could not be parsed
-198 _BAD_COMPRESSION Compressed payload could not be decompressed
-197 _DESTROY Client instance is being destroyed
-196 _FAIL Generic failure talking to the broker
-195 _TRANSPORT Broker connection failed or was lost
-194 _CRIT_SYS_RESOURCE A critical system resource could not be obtained
-193 _RESOLVE Broker hostname could not be resolved
-192 _MSG_TIMED_OUT Message was not delivered within message.timeout.ms
-191 _PARTITION_EOF Reached the end of the partition
-190 _UNKNOWN_PARTITION Partition does not exist in the topic
-189 _FS File system error
-188 _UNKNOWN_TOPIC Topic does not exist in the cluster
-187 _ALL_BROKERS_DOWN No broker connection is up
-186 _INVALID_ARG Invalid argument or configuration
-185 _TIMED_OUT Operation timed out
-184 _QUEUE_FULL Local producer queue is full
-183 _ISR_INSUFF Not enough in-sync replicas
-182 _NODE_UPDATE Broker address or id changed
-181 _SSL TLS/SSL failure
-180 _WAIT_COORD Waiting for the group coordinator
-179 _UNKNOWN_GROUP Consumer group is not known
-178 _IN_PROGRESS Operation already in progress
-177 _PREV_IN_PROGRESS A previous operation is still in progress
-176 _EXISTING_SUBSCRIPTION A subscription already exists
-175 _ASSIGN_PARTITIONS Partitions are being assigned (rebalance)
-174 _REVOKE_PARTITIONS Partitions are being revoked (rebalance)
-173 _CONFLICT Conflicting use of the API
-172 _STATE Operation not valid in the current state
-171 _UNKNOWN_PROTOCOL Protocol is not known
-170 _NOT_IMPLEMENTED Feature is not implemented
-169 _AUTHENTICATION Authentication with the broker failed
-168 _NO_OFFSET No stored offset to commit or resume from
-167 _OUTDATED Operation was superseded by a newer one
-166 _TIMED_OUT_QUEUE Timed out while waiting in the transmit queue
-165 _UNSUPPORTED_FEATURE Broker does not support a required feature
-164 _WAIT_CACHE Waiting for a metadata cache update
-163 _INTR Operation was interrupted
-162 _KEY_SERIALIZATION Key could not be serialized
-161 _VALUE_SERIALIZATION Value could not be serialized
-160 _KEY_DESERIALIZATION Key could not be deserialized
-159 _VALUE_DESERIALIZATION Value could not be deserialized
-158 _PARTIAL Only part of the result is available
-157 _READ_ONLY Object is read-only
-156 _NOENT Entry not found
-155 _UNDERFLOW Read past the end of a buffer
-154 _INVALID_TYPE Value has the wrong type
-153 _RETRY Operation should be retried
-152 _PURGE_QUEUE Message purged from the local queue
-151 _PURGE_INFLIGHT Message purged while in flight
-150 _FATAL A fatal error occurred; the client is no longer usable
-149 _INCONSISTENT Inconsistent state detected
-148 _GAPLESS_GUARANTEE Gap-less delivery guarantee could not be kept
-147 _MAX_POLL_EXCEEDED max.poll.interval.ms was exceeded between polls
-146 _UNKNOWN_BROKER Broker is not known
-145 _NOT_CONFIGURED Functionality is not configured
-144 _FENCED This instance was fenced by a newer one
-143 _APPLICATION Error raised by the application
-142 _ASSIGNMENT_LOST Partition assignment was lost
-141 _NOOP Nothing to do
-140 _AUTO_OFFSET_RESET No valid offset and auto.offset.reset is error
-139 _LOG_TRUNCATION Partition log was truncated
-138 _INVALID_DIFFERENT_RECORD Record differs from the one expected
-137 _DESTROY_BROKER Broker instance is being destroyed
-1 UNKNOWN Broker reported an unexpected error
0 NO_ERROR Success
1 OFFSET_OUT_OF_RANGE Requested offset is outside the partition's range
2 INVALID_MSG Message failed its checksum or is corrupt
3 UNKNOWN_TOPIC_OR_PART Broker does not host this topic or partition
4 INVALID_MSG_SIZE Message size is invalid
5 LEADER_NOT_AVAILABLE Partition has no leader right now
6 NOT_LEADER_FOR_PARTITION Broker is not the leader (or follower) for the partition
7 REQUEST_TIMED_OUT Broker timed out processing the request
8 BROKER_NOT_AVAILABLE Broker is not available
9 REPLICA_NOT_AVAILABLE Replica is not available
10 MSG_SIZE_TOO_LARGE Message is larger than the broker accepts
11 STALE_CTRL_EPOCH Controller epoch is stale
12 OFFSET_METADATA_TOO_LARGE Offset commit metadata is too large
13 NETWORK_EXCEPTION Broker dropped the connection before responding
14 COORDINATOR_LOAD_IN_PROGRESS Coordinator is still loading
15 COORDINATOR_NOT_AVAILABLE Coordinator is not available
16 NOT_COORDINATOR Broker is not the coordinator
17 TOPIC_EXCEPTION Topic name is invalid
18 RECORD_LIST_TOO_LARGE Record batch is larger than the broker accepts
19 NOT_ENOUGH_REPLICAS Fewer in-sync replicas than required
20 NOT_ENOUGH_REPLICAS_AFTER_APPEND Written, but to fewer in-sync replicas than required
21 INVALID_REQUIRED_ACKS Requested acks value is invalid
22 ILLEGAL_GENERATION Group generation id is not current
23 INCONSISTENT_GROUP_PROTOCOL Group protocol does not match the group's
24 INVALID_GROUP_ID Group id is invalid
25 UNKNOWN_MEMBER_ID Member id is not known to the group
26 INVALID_SESSION_TIMEOUT Session timeout is outside the broker's range
27 REBALANCE_IN_PROGRESS Group is rebalancing
28 INVALID_COMMIT_OFFSET_SIZE Commit offset data size is invalid
29 TOPIC_AUTHORIZATION_FAILED Not authorized for the topic
30 GROUP_AUTHORIZATION_FAILED Not authorized for the group
31 CLUSTER_AUTHORIZATION_FAILED Not authorized for the cluster
32 INVALID_TIMESTAMP Message timestamp is out of the accepted range
33 UNSUPPORTED_SASL_MECHANISM SASL mechanism is not supported by the broker
34 ILLEGAL_SASL_STATE SASL request not valid in the current state
35 UNSUPPORTED_VERSION API version is not supported by the broker
36 TOPIC_ALREADY_EXISTS Topic already exists
37 INVALID_PARTITIONS Partition count is invalid
38 INVALID_REPLICATION_FACTOR Replication factor is invalid
39 INVALID_REPLICA_ASSIGNMENT Replica assignment is invalid
40 INVALID_CONFIG Configuration is invalid
41 NOT_CONTROLLER Broker is not the controller
42 INVALID_REQUEST Request is malformed or invalid
43 UNSUPPORTED_FOR_MESSAGE_FORMAT Not supported by the topic's message format
44 POLICY_VIOLATION Request violates a broker policy
45 OUT_OF_ORDER_SEQUENCE_NUMBER Producer sequence number is out of order
46 DUPLICATE_SEQUENCE_NUMBER Producer sequence number is a duplicate
47 INVALID_PRODUCER_EPOCH Producer epoch is not current
48 INVALID_TXN_STATE Transactional operation not valid in this state
49 INVALID_PRODUCER_ID_MAPPING Producer id does not match the transactional id
50 INVALID_TRANSACTION_TIMEOUT Transaction timeout exceeds the broker maximum
51 CONCURRENT_TRANSACTIONS Another transaction for this producer is still completing
52 TRANSACTION_COORDINATOR_FENCED Transaction coordinator has a newer epoch
53 TRANSACTIONAL_ID_AUTHORIZATION_FAILED Not authorized for the transactional id
54 SECURITY_DISABLED Security features are disabled on the broker
55 OPERATION_NOT_ATTEMPTED Operation skipped because another one failed
56 KAFKA_STORAGE_ERROR Broker disk error
57 LOG_DIR_NOT_FOUND Log directory does not exist
58 SASL_AUTHENTICATION_FAILED SASL authentication failed
59 UNKNOWN_PRODUCER_ID Broker has no state for the producer id
60 REASSIGNMENT_IN_PROGRESS Partition reassignment is in progress
61 DELEGATION_TOKEN_AUTH_DISABLED Delegation token authentication is disabled
62 DELEGATION_TOKEN_NOT_FOUND Delegation token not found
63 DELEGATION_TOKEN_OWNER_MISMATCH Delegation token owner does not match
64 DELEGATION_TOKEN_REQUEST_NOT_ALLOWED Delegation token request not allowed on this channel
65 DELEGATION_TOKEN_AUTHORIZATION_FAILED Not authorized for the delegation token
66 DELEGATION_TOKEN_EXPIRED Delegation token has expired
67 INVALID_PRINCIPAL_TYPE Principal type is not supported
68 NON_EMPTY_GROUP Group is not empty
69 GROUP_ID_NOT_FOUND Group id not found
70 FETCH_SESSION_ID_NOT_FOUND Fetch session not found
71 INVALID_FETCH_SESSION_EPOCH Fetch session epoch is invalid
72 LISTENER_NOT_FOUND Leader has no listener matching this connection
73 TOPIC_DELETION_DISABLED Topic deletion is disabled
74 FENCED_LEADER_EPOCH Leader epoch in the request is older than the broker's
75 UNKNOWN_LEADER_EPOCH Leader epoch in the request is newer than the broker's
76 UNSUPPORTED_COMPRESSION_TYPE Compression type not supported by the broker
77 STALE_BROKER_EPOCH Broker epoch is stale
78 OFFSET_NOT_AVAILABLE Leader high watermark has not caught up yet
79 MEMBER_ID_REQUIRED Group member must rejoin with the assigned member id
80 PREFERRED_LEADER_NOT_AVAILABLE Preferred leader is not available
81 GROUP_MAX_SIZE_REACHED Group has reached its maximum size
82 FENCED_INSTANCE_ID Static member fenced by another with the same group.instance.id
83 ELIGIBLE_LEADERS_NOT_AVAILABLE No eligible leaders for the partition
84 ELECTION_NOT_NEEDED Leader election is not needed
85 NO_REASSIGNMENT_IN_PROGRESS No partition reassignment is in progress
86 GROUP_SUBSCRIBED_TO_TOPIC Group is still subscribed to the topic
87 INVALID_RECORD Broker rejected a record as invalid
88 UNSTABLE_OFFSET_COMMIT Pending transactional offsets must be resolved first
89 THROTTLING_QUOTA_EXCEEDED Throttling quota exceeded
90 PRODUCER_FENCED A newer producer with the same transactional id exists
91 RESOURCE_NOT_FOUND Resource does not exist
92 DUPLICATE_RESOURCE Resource was named twice in the request
93 UNACCEPTABLE_CREDENTIAL Credential does not meet the broker's criteria
94 INCONSISTENT_VOTER_SET Voter set is inconsistent
95 INVALID_UPDATE_VERSION Update version is invalid
96 FEATURE_UPDATE_FAILED Finalized feature update failed
97 PRINCIPAL_DESERIALIZATION_FAILURE Forwarded principal could not be deserialized
100 UNKNOWN_TOPIC_ID Topic id is not known
103 INCONSISTENT_TOPIC_ID Topic id does not match the log's
110 FENCED_MEMBER_EPOCH Member epoch was fenced by the coordinator
111 UNRELEASED_INSTANCE_ID Instance id is still held by another member
112 UNSUPPORTED_ASSIGNOR Assignor is not supported by the group
113 STALE_MEMBER_EPOCH Member epoch is stale
114 MISMATCHED_ENDPOINT_TYPE Request sent to the wrong kind of endpoint
115 UNSUPPORTED_ENDPOINT_TYPE Endpoint type is not supported
116 UNKNOWN_CONTROLLER_ID Controller id is not known
117 UNKNOWN_SUBSCRIPTION_ID Telemetry subscription id is unknown or outdated
118 TELEMETRY_TOO_LARGE Telemetry payload is too large
119 INVALID_REGISTRATION Broker registration is invalid
120 TRANSACTION_ABORTABLE Transaction hit an error and must be aborted
121 INVALID_RECORD_STATE Record state is invalid for acknowledgement
122 SHARE_SESSION_NOT_FOUND Share session not found
123 INVALID_SHARE_SESSION_EPOCH Share session epoch is invalid
124 FENCED_STATE_EPOCH Share-group state epoch does not match
125 INVALID_VOTER_KEY Voter key does not match
126 DUPLICATE_VOTER Voter is already in the voter set
127 VOTER_NOT_FOUND Voter is not in the voter set
128 INVALID_REGULAR_EXPRESSION Regular expression is invalid
129 REBOOTSTRAP_REQUIRED Metadata is stale; the client must re-bootstrap
130 STREAMS_INVALID_TOPOLOGY Streams topology is invalid
131 STREAMS_INVALID_TOPOLOGY_EPOCH Streams topology epoch is invalid
132 STREAMS_TOPOLOGY_FENCED Streams topology epoch is outdated
133 SHARE_SESSION_LIMIT_REACHED Share session limit reached
"""

# Extra names librdkafka defines as aliases of the codes above.
_ALIASES = {"NOT_LEADER_OR_FOLLOWER": 6}

# Broker codes the Kafka protocol's error table marks retriable.
_RETRIABLE_BROKER = frozenset(
    {2, 3, 5, 6, 7, 9, 13, 14, 15, 16, 19, 20, 41, 51, 56, 70, 71, 72, 74, 75, 78, 80, 83, 84, 88, 89,
     100, 103, 122, 123, 124, 133}
)
# Local codes librdkafka retries by itself (INTRODUCTION.md "Producer message delivery failure").
_RETRIABLE_LOCAL = frozenset({-195, -185, -166})  # _TRANSPORT, _TIMED_OUT, _TIMED_OUT_QUEUE

_NAMES: dict[int, str] = {}
_DESCRIPTIONS: dict[int, str] = {}
ERROR_CODES: dict[str, int] = {}
"""Every error name (without the RD_KAFKA_RESP_ERR_ prefix) → number, aliases included."""


def _load_table() -> None:
    for line in _TABLE.strip().splitlines():
        number_text, name, description = line.split(" ", 2)
        code = int(number_text)
        _NAMES[code] = name
        if code < -1:
            prefix = "Local: "
        elif code > 0:
            prefix = "Broker: "
        else:
            prefix = ""
        _DESCRIPTIONS[code] = prefix + description
        ERROR_CODES[name] = code
    ERROR_CODES.update(_ALIASES)


_load_table()


def error_name(code: int) -> str:
    """Name of ``code`` as confluent-kafka prints it (``ERR_<n>?`` when unknown)."""
    name = _NAMES.get(code)
    return name if name is not None else f"ERR_{code}?"


def error_description(code: int) -> str:
    """Human description of ``code`` (``Err-<n>?`` when unknown)."""
    text = _DESCRIPTIONS.get(code)
    return text if text is not None else f"Err-{code}?"


def is_retriable_code(code: int) -> bool:
    """True when a request failing with ``code`` may succeed if simply retried."""
    return code in _RETRIABLE_BROKER or code in _RETRIABLE_LOCAL


class KafkaError:
    """An error (or event) code with an optional reason, shaped like confluent-kafka's KafkaError.

    Compares equal to its integer code and to other KafkaErrors with the same code, so
    ``err == KafkaError._PARTITION_EOF`` works.  Crosses processes as a 5-tuple (``to_tuple``).
    """

    __slots__ = ("_code", "_reason", "_fatal", "_retriable", "_txn_requires_abort")

    def __init__(
        self,
        code: int,
        reason: str | None = None,
        fatal: bool = False,
        retriable: bool = False,
        txn_requires_abort: bool = False,
    ) -> None:
        if isinstance(code, KafkaError):
            code = code._code
        if not isinstance(code, int) or isinstance(code, bool):
            raise TypeError(f"KafkaError code must be an int, not {type(code).__name__}")
        if reason is not None and not isinstance(reason, str):
            raise TypeError(f"KafkaError reason must be a str or None, not {type(reason).__name__}")
        self._code = code
        self._reason = reason
        self._fatal = bool(fatal)
        self._retriable = bool(retriable)
        self._txn_requires_abort = bool(txn_requires_abort)

    def code(self) -> int:
        return self._code

    def name(self) -> str:
        return error_name(self._code)

    def str(self) -> str:
        """The reason if one was given, else the code's description."""
        return self._reason if self._reason is not None else error_description(self._code)

    def fatal(self) -> bool:
        return self._fatal

    def retriable(self) -> bool:
        return self._retriable

    def txn_requires_abort(self) -> bool:
        return self._txn_requires_abort

    # -- serialisation -------------------------------------------------------------------------------
    def to_tuple(self) -> tuple[int, str | None, bool, bool, bool]:
        """Compact msgpack-friendly form: (code, reason, fatal, retriable, txn_requires_abort)."""
        return (self._code, self._reason, self._fatal, self._retriable, self._txn_requires_abort)

    @classmethod
    def from_tuple(cls, data: tuple | list) -> KafkaError:
        """Inverse of ``to_tuple`` (msgpack hands back lists; both are accepted)."""
        return cls(*data)

    def __reduce__(self) -> tuple[Any, ...]:
        return (KafkaError, self.to_tuple())

    # -- comparisons ---------------------------------------------------------------------------------
    def _other_code(self, other: object) -> int | None:
        if isinstance(other, KafkaError):
            return other._code
        if isinstance(other, int) and not isinstance(other, bool):
            return other
        return None

    def __eq__(self, other: object) -> bool:
        code = self._other_code(other)
        return NotImplemented if code is None else self._code == code

    def __ne__(self, other: object) -> bool:
        code = self._other_code(other)
        return NotImplemented if code is None else self._code != code

    def __lt__(self, other: object) -> bool:
        code = self._other_code(other)
        return NotImplemented if code is None else self._code < code

    def __le__(self, other: object) -> bool:
        code = self._other_code(other)
        return NotImplemented if code is None else self._code <= code

    def __gt__(self, other: object) -> bool:
        code = self._other_code(other)
        return NotImplemented if code is None else self._code > code

    def __ge__(self, other: object) -> bool:
        code = self._other_code(other)
        return NotImplemented if code is None else self._code >= code

    def __hash__(self) -> int:
        return hash(self._code)

    def __repr__(self) -> str:
        fatal = "FATAL," if self._fatal else ""
        return f'KafkaError{{{fatal}code={self.name()},val={self._code},str="{self.str()}"}}'

    __str__ = __repr__


def _install_constants() -> None:
    for name, code in ERROR_CODES.items():
        setattr(KafkaError, name, code)


_install_constants()


class KafkaException(Exception):
    """Exception carrying a KafkaError in ``args[0]``, like confluent-kafka's.

    ``KafkaException(KafkaError(...))`` is the usual form; ``KafkaException(code, reason)`` keeps its
    arguments as given (as confluent-kafka does) but ``error`` still returns a KafkaError.
    """

    @property
    def error(self) -> KafkaError:
        """The carried KafkaError (built from an int code if the exception was raised with one)."""
        first = self.args[0] if self.args else None
        if isinstance(first, KafkaError):
            return first
        if isinstance(first, int) and not isinstance(first, bool):
            reason = self.args[1] if len(self.args) > 1 and isinstance(self.args[1], str) else None
            return KafkaError(first, reason)
        return KafkaError(KafkaError._FAIL, str(first) if first is not None else None)


def error_from_broker_code(code: int, reason: str | None = None) -> KafkaError:
    """KafkaError for an error code found in a broker response (0 gives a NO_ERROR KafkaError).

    Retriability follows the Kafka protocol's error table.  Transaction errors that leave the
    transaction abortable (not fatal) are flagged ``txn_requires_abort`` by the transaction manager,
    not here, because it depends on the request that failed.
    """
    return KafkaError(code, reason, retriable=is_retriable_code(code))
