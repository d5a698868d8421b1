"""The emitter: backpressure (BufferError keeps the rest of a batch), retried and dropped delivery errors, the
token bucket, and the chunk's checkpoint only after every line's report."""

from __future__ import annotations

from kqactors.errors import KafkaError
from kqactors.ingest.checkpoint import StreamTracker
from kqactors.ingest.emit import TokenBucket

from .fakes import Clock, FakeProducer, file_runtime


def test_a_full_queue_keeps_the_rest_of_the_batch():
    producer, clock = FakeProducer(limit=3), Clock()
    rt = file_runtime(producer, clock)
    tracker = StreamTracker(0)
    batch = rt.make_batch([b"a", b"b", b"c", b"d", b"e"], 5, end=10, tracker=tracker)
    emitter = rt.emitter
    assert not emitter.emit(batch) and batch.next == 3 and emitter.full
    assert emitter.service() == 3 and not emitter.full
    assert tracker.committed == 0, "two lines of the chunk were not even produced"
    assert emitter.emit(batch) and batch.finished
    emitter.service()
    assert tracker.committed == 10 and rt.stats.lines_out == 5 and rt.stats.in_flight == 0
    assert producer.values() == [b"a", b"b", b"c", b"d", b"e"]


def test_retriable_errors_are_sent_again_and_hold_the_checkpoint():
    producer, clock = FakeProducer(), Clock()
    rt = file_runtime(producer, clock)
    rt.emitter.retry_backoff_s = 1.0
    tracker = StreamTracker(0)
    assert rt.emitter.emit(rt.make_batch([b"x", b"y"], 2, end=4, tracker=tracker))
    producer.fail_with = KafkaError._MSG_TIMED_OUT
    rt.emitter.service()
    assert tracker.committed == 0 and rt.emitter.retrying == 2 and rt.stats.errors == {"delivery": 2}
    rt.emitter.service()
    assert not producer.queue, "not before the back-off"
    clock.advance(1.0)
    rt.emitter.service()
    rt.emitter.service()
    assert tracker.committed == 4 and producer.values() == [b"x", b"y"] and rt.stats.lines_out == 2


def test_permanent_errors_and_the_drop_policy_settle_the_line():
    producer, clock = FakeProducer(), Clock()
    rt = file_runtime(producer, clock)
    tracker = StreamTracker(0)
    rt.emitter.emit(rt.make_batch([b"big"], 3, end=4, tracker=tracker))
    producer.fail_with = KafkaError.MSG_SIZE_TOO_LARGE
    rt.emitter.service()
    assert tracker.committed == 4 and rt.stats.dropped == {"error:MSG_SIZE_TOO_LARGE": 1}
    assert rt.stats.lines_out == 0
    drop = file_runtime(producer, clock, on_delivery_error="drop")
    tracker = StreamTracker(0)
    drop.emitter.emit(drop.make_batch([b"z"], 1, end=2, tracker=tracker))
    producer.fail_with = KafkaError._MSG_TIMED_OUT
    drop.emitter.service()
    assert tracker.committed == 2 and drop.stats.dropped == {"error:_MSG_TIMED_OUT": 1}


def test_purged_lines_stay_undelivered():
    producer, clock = FakeProducer(), Clock()
    rt = file_runtime(producer, clock)
    tracker = StreamTracker(0)
    rt.emitter.emit(rt.make_batch([b"z"], 1, end=2, tracker=tracker))
    producer.fail_with = KafkaError._PURGE_QUEUE
    rt.emitter.service()
    assert tracker.committed == 0 and not rt.emitter.retrying


def test_filtered_lines_count_and_an_all_filtered_chunk_is_done_at_once():
    producer, clock = FakeProducer(), Clock()
    rt = file_runtime(producer, clock, transforms=({"op": "grep", "pattern": "keep"},))
    tracker = StreamTracker(0)
    rt.make_batch([b"drop", b"drop"], 8, end=10, tracker=tracker)
    assert tracker.committed == 10 and rt.stats.filtered == 2


def test_token_bucket():
    clock = Clock()
    bucket = TokenBucket(100.0, 50, clock)
    assert bucket.delay(50) == 0.0
    assert bucket.delay(10) == 0.1
    assert not bucket.try_take(1)
    clock.advance(0.2)
    assert bucket.try_take(10)
    assert TokenBucket(0.0).delay(10**9) == 0.0 and TokenBucket(0.0).try_take(10**9)


def test_produce_errors_drop_a_line_only_when_it_alone_is_at_fault():
    import pytest

    from kqactors.errors import KafkaException

    producer, clock = FakeProducer(), Clock()
    rt = file_runtime(producer, clock)
    tracker = StreamTracker(0)
    too_large = KafkaException(KafkaError(KafkaError.MSG_SIZE_TOO_LARGE))
    producer.raise_for = lambda value: too_large if value == b"huge" else None
    assert rt.emitter.emit(rt.make_batch([b"a", b"huge", b"b"], 6, end=9, tracker=tracker))
    rt.emitter.service()
    assert tracker.committed == 9 and producer.values() == [b"a", b"b"]
    assert rt.stats.dropped == {"error:MSG_SIZE_TOO_LARGE": 1}
    fatal = KafkaException(KafkaError(KafkaError._FATAL, fatal=True))
    producer.raise_for = lambda value: fatal
    tracker = StreamTracker(9)
    with pytest.raises(KafkaException):
        rt.emitter.emit(rt.make_batch([b"c"], 1, end=11, tracker=tracker))
    assert tracker.committed == 9, "a fatal producer ends the worker; the line is read again after its restart"
