"""State files: atomic, only written when changed, the writer thread (latest submitted wins, flush waits), the
state directory's lock, and the tracker's in-flight count."""

from __future__ import annotations

import json

import pytest

from kqactors.ingest.checkpoint import (
    Chunk,
    StateDirBusy,
    StateDirLock,
    StateStore,
    StreamState,
    StreamTracker,
)


def test_save_writes_only_changes_and_load_reads_back(tmp_path):
    store = StateStore(str(tmp_path), fsync=True)
    streams = [StreamState(1, 2, 30, 10, 99)]
    assert store.save("/a.log", streams) and not store.save("/a.log", streams)
    assert store.load("/a.log") == streams and store.load("/other") == []
    data = json.loads(open(store.file_for("/a.log")).read())
    assert data["path"] == "/a.log" and data["updated"] > 0
    assert [p.name for p in tmp_path.iterdir()] == [store.file_for("/a.log").rsplit("/", 1)[1]], "no temp file left"


def test_the_writer_thread_writes_the_latest_state(tmp_path):
    store = StateStore(str(tmp_path), fsync=False)
    store.start_writer()
    for pos in range(100):
        store.submit("/a.log", [StreamState(1, 2, pos)])
    assert store.flush(5)
    assert store.load("/a.log")[0].pos == 99
    store.close()
    store.submit("/a.log", [StreamState(1, 2, 100)])    # no thread any more: written at once
    assert store.load("/a.log")[0].pos == 100


def test_one_daemon_per_state_directory(tmp_path):
    lock = StateDirLock(str(tmp_path))
    with pytest.raises(StateDirBusy):
        StateDirLock(str(tmp_path))
    lock.close()
    StateDirLock(str(tmp_path)).close()


def test_tracker_in_flight():
    class Emitter:
        def chunk_done(self, chunk):
            chunk.tracker.done(chunk)

    tracker = StreamTracker(0)
    a, b = Chunk(Emitter(), None, 2, end=5), Chunk(Emitter(), None, 1, end=7)
    tracker.add(a)
    tracker.add(b)
    assert tracker.in_flight == 3 and not tracker.idle
    b.ack(None, None)
    a.ack(None, None)
    assert tracker.committed == 0 and tracker.in_flight == 1
    a.ack(None, None)
    assert tracker.committed == 7 and tracker.idle
