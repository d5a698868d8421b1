"""The client handle: what every client facade shares, as librdkafka's ``rd_kafka_t`` is shared by its
producer and consumer.

Runs in: the app process, inside a facade (Producer, Consumer; an AdminClient will be the third), which
holds one ClientHandle and calls it from its own threads. Owns the client's runtime from start to close
(the configuration shipped to the actors, the Runtime with its main host and K toppar hosts, ``main``
spawned on host 0, the facade's toppar pipeline preloaded on the toppar hosts), error_cb and the ERR op
(fatal errors recorded once), statistics (stats_cb: main's snapshot completed with the fields only the
facade knows), host deaths (the runtime's monitor: ACTORS_DOWN notices handed to the facade's handlers
when the facade serves them, and CHILD_EXITED when a restarted actor is back) and cluster metadata
(``list_topics``, and every blocking METADATA request, with the facades' listeners told of each answer).

What is left to a facade is its own plane: which actors it spawns where, its ops, its hot path. The
handle never runs on produce()/poll()'s per-message path; a facade calls ``handle_op`` only for ops that
are not its own, and ``serve_notices`` costs one ``len()`` when nothing died.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any

from kqactors import __version__
from kqactors._model import ThrottleEvent
from kqactors.client.handle.metadata import (
    ClusterMetadata,
    PartitionMetadata,
    TopicMetadata,
    request_metadata,
)
from kqactors.client.handle.oauth import (
    TOKEN_ACTOR_FACTORY,
    needs_token_actor,
    run_oauth_cb,
    token_actor_args,
)
from kqactors.client.handle.placement import AdaptivePlacement, core_count
from kqactors.client.handle.sharing import GROUP_FACTORIES, group_key
from kqactors.config import Config
from kqactors.config.security import redact
from kqactors.core.log import LOG_ERR, ClientLog, python_level
from kqactors.core.stats import StatsEmitter, next_client_number
from kqactors.errors import KafkaError, KafkaException
from kqactors.ops import client as ops
from kqactors.ops import security as sops
from kqactors.runtime.op import CHILD_EXITED, ActorError, Op
from kqactors.runtime.runtime import AppQueue, Runtime
from kqactors.runtime.shared import AttachedRuntime, read_runtime_info

__all__ = ["ClientHandle", "DownHandler", "timeout_seconds"]

LOG_FORWARDER = "kqactors.actors.log:LogForwarder"
"""Each host's log forwarder (``log/<host key>``): the host's Python log records come to the app as LOG ops."""

DownHandler = Callable[[str, list[str], int], None]
"""handler(host key, names of the actors it ran, how often that host has died so far)."""

StatsFields = Callable[[], tuple[dict[str, Any], dict[tuple[str, int], dict[str, Any]] | None]]
"""() -> (the app's client-level statistics fields, per-partition fields or None)."""


def timeout_seconds(timeout: Any, default: float = float("inf")) -> float:
    """A facade's ``timeout`` argument in seconds: None or negative means ``default``."""
    if timeout is None:
        return default
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
        raise TypeError(f"timeout must be a number, not {type(timeout).__name__}")
    return default if timeout < 0 else float(timeout)


class ClientHandle:
    """One client's shared part. ``kind`` is "producer" or "consumer" (statistics name the client
    ``<client.id>#<kind>-<n>``; logged errors say "kqactors <kind> error"). Construction validates the
    configuration and prepares what the actors get (``shipped``); ``start`` starts the processes."""

    def __init__(self, conf: Config, kind: str, logger: logging.Logger) -> None:
        self.conf = conf
        self.kind = kind
        self.callbacks: dict[str, Any] = conf.callbacks()
        self.error_cb: Callable[[KafkaError], Any] | None = self.callbacks.get("error_cb")
        self.throttle_cb: Callable[[ThrottleEvent], Any] | None = self.callbacks.get("throttle_cb")
        self.logger: Any = self.callbacks.get("logger") or logger
        if not (conf.get("bootstrap.servers") or conf.get("metadata.broker.list")):
            # As librdkafka (CONFWARN): allowed, the client just has no broker to talk to. Its messages time
            # out, its polls return nothing and its metadata requests fail with _TRANSPORT.
            self.logger.log(logging.WARNING, "No `bootstrap.servers` configured: client will not be able to "
                                             "connect to Kafka cluster")
        #: the configuration as plain data, for the actors (config ships to hosts as a dict)
        self.shipped: dict[str, Any] = conf.to_dict()
        number = next_client_number()
        #: librdkafka's handle name, ``<client.id>#<kind>-<n>``: every log record names it
        self.name = f"{conf['client.id']}#{kind}-{number}"
        self.log = ClientLog.from_config(conf, self.emit_log, thread="app")
        self.stats = StatsEmitter.from_config(self.callbacks.get("stats_cb"), kind,
                                              int(conf["statistics.interval.ms"]), str(conf["client.id"]), number)
        if self.stats is None:
            self.shipped["statistics.interval.ms"] = 0  # nobody would read them: main collects none
        self.socket_timeout_s = int(conf["socket.timeout.ms"]) / 1000.0
        #: toppar host processes (kqactors.hosts); 0 puts the toppars on the main host (adaptive placement starts
        #: there too: ``placement`` then says when toppar hosts join, see placement.py)
        self.hosts = int(conf["kqactors.hosts"])
        self.placement: AdaptivePlacement | None = None
        if self.hosts < 0:
            self.hosts = 0
            if kind in ("producer", "consumer"):
                self.placement = AdaptivePlacement(core_count(), int(conf["kqactors.placement.scale.rate"]),
                                                   retire_s=int(conf["kqactors.placement.retire.ms"]) / 1000.0)
        #: a shared runtime to attach to (``kqactors runtime --dir``), or "" for a runtime of our own
        self.runtime_dir = str(conf.get("kqactors.runtime.dir") or "")
        if self.runtime_dir:
            self.placement = None  # the shared runtime's hosts are fixed
            try:
                self.hosts = int(read_runtime_info(self.runtime_dir)["toppar_hosts"])
            except ActorError as exc:
                raise KafkaException(KafkaError(KafkaError._TRANSPORT, exc.message)) from None
        #: the first fatal error main reported (librdkafka's rk_fatal), or None
        self.fatal: KafkaError | None = None
        self.rt: Runtime | None = None
        self.notices: AppQueue | None = None
        self.stats_fields: StatsFields = lambda: ({}, None)
        self.on_fatal: Callable[[KafkaError], Any] | None = None
        self.on_restarted: Callable[[Op], Any] | None = None
        self._down_handlers: list[DownHandler] = []
        self._metadata_listeners: list[Callable[[ClusterMetadata], Any]] = []
        #: the cluster id of the last metadata answer that had one
        self.known_cluster_id: str | None = None
        self._log_initialized()

    # ---- processes ---------------------------------------------------------------------------------------
    def toppar_hosts(self) -> range:
        """Indexes of the hosts that run toppar actors: 1..K, or the main host alone when K is 0."""
        return range(1, self.hosts + 1) if self.hosts else range(0, 1)

    def start(self, main_factory: str, preload: Iterable[str] = ()) -> Runtime:
        """Start the hosts (main's and the toppar hosts), spawn ``main`` from ``main_factory`` with the shipped
        configuration, have the toppar hosts import ``preload`` meanwhile (rather than one host after the
        other when the first toppar is spawned) and monitor every host. On failure nothing is left running."""
        if self.runtime_dir:
            return self._attach(main_factory)
        # Nothing here waits for a host: they start (interpreter, imports) while the constructor returns, and
        # what the facade sends meanwhile (metadata requests, toppar spawns) waits in their sockets.
        rt = Runtime(hosts=self.hosts + 1, wait_ready=False)
        try:
            self._start_log_forwarders(rt)
            # main first: on the main host (where the toppars run with kqactors.hosts 0 or adaptive) its bootstrap
            # connections then proceed while the host imports the toppar pipeline
            self._spawn_client_actors(rt, main_factory)
            preload = list(preload)
            if preload:
                rt.preload(preload, self.toppar_hosts())
        except BaseException:
            rt.close()
            raise
        self.rt = rt
        return rt

    def add_toppar_host(self, preload: Iterable[str] = ()) -> int:
        """Adaptive placement: start one more toppar host (not waited for), with its log forwarder and ``preload``
        imported first; returns its host index. The caller tells ``placement.grew()`` once it runs
        (``Runtime.host_ready``), so nothing is placed on a host still starting."""
        assert self.rt is not None and self.placement is not None, "adaptive placement of a started client only"
        (key,) = self.rt.add_hosts(1)
        self._start_log_forwarders(self.rt, [key])
        preload = list(preload)
        if preload:
            self.rt.preload(preload, [key])
        self.log.debug_any("PLACEMENT", f"toppar host {key} starting ({self.placement.last_rate:.0f} msgs/s handed "
                                        f"over; {self.placement.toppar_hosts + 1}/{self.placement.max_hosts} "
                                        f"toppar hosts)")
        return self.rt.host_keys.index(key)

    def retire_toppar_host(self, key: str) -> None:
        """Adaptive placement: stop toppar host ``key`` for good, once its toppars run elsewhere (its log forwarder
        goes with it)."""
        assert self.rt is not None and self.placement is not None, "adaptive placement of a started client only"
        try:
            self.rt.retire_host(key)
        except (ActorError, ValueError) as exc:  # it died and is restarting: it stays, idle
            self.log.debug_any("PLACEMENT", f"toppar host {key} not retired: {exc}")
            return
        self.log.debug_any("PLACEMENT", f"toppar host {key} retired ({self.placement.last_rate:.0f} msgs/s; "
                                        f"{self.placement.toppar_hosts}/{self.placement.max_hosts} toppar hosts)")

    def _attach(self, main_factory: str) -> Runtime:
        """Attach to the shared runtime at ``kqactors.runtime.dir``: no process is started. A producer joins the
        group of clients with its settings (one main, broker connections and toppars for all), any other client
        gets its own ``main`` (and later its toppars) in its own namespace on the runtime's hosts. The hosts' Python logs
        stay with the runtime (its stderr): a forwarder per client would hand each record to every client."""
        group = group_key(self.kind, self.shipped, main_factory)  # same settings: shared actors (sharing.py)
        try:
            rt: Runtime = AttachedRuntime(self.runtime_dir, group=group, factories=GROUP_FACTORIES if group else None,
                                          replay=(ops.TOPIC_PARTITIONS,))
        except ActorError as exc:
            raise KafkaException(KafkaError(KafkaError._TRANSPORT, f"attaching to {self.runtime_dir}: "
                                                                    f"{exc.message or exc.code}")) from None
        try:
            self._spawn_client_actors(rt, main_factory)
        except BaseException:
            rt.close()
            raise
        if isinstance(rt, AttachedRuntime):
            rt.on_lost = lambda: self._runtime_lost(rt)
            self._learn_group_topics(rt.replayed)
        self.rt = rt
        return rt

    def _learn_group_topics(self, replayed: list[tuple[str, Any]]) -> None:
        """The partition counts the shared group's main told its members before this client joined: the metadata
        listeners (the producer's partitioner) know them now, so a first produce() to a topic the group serves
        waits for no lookup, as a long-running librdkafka producer finds a topic in its metadata cache. Later
        changes come as TOPIC_PARTITIONS ops, as to every member."""
        cluster = ClusterMetadata()
        for kind, payload in replayed:
            if kind != ops.TOPIC_PARTITIONS or not isinstance(payload, dict) or payload.get("error_code"):
                continue
            count = int(payload.get("partition_count") or 0)
            if count > 0:
                topic = str(payload.get("topic"))
                cluster.topics[topic] = TopicMetadata(topic, {p: PartitionMetadata(p, -1, [], [], None)
                                                              for p in range(count)}, None)
        if cluster.topics:
            for listener in self._metadata_listeners:
                listener(cluster)

    def _runtime_lost(self, rt: AttachedRuntime) -> None:
        """The shared runtime stopped under this client: its actors are gone for good. A fatal _TRANSPORT error
        (error_cb from the next poll(); produce() raises from then on) says so; recovering is creating the
        client again once a runtime runs (on the runtime's watcher thread: only enqueues)."""
        reason = f"the shared runtime at {self.runtime_dir} stopped: create the client again once it runs"
        rt.events.enqueue(Op(ops.ERR, ops.err_payload(KafkaError._TRANSPORT, reason, fatal=True)))

    def _spawn_client_actors(self, rt: Runtime, main_factory: str) -> None:
        """This client's actors on host 0, own runtime or attached: the OAUTHBEARER token source first (oauth_cb
        runs once here), then ``main``, not waited for (the constructor returns while main's host starts; what the
        facade sends meanwhile waits there); then the runtime's host-death notices."""
        if needs_token_actor(self.shipped):
            rt.spawn(sops.TOKEN_ACTOR, TOKEN_ACTOR_FACTORY,
                     token_actor_args(self.shipped, self.callbacks.get("oauth_cb")), host=0)
        rt.spawn("main", main_factory, {"config": self.shipped}, host=0, wait=False)
        self.notices = rt.monitor()

    def close(self) -> None:
        """Stop every process of this client (safe to call twice, and before ``start``)."""
        if self.rt is not None:
            self.rt.close()

    # ---- host deaths -------------------------------------------------------------------------------------
    def on_actors_down(self, handler: DownHandler) -> None:
        """Call ``handler(host, names, restarts)`` for each host death, from ``serve_notices``."""
        self._down_handlers.append(handler)

    def wake_on_notice(self, wake: Callable[[], Any]) -> None:
        """Call ``wake()`` (on the supervisor's thread: keep it to setting an event) as each notice arrives, for
        a facade whose serving thread sleeps meanwhile (the producer's flusher)."""
        assert self.notices is not None, "the client handle was not started"
        self.notices.on_enqueue = lambda _queue: wake()

    def serve_notices(self) -> None:
        """Hand the monitor's ACTORS_DOWN notices to the handlers, oldest first. Never blocks and never pumps
        the transport: the supervisor enqueued them itself, so any thread may call this (the producer's
        flusher does, before each hand-over)."""
        notices = self.notices
        if notices is None or not len(notices):
            return
        op = notices.pop()
        while op is not None:
            payload = op.payload
            for handler in self._down_handlers:
                handler(payload["host"], list(payload.get("names") or ()), int(payload["restarts"]))
            op = notices.pop()

    # ---- client-level ops ------------------------------------------------------------------------------
    def handle_op(self, op: Op) -> int | None:
        """Serve a client-level op from the events queue: ERR (error_cb; a fatal error is recorded and
        ``on_fatal`` called the first time), STATS (stats_cb), OAUTHBEARER_REFRESH (oauth_cb, its token to the
        ``oauth`` actor) and CHILD_EXITED (``on_restarted``). Returns
        the number of application callbacks it served, or None when the op is not one of these."""
        kind = op.type
        if kind == ops.STATS:
            if self.stats is None:
                return 0
            fields, partitions = self.stats_fields()
            self.stats.deliver(op.payload, fields, partitions)
            return 1
        if kind == ops.ERR:
            payload = op.payload if isinstance(op.payload, dict) else {}
            error = KafkaError(int(payload.get("code", KafkaError._FAIL)), payload.get("reason") or None,
                               fatal=bool(payload.get("fatal")))
            if error.fatal() and self.fatal is None:
                self.fatal = error
                if self.on_fatal is not None:
                    self.on_fatal(error)
            self.report_error(error)
            return 1
        if kind == sops.OAUTHBEARER_REFRESH:
            callback = self.callbacks.get("oauth_cb")
            if callback is not None and self.rt is not None:
                config = str((op.payload or {}).get("config") or "")
                self.rt.send(sops.TOKEN_ACTOR, Op(sops.OAUTHBEARER_SET, run_oauth_cb(callback, config)))
            return 1
        if kind == CHILD_EXITED:
            if self.on_restarted is not None:
                self.on_restarted(op)
            return 0
        if kind == ops.LOG:
            return self.serve_log(op.payload)
        if kind == ops.THROTTLE:
            return self.serve_throttle(op.payload)
        return None

    def report_error(self, error: KafkaError) -> None:
        """error_cb, or without one librdkafka's ERROR record on the client's logger."""
        if self.error_cb is not None:
            self.error_cb(error)
        else:
            self.log.log(LOG_ERR, "ERROR", f"{self.name}: {error.str()}")

    # ---- logs and throttling -----------------------------------------------------------------------------
    def _start_log_forwarders(self, rt: Runtime, keys: Iterable[str] | None = None) -> None:
        """One ``log/<host>`` actor per host: what code on an actor host logs through Python's logging comes to
        the app as LOG ops (spawned before anything else runs there, while the hosts are idle)."""
        config = {name: self.shipped.get(name) for name in ("log_level", "debug", "log.thread.name")}
        for key in rt.host_keys if keys is None else keys:
            rt.spawn(f"log/{key}", LOG_FORWARDER, {"config": config}, host=key, wait=False)

    def _log_initialized(self) -> None:
        """librdkafka's first records: INIT (with any debug context) and the configuration (debug ``conf``)."""
        log = self.log
        log.debug_any("INIT", f"kqactors v{__version__} {self.name} initialized (kqactors.hosts "
                              f"{'adaptive' if self.placement is not None else self.hosts}, "
                              f"debug {','.join(sorted(log.contexts))})")
        if log.debugging("conf"):
            log.debug("conf", "CONF", "Client configuration:")
            for name, value in sorted(self.conf.explicit_items()):  # secrets masked, as librdkafka's dump does
                log.debug("conf", "CONF", f"  {name} = {redact(name, value)}")

    def emit_log(self, payload: Any) -> None:
        """Write one record to the client's logger as confluent-kafka does:
        ``logger.log(level, "%s [%s] %s", facility, client name, message)``."""
        if not isinstance(payload, dict):
            return
        self.logger.log(python_level(int(payload.get("level", 6))), "%s [%s] %s", payload.get("fac", ""),
                        self.name, payload.get("message", ""))

    def serve_log(self, payload: Any) -> int:
        """A LOG op from an actor host, served by poll(): counts as a served callback when the application
        configured its own ``logger`` (confluent-kafka then emits logs from poll() too)."""
        self.emit_log(payload)
        return 1 if "logger" in self.callbacks else 0

    def serve_throttle(self, payload: Any) -> int:
        """A THROTTLE op from a broker actor: throttle_cb(ThrottleEvent) with the time in seconds."""
        if self.throttle_cb is None or not isinstance(payload, dict):
            return 0
        self.throttle_cb(ThrottleEvent(str(payload.get("broker_name", "")), int(payload.get("broker_id", -1)),
                                       int(payload.get("throttle_time_ms", 0)) / 1000.0))
        return 1

    # ---- metadata ------------------------------------------------------------------------------------------
    def on_metadata(self, listener: Callable[[ClusterMetadata], Any]) -> None:
        """Call ``listener(cluster)`` with every metadata answer (partition counts, leaders to cache)."""
        self._metadata_listeners.append(listener)

    def metadata(self, topics: list[str] | None, timeout: float, allow_auto_create: bool) -> ClusterMetadata:
        """Cluster metadata from ``main`` (blocking); raises KafkaException on timeout or error."""
        assert self.rt is not None, "the client handle was not started"
        cluster = request_metadata(self.rt, topics, timeout, allow_auto_create)
        if cluster.cluster_id:
            self.known_cluster_id = cluster.cluster_id
        for listener in self._metadata_listeners:
            listener(cluster)
        return cluster

    def list_topics(self, topic: str | None = None, timeout: Any = -1) -> ClusterMetadata:
        """The facades' list_topics(): all topics, or just ``topic``; ``timeout`` None/-1 means
        socket.timeout.ms. Never creates a topic."""
        if topic is not None and not isinstance(topic, str):
            raise TypeError("topic must be a str or None")
        return self.metadata([topic] if topic else None, timeout_seconds(timeout, self.socket_timeout_s),
                             allow_auto_create=False)

    def cluster_id(self, timeout: Any = -1) -> str:
        """The facades' cluster_id(): the cluster id from metadata (KIP-78), known at once after any metadata
        answer, else asked for (brokers only, no topics) for up to ``timeout`` seconds (None/-1:
        socket.timeout.ms, as list_topics). Raises KafkaException(_TIMED_OUT) as librdkafka when none
        arrives."""
        seconds = timeout_seconds(timeout, self.socket_timeout_s)
        if self.known_cluster_id is None and seconds > 0:
            try:
                self.metadata([], seconds, allow_auto_create=False)
            except KafkaException:
                pass
        if self.known_cluster_id is None:
            raise KafkaException(KafkaError(
                KafkaError._TIMED_OUT, "Failed to retrieve cluster id: Local: Timed out. The broker must support "
                                       "KIP-78 (>= 0.10.1) for the cluster id to be available."))
        return self.known_cluster_id

    def set_sasl_credentials(self, username: Any, password: Any, also: Iterable[str] = ()) -> None:
        """The facades' set_sasl_credentials() (rd_kafka_sasl_set_credentials): the SASL username and password
        (PLAIN, SCRAM) of every later authentication of every connection of this client — ``main``'s broker
        actors and the actors named in ``also`` (the consumer's ``cgrp``, whose coordinator connections are its
        own). Connections already up keep their session; a connection waiting to reconnect uses them at its
        next attempt. Neither value is ever logged. TypeError for a value that is not a str, as
        confluent-kafka."""
        for position, value in ((1, username), (2, password)):
            if not isinstance(value, str):
                raise TypeError(f"argument {position} must be str, not {type(value).__name__}")
        self.shipped["sasl.username"] = username  # a restarted main host starts with them
        self.shipped["sasl.password"] = password
        if self.rt is None:
            return
        payload = sops.credentials_payload(username, password)
        for target in ("main", *also):
            self.rt.send(target, Op(sops.SASL_CREDENTIALS, payload))
