"""The configuration property table: every property kqactors implements, with type, range and default.

Runs in: the app process (validation) and actor hosts (typed lookups on the shipped dict).  Owns the
facts about properties — librdkafka's names, aliases, types, ranges, defaults and producer/consumer
scope (from librdkafka's CONFIGURATION.md) plus the confluent-kafka Python-level keys and kqactors'
own ``kqactors.*`` properties.  Validation and cross-property rules live in ``kqactors.config.config``.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Property", "PROPERTIES", "ALIASES", "LIBRDKAFKA_ONLY", "PYTHON_ONLY", "BOOL", "INT", "FLOAT",
           "STRING", "ENUM", "FLAGS", "CALLBACK", "POINTER", "PARTITIONER", "ASSIGNORS", "DEDICATED", "INTERNAL"]

BOOL = "bool"
INT = "int"
FLOAT = "float"
STRING = "string"
ENUM = "enum"          # one of ``choices`` (case-insensitive, stored lower-case as listed)
FLAGS = "flags"        # comma-separated subset of ``choices`` (stored as a list)
CALLBACK = "callback"  # Python callable; never leaves the app process
POINTER = "pointer"    # any Python object (opaque, logger); never leaves the app process
PARTITIONER = "partitioner"  # a built-in partitioner name or a Python callable
ASSIGNORS = "assignors"  # partition.assignment.strategy: a CSV string, names checked when a consumer starts

INT32_MAX = 2147483647


@dataclass(frozen=True)
class Property:
    """One configuration property.  ``scope`` is "*" (both), "P" (producer) or "C" (consumer)."""

    name: str
    type: str
    scope: str
    default: object = None
    min: float | None = None
    max: float | None = None
    choices: tuple[str, ...] = ()
    topic: bool = False  # topic-level: may also appear inside "default.topic.config"
    doc: str = ""

    @property
    def shippable(self) -> bool:
        """True if the value may cross to actor processes (callables and opaque objects may not)."""
        return self.type not in (CALLBACK, POINTER)


def _p(name: str, type_: str, scope: str, default: object = None, lo: float | None = None,
       hi: float | None = None, choices: tuple[str, ...] = (), topic: bool = False, doc: str = "") -> Property:
    return Property(name, type_, scope, default, lo, hi, choices, topic, doc)


_DEBUG_CONTEXTS = ("generic", "broker", "topic", "metadata", "feature", "queue", "msg", "protocol", "cgrp",
                   "security", "fetch", "interceptor", "plugin", "consumer", "admin", "eos", "mock",
                   "assignor", "conf", "telemetry", "all")

_TABLE: tuple[Property, ...] = (
    # ---- general ---------------------------------------------------------------------------------
    _p("client.id", STRING, "*", "rdkafka"),
    _p("metadata.broker.list", STRING, "*", "", doc="Initial brokers, CSV of host[:port]"),
    _p("message.max.bytes", INT, "*", 1000000, 1000, 1000000000),
    _p("receive.message.max.bytes", INT, "*", 100000000, 1000, INT32_MAX),
    _p("max.in.flight.requests.per.connection", INT, "*", 1000000, 1, 1000000),
    _p("topic.metadata.refresh.interval.ms", INT, "*", 300000, -1, 3600000),
    _p("metadata.max.age.ms", INT, "*", 900000, 1, 86400000,
       doc="Defaults to 3 x topic.metadata.refresh.interval.ms"),
    _p("topic.metadata.refresh.fast.interval.ms", INT, "*", 100, 1, 60000),
    _p("topic.metadata.propagation.max.ms", INT, "*", 30000, 0, 3600000),
    _p("debug", FLAGS, "*", [], choices=_DEBUG_CONTEXTS),
    _p("socket.timeout.ms", INT, "*", 60000, 10, 300000),
    _p("socket.connection.setup.timeout.ms", INT, "*", 30000, 1000, INT32_MAX),
    _p("socket.keepalive.enable", BOOL, "*", False),
    _p("socket.nagle.disable", BOOL, "*", True),
    _p("socket.send.buffer.bytes", INT, "*", 0, 0, 100000000),
    _p("socket.receive.buffer.bytes", INT, "*", 0, 0, 100000000),
    _p("connections.max.idle.ms", INT, "*", 0, 0, INT32_MAX),
    _p("broker.address.family", ENUM, "*", "any", choices=("any", "v4", "v6")),
    _p("reconnect.backoff.ms", INT, "*", 100, 0, 3600000),
    _p("reconnect.backoff.max.ms", INT, "*", 10000, 0, 3600000),
    _p("retry.backoff.ms", INT, "*", 100, 1, 300000),
    _p("retry.backoff.max.ms", INT, "*", 1000, 1, 300000),
    _p("statistics.interval.ms", INT, "*", 0, 0, 86400000),
    _p("log_level", INT, "*", 6, 0, 7),
    _p("log.thread.name", BOOL, "*", True),
    _p("log.connection.close", BOOL, "*", True),
    _p("api.version.request", BOOL, "*", True),
    _p("api.version.request.timeout.ms", INT, "*", 10000, 1, 300000),
    _p("allow.auto.create.topics", BOOL, "*", False),
    _p("security.protocol", ENUM, "*", "plaintext", choices=("plaintext", "ssl", "sasl_plaintext", "sasl_ssl")),
    _p("client.rack", STRING, "*", ""),
    _p("error_cb", CALLBACK, "*"),
    _p("throttle_cb", CALLBACK, "*"),
    _p("stats_cb", CALLBACK, "*"),
    _p("logger", POINTER, "*", doc="logging.Logger-like object (has .log(level, msg))"),
    # ---- producer --------------------------------------------------------------------------------
    _p("transactional.id", STRING, "P", ""),
    _p("transaction.timeout.ms", INT, "P", 60000, 1000, INT32_MAX),
    _p("enable.idempotence", BOOL, "P", False),
    _p("enable.gapless.guarantee", BOOL, "P", False),
    _p("queue.buffering.max.messages", INT, "P", 100000, 0, INT32_MAX),
    _p("queue.buffering.max.kbytes", INT, "P", 1048576, 1, INT32_MAX),
    _p("queue.buffering.max.ms", FLOAT, "P", 5.0, 0, 900000),
    _p("message.send.max.retries", INT, "P", INT32_MAX, 0, INT32_MAX),
    _p("queue.buffering.backpressure.threshold", INT, "P", 1, 1, 1000000),
    _p("compression.codec", ENUM, "P", "none", choices=("none", "gzip", "snappy", "lz4", "zstd", "inherit"),
       topic=True),
    _p("compression.level", INT, "P", -1, -1, 12, topic=True),
    _p("batch.num.messages", INT, "P", 10000, 1, 1000000),
    _p("batch.size", INT, "P", 1000000, 1, INT32_MAX),
    _p("delivery.report.only.error", BOOL, "P", False),
    _p("on_delivery", CALLBACK, "P", doc="Delivery report callback(err, msg); confluent-kafka's key"),
    _p("sticky.partitioning.linger.ms", INT, "P", 10, 0, 900000, doc="Defaults to 2 x linger.ms"),
    _p("request.required.acks", INT, "P", -1, -1, 1000, topic=True, doc='"all" means -1'),
    _p("request.timeout.ms", INT, "P", 30000, 1, 900000, topic=True),
    _p("message.timeout.ms", INT, "P", 300000, 0, INT32_MAX, topic=True),
    _p("partitioner", PARTITIONER, "P", "consistent_random", topic=True,
       choices=("random", "consistent", "consistent_random", "murmur2", "murmur2_random", "fnv1a",
                "fnv1a_random")),
    # ---- consumer --------------------------------------------------------------------------------
    _p("group.id", STRING, "C", ""),
    _p("group.instance.id", STRING, "C", ""),
    _p("partition.assignment.strategy", ASSIGNORS, "C", ["range", "roundrobin"]),
    _p("session.timeout.ms", INT, "C", 45000, 1, 3600000),
    _p("heartbeat.interval.ms", INT, "C", 3000, 1, 3600000),
    _p("group.protocol.type", STRING, "C", "consumer"),
    _p("group.protocol", ENUM, "C", "classic", choices=("classic", "consumer")),
    _p("group.remote.assignor", STRING, "C", ""),
    _p("coordinator.query.interval.ms", INT, "C", 600000, 1, 3600000),
    _p("max.poll.interval.ms", INT, "C", 300000, 1, 86400000),
    _p("enable.auto.commit", BOOL, "C", True),
    _p("auto.commit.interval.ms", INT, "C", 5000, 0, 86400000),
    _p("enable.auto.offset.store", BOOL, "C", True),
    _p("queued.min.messages", INT, "C", 100000, 1, 10000000),
    _p("queued.max.messages.kbytes", INT, "C", 65536, 1, 2097151),
    _p("fetch.wait.max.ms", INT, "C", 500, 0, 300000),
    _p("fetch.queue.backoff.ms", INT, "C", 1000, 0, 300000),
    _p("fetch.message.max.bytes", INT, "C", 1048576, 1, 1000000000),
    _p("fetch.max.bytes", INT, "C", 52428800, 0, 2147483135),
    _p("fetch.min.bytes", INT, "C", 1, 0, INT32_MAX),
    _p("fetch.error.backoff.ms", INT, "C", 500, 0, 300000),
    _p("isolation.level", ENUM, "C", "read_committed", choices=("read_uncommitted", "read_committed")),
    _p("enable.partition.eof", BOOL, "C", False),
    _p("check.crcs", BOOL, "C", False),
    _p("auto.offset.reset", ENUM, "C", "largest", topic=True,
       choices=("smallest", "earliest", "beginning", "largest", "latest", "end", "error")),
    _p("on_commit", CALLBACK, "C", doc="Offset commit result callback(err, partitions)"),
    # ---- security: TLS (Python's ssl module) and SASL; rules in kqactors.config.security -----------
    _p("ssl.ca.location", STRING, "*", "", doc="CA file or directory (or 'probe'); none: the system CA store"),
    _p("ssl.ca.pem", STRING, "*", ""),
    _p("ssl.ca.certificate.stores", STRING, "*", "Root", doc="Windows certificate stores; not used elsewhere"),
    _p("ssl.certificate.location", STRING, "*", ""),
    _p("ssl.certificate.pem", STRING, "*", ""),
    _p("ssl.key.location", STRING, "*", ""),
    _p("ssl.key.pem", STRING, "*", "", doc="secret"),
    _p("ssl.key.password", STRING, "*", "", doc="secret"),
    _p("ssl.keystore.location", STRING, "*", "", doc="PKCS#12 (needs the cryptography package)"),
    _p("ssl.keystore.password", STRING, "*", "", doc="secret"),
    _p("ssl.crl.location", STRING, "*", ""),
    _p("ssl.cipher.suites", STRING, "*", ""),
    _p("ssl.curves.list", STRING, "*", "", doc="one curve name (Python's ssl sets a single ECDH curve)"),
    _p("ssl.endpoint.identification.algorithm", ENUM, "*", "https", choices=("none", "https")),
    _p("enable.ssl.certificate.verification", BOOL, "*", True),
    _p("sasl.mechanisms", STRING, "*", "GSSAPI"),
    _p("sasl.username", STRING, "*", ""),
    _p("sasl.password", STRING, "*", "", doc="secret"),
    _p("sasl.oauthbearer.config", STRING, "*", ""),
    _p("enable.sasl.oauthbearer.unsecure.jwt", BOOL, "*", False),
    _p("sasl.oauthbearer.method", ENUM, "*", "default", choices=("default", "oidc")),
    _p("sasl.oauthbearer.client.id", STRING, "*", ""),
    _p("sasl.oauthbearer.client.secret", STRING, "*", "", doc="secret"),
    _p("sasl.oauthbearer.scope", STRING, "*", ""),
    _p("sasl.oauthbearer.extensions", STRING, "*", ""),
    _p("sasl.oauthbearer.token.endpoint.url", STRING, "*", ""),
    _p("sasl.oauthbearer.sub.claim.name", STRING, "*", "sub"),
    _p("https.ca.location", STRING, "*", ""),
    _p("https.ca.pem", STRING, "*", ""),
    _p("oauth_cb", CALLBACK, "*", doc="oauth_cb(sasl.oauthbearer.config) -> (token, expiry seconds since the "
                                      "epoch[, principal[, extensions]]); runs in the app"),
    # ---- kqactors' own -----------------------------------------------------------------------------
    _p("kqactors.hosts", INT, "*", -1, -1, 1024,
       doc="Number of toppar host processes (record encode/decode, compression). -1 (default): adaptive — the "
           "client starts with its main host alone, which runs the toppars (two processes, one process hop "
           "fewer each way: the lowest latency and footprint), and a producer starts toppar hosts as its rate "
           "climbs (kqactors.placement.scale.rate), up to the CPU cores (env KQACTORS_CPU_COUNT overrides the "
           "count), moving toppars without losing order, and retires them when the rate drops "
           "(kqactors.placement.retire.ms); a consumer's fetch decode follows its consume rate the same way. "
           "0 runs the toppars on the main host for good; N > 0 starts N toppar hosts at once"),
    _p("kqactors.placement.scale.rate", INT, "*", 5_000, 1, INT32_MAX,
       doc="Adaptive placement (kqactors.hosts=-1): messages/s handed to the toppars (a consumer: records/s "
           "consumed), per host running them (main's counts as one while it runs them), above which one more "
           "toppar host is started"),
    _p("kqactors.placement.retire.ms", INT, "*", 30_000, 0, 86_400_000,
       doc="Adaptive placement (kqactors.hosts=-1): once the rate has stayed under half the rate at which the "
           "last toppar host joined for this long, that host is retired: its toppars move back to the remaining "
           "hosts and its process stops. 0: toppar hosts are never retired"),
    _p("kqactors.runtime.dir", STRING, "*", "",
       doc="Attach to the shared runtime run by `kqactors runtime --dir DIR` instead of starting this client's "
           "own actor hosts (kqactors.hosts is then the runtime's); producers with the same settings share its "
           "broker connections and toppars (docs/runtime.md)"),
)

PROPERTIES: dict[str, Property] = {prop.name: prop for prop in _TABLE}

ALIASES: dict[str, str] = {
    "bootstrap.servers": "metadata.broker.list",
    "max.in.flight": "max.in.flight.requests.per.connection",
    "linger.ms": "queue.buffering.max.ms",
    "retries": "message.send.max.retries",
    "compression.type": "compression.codec",
    "acks": "request.required.acks",
    "delivery.timeout.ms": "message.timeout.ms",
    "max.partition.fetch.bytes": "fetch.message.max.bytes",
    "sasl.mechanism": "sasl.mechanisms",
    "sasl.oauthbearer.client.credentials.client.id": "sasl.oauthbearer.client.id",
    "sasl.oauthbearer.client.credentials.client.secret": "sasl.oauthbearer.client.secret",
}

# Keys that only exist at the confluent-kafka Python level (not librdkafka properties).
PYTHON_ONLY = frozenset({"error_cb", "throttle_cb", "stats_cb", "logger", "on_delivery", "on_commit",
                         "default.topic.config", "kqactors.hosts", "kqactors.placement.scale.rate",
                         "kqactors.placement.retire.ms", "oauth_cb",
                         "kqactors.runtime.dir"})

# librdkafka properties set through a dedicated C API: librdkafka refuses them in a configuration dict
# ("must be set through dedicated .._set_..() function"); INTERNAL ones are "not settable" at all.
# confluent-kafka itself takes error_cb, throttle_cb, stats_cb and oauth_cb before librdkafka sees them.
DEDICATED = frozenset("""
background_event_cb closesocket_cb connect_cb consume_cb default_topic_conf dr_cb dr_msg_cb log_cb
msg_order_cmp oauthbearer_token_refresh_cb offset_commit_cb opaque open_cb partitioner_cb rebalance_cb
resolve_cb socket_cb ssl.certificate.verify_cb ssl_engine_callback_data
""".split())
INTERNAL = frozenset({"ssl_key", "ssl_certificate", "ssl_ca", "interceptors"})

# librdkafka properties kqactors accepts but does not implement (logged as ignored; see config.py).
LIBRDKAFKA_ONLY = frozenset("""
api.version.fallback.ms auto.commit.enable background_event_cb broker.address.ttl broker.version.fallback
builtin.features client.dns.lookup closesocket_cb connect_cb consume.callback.max.messages consume_cb
default_topic_conf enable.metrics.push enable.random.seed enable.sasl.oauthbearer.unsecure.jwt
enable.ssl.certificate.verification enabled_events https.ca.location https.ca.pem interceptors
internal.termination.signal log.queue log_cb max.poll.records message.copy.max.bytes
metadata.recovery.rebootstrap.trigger.ms metadata.recovery.strategy msg_order_cmp oauth_cb
oauthbearer_token_refresh_cb offset.store.method offset.store.path offset.store.sync.interval.ms open_cb
partitioner_cb plugin.library.paths produce.offset.report queuing.strategy rebalance_cb
reconnect.backoff.jitter.ms resolve_cb sasl.kerberos.keytab sasl.kerberos.kinit.cmd
sasl.kerberos.min.time.before.relogin sasl.kerberos.principal sasl.kerberos.service.name sasl.mechanism
sasl.mechanisms sasl.oauthbearer.assertion.algorithm sasl.oauthbearer.assertion.claim.aud
sasl.oauthbearer.assertion.claim.exp.seconds sasl.oauthbearer.assertion.claim.iss
sasl.oauthbearer.assertion.claim.jti.include sasl.oauthbearer.assertion.claim.nbf.seconds
sasl.oauthbearer.assertion.claim.sub sasl.oauthbearer.assertion.file
sasl.oauthbearer.assertion.jwt.template.file sasl.oauthbearer.assertion.private.key.file
sasl.oauthbearer.assertion.private.key.passphrase sasl.oauthbearer.assertion.private.key.pem
sasl.oauthbearer.client.credentials.client.id sasl.oauthbearer.client.credentials.client.secret
sasl.oauthbearer.client.id sasl.oauthbearer.client.secret sasl.oauthbearer.config
sasl.oauthbearer.extensions sasl.oauthbearer.grant.type sasl.oauthbearer.metadata.authentication.type
sasl.oauthbearer.method sasl.oauthbearer.scope sasl.oauthbearer.sub.claim.name
sasl.oauthbearer.token.endpoint.url sasl.password sasl.username share.acknowledgement.mode
socket.blocking.max.ms socket.max.fails socket_cb ssl.ca.certificate.stores ssl.ca.location ssl.ca.pem
ssl.certificate.location ssl.certificate.pem ssl.certificate.verify_cb ssl.cipher.suites ssl.crl.location
ssl.curves.list ssl.endpoint.identification.algorithm ssl.engine.id ssl.engine.location ssl.key.location
ssl.key.password ssl.key.pem ssl.keystore.location ssl.keystore.password ssl.providers ssl.sigalgs.list
ssl_ca ssl_certificate ssl_engine_callback_data ssl_key topic.blacklist topic.metadata.refresh.fast.cnt
topic.metadata.refresh.sparse
""".split()) - frozenset(PROPERTIES) - frozenset(ALIASES)


def resolve_name(name: str) -> str:
    """Canonical property name for ``name`` (aliases resolved); unknown names are returned unchanged."""
    return ALIASES.get(name, name)
