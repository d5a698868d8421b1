"""A TCP proxy that gives a one-broker cluster the broker side of fetch sessions (KIP-227).

Runs in: the test process (threads). Neither Tansu nor the librdkafka mock cluster keeps fetch sessions (both
answer session id 0, so every request of a correct client stays full), so tests put this proxy between the
client and the broker. It keeps the sessions as a Kafka broker does: a full request (session id 0, epoch 0)
opens one; an incremental request must carry the session's next epoch (else INVALID_FETCH_SESSION_EPOCH; an
unknown id: FETCH_SESSION_ID_NOT_FOUND), adds or updates the partitions it lists and drops the forgotten ones,
and every partition of the session is fetched with the offset the client last sent for it (a client that
fails to list a moved position gets the old data again). The broker behind gets a full sessionless Fetch;
its answer goes back with the session id, and, for an incremental request, only the partitions with records,
an error or changed watermarks. Metadata and FindCoordinator responses name the proxy as the broker (librdkafka
takes a coordinator's address for its broker too). Counters and fault switches
(``drop_sessions``, ``skew_epochs``) are for the tests.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from kqactors.errors import KafkaError
from kqactors.protocol.api import decode_request_header, decode_response_header
from kqactors.protocol.generated.fetch import FetchPartition, FetchRequest, FetchResponse, FetchTopic
from kqactors.protocol.generated.find_coordinator import FindCoordinatorResponse
from kqactors.protocol.generated.metadata import MetadataResponse
from support.frame_proxy import FrameProxy

FETCH, METADATA, FIND_COORDINATOR = 1, 3, 10
Key = tuple[str, int]



@dataclass
class _Session:
    epoch: int  # the epoch the next request must carry
    #: (topic, partition) → (fetch offset, max bytes, current leader epoch) as the client last sent them
    partitions: dict[Key, tuple[int, int, int]] = field(default_factory=dict)
    #: (topic, partition) → (high watermark, last stable offset, log start offset) last answered
    answered: dict[Key, tuple[int, int, int]] = field(default_factory=dict)


@dataclass
class _Pending:
    """What to do with the answer to a forwarded Fetch."""

    session_id: int
    incremental: bool
    error: int = 0


class FetchSessionProxy(FrameProxy):
    """``FetchSessionProxy(upstream_bootstrap).start()``; ``bootstrap`` is the address clients use."""

    name = "fetch-session-proxy"

    def __init__(self, upstream: str) -> None:
        super().__init__(upstream)
        self.sessions: dict[int, _Session] = {}
        self._ids = itertools.count(1000)
        # counters
        self.full_requests = 0
        self.incremental_requests = 0
        self.session_errors = 0
        self.listed_partitions = 0  # partitions named in the requests' topics
        self.forgotten_partitions = 0
        self.request_bytes = 0  # Fetch request bodies as the client sent them
        # fault switches: the next incremental request of every session fails with this
        self.drop_sessions = False  # FETCH_SESSION_ID_NOT_FOUND (the broker evicted the session)
        self.skew_epochs = False  # INVALID_FETCH_SESSION_EPOCH
        #: False: answer session id 0 to a request for a new session, as Tansu does (every request stays full)
        self.grant_sessions = True

    # ---- the session logic -------------------------------------------------------------------------------
    def _forward_fetch(self, request: FetchRequest, body_size: int) -> tuple[FetchRequest, _Pending]:
        """The sessionless full request for the broker behind, and how to answer the client."""
        with self._lock:
            self.request_bytes += body_size
            listed = {(t.topic, p.partition): (p.fetch_offset, p.partition_max_bytes, p.current_leader_epoch)
                      for t in request.topics for p in t.partitions}
            self.listed_partitions += len(listed)
            self.forgotten_partitions += sum(len(t.partitions) for t in request.forgotten_topics_data)
            sid, epoch = request.session_id, request.session_epoch
            if sid == 0 and epoch == 0 and self.grant_sessions:  # full request: a new session
                sid = next(self._ids)
                self.sessions[sid] = session = _Session(epoch=1, partitions=listed)
                self.full_requests += 1
                pending = _Pending(sid, incremental=False)
            elif sid == 0:  # sessionless (epoch -1), or no session granted
                self.full_requests += 1
                return request, _Pending(0, incremental=False)
            else:
                session = self.sessions.get(sid)
                error = 0
                if session is None or self.drop_sessions:
                    error = KafkaError.FETCH_SESSION_ID_NOT_FOUND
                elif self.skew_epochs or epoch != session.epoch:
                    error = KafkaError.INVALID_FETCH_SESSION_EPOCH
                if error:
                    self.sessions.pop(sid, None)
                    self.session_errors += 1
                    empty = FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=request.max_bytes,
                                         isolation_level=request.isolation_level, session_id=0, session_epoch=-1)
                    return empty, _Pending(0, incremental=False, error=error)
                self.incremental_requests += 1
                session.epoch = epoch + 1
                for t in request.forgotten_topics_data:
                    for partition in t.partitions:
                        session.partitions.pop((t.topic, partition), None)
                        session.answered.pop((t.topic, partition), None)
                session.partitions.update(listed)
                pending = _Pending(sid, incremental=True)
            topics: dict[str, FetchTopic] = {}
            for (topic, partition), (offset, max_bytes, leader_epoch) in session.partitions.items():
                topics.setdefault(topic, FetchTopic(topic=topic, partitions=[])).partitions.append(FetchPartition(
                    partition=partition, fetch_offset=offset, partition_max_bytes=max_bytes,
                    current_leader_epoch=leader_epoch))
            full = FetchRequest(replica_id=-1, max_wait_ms=request.max_wait_ms, min_bytes=request.min_bytes,
                                max_bytes=request.max_bytes, isolation_level=request.isolation_level,
                                session_id=0, session_epoch=-1, topics=list(topics.values()),
                                rack_id=request.rack_id)
            return full, pending

    def _answer(self, response: FetchResponse, pending: _Pending) -> FetchResponse:
        if pending.error:
            return FetchResponse(throttle_time_ms=0, error_code=pending.error, session_id=0, responses=[])
        response.session_id = pending.session_id
        if not pending.session_id:
            return response
        with self._lock:
            session = self.sessions.get(pending.session_id)
            if session is None:
                return response
            for topic in response.responses:
                kept = []
                for data in topic.partitions:
                    key = (topic.topic, data.partition_index)
                    marks = (data.high_watermark, data.last_stable_offset, data.log_start_offset)
                    news = (data.records is not None and len(data.records) > 0) or data.error_code \
                        or session.answered.get(key) != marks
                    session.answered[key] = marks
                    if news or not pending.incremental:
                        kept.append(data)
                topic.partitions = kept
            response.responses = [t for t in response.responses if t.partitions]
        return response

    # ---- frames ------------------------------------------------------------------------------------------
    def on_request(self, frame: bytes) -> tuple[bytes, int, tuple[int, int, _Pending | None]]:
        api_key, version, corr_id, _client_id, offset = decode_request_header(frame)
        how = None
        if api_key == FETCH and version >= 7:
            request = FetchRequest.decode(frame[offset:], version)
            forwarded, how = self._forward_fetch(request, len(frame) - offset)
            frame = frame[:offset] + forwarded.encode(version)
        return frame, corr_id, (api_key, version, how)

    def on_response(self, frame: bytes, context: tuple[int, int, _Pending | None] | None) -> bytes:
        api_key, version, how = context or (-1, 0, None)
        if not (api_key in (METADATA, FIND_COORDINATOR) or (api_key == FETCH and how is not None)):
            return frame
        _, offset = decode_response_header(memoryview(frame), api_key, version)
        header, body = frame[:offset], frame[offset:]
        if api_key == METADATA:
            response = MetadataResponse.decode(body, version)
            self.point_brokers_here(response)
        elif api_key == FIND_COORDINATOR:
            response = FindCoordinatorResponse.decode(body, version)
            for coordinator in [response, *response.coordinators]:
                if coordinator.port:
                    coordinator.host, coordinator.port = "127.0.0.1", self.port
        else:
            response = self._answer(FetchResponse.decode(body, version), how)
        return header + response.encode(version)
