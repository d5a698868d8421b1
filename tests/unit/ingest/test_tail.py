"""FileTail: appends, partial lines, rename rotation (live and while stopped), copytruncate, restarts from the
state file, the first start at the end, long lines, --once, and two tails of one glob sharing a rotated file."""

from __future__ import annotations

import os
import shutil

from kqactors.ingest.checkpoint import StateStore, StreamState
from kqactors.ingest.tail import FileTail, Inodes

from .fakes import SETTINGS, Clock, FakeProducer, file_runtime, pump


def lines(*numbers: int, prefix: str = "l") -> bytes:
    return b"".join(f"{prefix}{i}\n".encode() for i in numbers)


def append(path, data: bytes) -> None:
    with open(path, "ab") as f:
        f.write(data)


def make(tmp_path, path, producer=None, clock=None, inodes=None, **settings):
    producer = producer or FakeProducer()
    clock = clock or Clock()
    rt = file_runtime(producer, clock)
    store = StateStore(str(tmp_path / "state"), fsync=False)
    tail = FileTail(str(path), rt, store, {**SETTINGS, **settings}, inodes or Inodes(), clock)
    return tail, producer, clock, store


def test_appends_partial_lines_and_the_checkpoint_after_delivery(tmp_path):
    log = tmp_path / "app.log"
    log.write_bytes(lines(*range(10)) + b"part")
    tail, producer, _, store = make(tmp_path, log)
    assert pump(tail, deliver=False) == 10
    tail.save()
    assert store.load(str(log))[0].pos == 0, "nothing is checkpointed before its delivery report"
    producer.poll()
    tail.save()
    assert store.load(str(log))[0].pos == len(lines(*range(10)))
    append(log, b"ial\n" + lines(10))
    pump(tail)
    assert producer.values() == [b"l%d" % i for i in range(10)] + [b"partial", b"l10"]
    tail.save()
    assert store.load(str(log))[0].pos == log.stat().st_size


def test_out_of_order_reports_checkpoint_only_a_delivered_prefix(tmp_path):
    log = tmp_path / "app.log"
    log.write_bytes(lines(*range(12)))   # 3 chunks of 4 lines
    tail, producer, _, _ = make(tmp_path, log)
    pump(tail, deliver=False)
    queue = producer.queue
    # deliver the last two chunks' lines first: the checkpoint must not move
    for *_, cb in queue[4:]:
        cb(None, None)
    assert tail.state()[0].pos == 0
    for *_, cb in queue[:3]:
        cb(None, None)
    assert tail.state()[0].pos == 0, "a chunk with a line in flight holds the checkpoint"
    queue[3][4](None, None)
    assert tail.state()[0].pos == log.stat().st_size


def test_restart_resumes_at_the_checkpoint_and_resends_only_undelivered(tmp_path):
    log = tmp_path / "app.log"
    log.write_bytes(lines(*range(8)))
    tail, producer, _, _ = make(tmp_path, log)
    pump(tail, deliver=False)
    for *_, cb in producer.queue[:4]:   # the first chunk is delivered, the second is in flight at the "crash"
        cb(None, None)
    tail.save()
    tail.close()
    tail2, producer2, _, _ = make(tmp_path, log)
    pump(tail2)
    assert producer2.values() == [b"l%d" % i for i in range(4, 8)]


def test_rename_rotation_reads_the_old_file_to_its_end_then_the_new_one(tmp_path):
    log = tmp_path / "app.log"
    log.write_bytes(lines(0, 1))
    tail, producer, clock, store = make(tmp_path, log)
    pump(tail)
    os.rename(log, tmp_path / "app.log.1")
    append(tmp_path / "app.log.1", lines(2, 3))   # the writer has not reopened yet
    log.write_bytes(lines(0, 1, prefix="new"))
    pump(tail)
    assert producer.values() == [b"l0", b"l1", b"l2", b"l3", b"new0", b"new1"]
    # the renamed file stays open for rotate_wait_s after its last data, then is closed
    append(tmp_path / "app.log.1", b"l4\nlast-no-newline")
    pump(tail)
    clock.advance(3)
    pump(tail)
    assert producer.values()[-2:] == [b"l4", b"last-no-newline"]
    tail.save()
    streams = store.load(str(log))
    assert [s.done for s in streams] == [True, False], "the old file is remembered as done"
    assert streams[-1].ino == log.stat().st_ino and streams[-1].pos == log.stat().st_size


def test_rotation_while_stopped_finishes_the_renamed_file_first(tmp_path):
    log = tmp_path / "app.log"
    log.write_bytes(lines(0, 1))
    tail, producer, _, _ = make(tmp_path, log)
    pump(tail)
    tail.save()
    tail.close()
    append(log, lines(2))                            # written while the daemon was down
    os.rename(log, tmp_path / "app.log.1")
    log.write_bytes(lines(0, prefix="new"))
    tail2, producer2, _, _ = make(tmp_path, log)
    pump(tail2)
    assert producer2.values() == [b"l2", b"new0"]


def test_copytruncate_reads_from_the_start_again(tmp_path):
    log = tmp_path / "app.log"
    log.write_bytes(lines(*range(5)))
    tail, producer, _, store = make(tmp_path, log)
    pump(tail)
    shutil.copy(log, tmp_path / "app.log.1")
    with open(log, "r+b") as f:
        f.truncate(0)
    append(log, lines(0, prefix="after"))
    pump(tail)
    assert producer.values()[-1:] == [b"after0"]
    assert tail.source.stats.errors["truncated"] == 1
    tail.save()
    assert store.load(str(log))[-1].pos == len(lines(0, prefix="after"))


def test_copytruncate_that_grew_past_the_position_is_seen_by_its_first_bytes(tmp_path):
    log = tmp_path / "app.log"
    log.write_bytes(lines(0, 1))
    tail, producer, _, _ = make(tmp_path, log)
    pump(tail)
    with open(log, "r+b") as f:
        f.truncate(0)
    append(log, lines(*range(10), prefix="rewritten"))   # longer than before: the size alone would not tell
    pump(tail)
    assert producer.values()[2:] == [b"rewritten%d" % i for i in range(10)]


def test_a_file_truncated_while_stopped_restarts_at_zero(tmp_path):
    log = tmp_path / "app.log"
    log.write_bytes(lines(*range(5)))
    tail, producer, _, _ = make(tmp_path, log)
    pump(tail)
    tail.save()
    tail.close()
    log.write_bytes(lines(0, prefix="other"))
    tail2, producer2, _, _ = make(tmp_path, log)
    pump(tail2)
    assert producer2.values() == [b"other0"]


def test_first_start_at_end_and_a_missing_file_that_appears(tmp_path):
    log = tmp_path / "app.log"
    log.write_bytes(lines(0, 1))
    producer, clock = FakeProducer(), Clock()
    rt = file_runtime(producer, clock, start_at="end")
    store = StateStore(str(tmp_path / "state"), fsync=False)
    tail = FileTail(str(log), rt, store, SETTINGS, Inodes(), clock)
    append(log, lines(2))
    pump(tail)
    assert producer.values() == [b"l2"]
    missing = tmp_path / "later.log"
    tail2 = FileTail(str(missing), rt, store, SETTINGS, Inodes(), clock)
    assert pump(tail2) == 0
    missing.write_bytes(lines(7))
    pump(tail2)
    assert producer.values() == [b"l2", b"l7"], "a file that appears later is read from its start"


def test_long_lines_are_split_and_once_sends_the_last_partial_line(tmp_path):
    log = tmp_path / "app.log"
    log.write_bytes(b"x" * 25 + b"\nshort\nend")
    producer, clock = FakeProducer(), Clock()
    rt = file_runtime(producer, clock, max_line_bytes=10)
    store = StateStore(str(tmp_path / "state"), fsync=False)
    tail = FileTail(str(log), rt, store, {**SETTINGS, "read_bytes": 8, "once": True}, Inodes(), clock)
    pump(tail)
    values = producer.values()
    assert b"".join(values[:3]) == b"x" * 25 and all(len(v) <= 10 for v in values)
    assert values[-2:] == [b"short", b"end"]
    assert tail.finished
    assert rt.stats.errors["line_split"] >= 2
    tail.save()
    assert store.load(str(log))[0].pos == log.stat().st_size


def test_a_glob_matching_rotated_names_does_not_read_them_again(tmp_path):
    log = tmp_path / "app.log"
    log.write_bytes(lines(0, 1))
    producer, clock = FakeProducer(), Clock()
    rt = file_runtime(producer, clock)
    store = StateStore(str(tmp_path / "state"), fsync=False)
    inodes = Inodes()
    main = FileTail(str(log), rt, store, SETTINGS, inodes, clock)
    pump(main)
    os.rename(log, tmp_path / "app.log.1")
    log.write_bytes(lines(0, prefix="new"))
    pump(main)
    rotated = FileTail(str(tmp_path / "app.log.1"), rt, store, SETTINGS, inodes, clock, new=True)
    pump(rotated)
    assert not rotated.streams, "the file is still open in app.log's tail"
    clock.advance(3)
    pump(main)      # app.log's tail closes the renamed file
    append(tmp_path / "app.log.1", lines(9))
    pump(rotated)   # opens it where app.log's tail stopped
    assert producer.values() == [b"l0", b"l1", b"new0", b"l9"]


def test_two_rotations_while_stopped_read_the_file_never_seen(tmp_path):
    log = tmp_path / "app.log"
    old = tmp_path / "app.log.9"
    old.write_bytes(lines(0, prefix="ancient"))
    os.utime(old, (1_000_000, 1_000_000))            # rotated long before the last checkpoint: not read
    log.write_bytes(lines(0, 1))
    tail, _, _, _ = make(tmp_path, log)
    pump(tail)
    tail.save()
    tail.close()
    append(log, lines(2))
    os.rename(log, tmp_path / "app.log.1")            # numbered rotation, twice, while the daemon is down
    log.write_bytes(lines(0, 1, prefix="mid"))
    os.rename(tmp_path / "app.log.1", tmp_path / "app.log.2")
    os.rename(log, tmp_path / "app.log.1")
    (tmp_path / "app.log.3.gz").write_bytes(b"\x1f\x8b compressed")
    log.write_bytes(lines(0, prefix="new"))
    tail2, producer2, _, _ = make(tmp_path, log)
    pump(tail2)
    assert producer2.values() == [b"l2", b"mid0", b"mid1", b"new0"]


def test_a_reused_inode_is_not_taken_for_a_file_already_read(tmp_path):
    log = tmp_path / "app.log"
    log.write_bytes(lines(0, 1))
    producer, clock = FakeProducer(), Clock()
    rt = file_runtime(producer, clock)
    store = StateStore(str(tmp_path / "state"), fsync=False)
    inodes = Inodes()
    st = log.stat()
    # a closed stream of the same device and inode, with other first bytes: the inode was reused
    inodes.known[(st.st_dev, st.st_ino)] = StreamState(st.st_dev, st.st_ino, 6, 6, 12345, done=True)
    tail = FileTail(str(log), rt, store, SETTINGS, inodes, clock, new=True)
    pump(tail)
    assert producer.values() == [b"l0", b"l1"]
