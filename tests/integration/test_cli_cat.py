"""``kqactors cat`` against Debian's kcat (/usr/bin/kcat) on a real Tansu broker.

Runs in: the pytest process; ``kqactors cat`` and kcat run as child processes. Each test writes with one tool
and reads with the other, or reads the same records with both and compares the bytes (``-f``), the parsed
envelopes (``-J``), the listings (``-L``) and the answers (``-Q``).

Debian's kcat 1.7.1 links librdkafka 2.0.2, whose ApiVersions request Tansu answers in a way it cannot read
("Read underflow"); when that happens kcat is run with the librdkafka of the confluent-kafka wheel
(LD_LIBRARY_PATH), as benchmarks/bench_ingest.py does. The kcat binary and its options are Debian's either way.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

KCAT = "/usr/bin/kcat"
REPO_ROOT = Path(__file__).resolve().parents[2]
FORMAT = "%t|%p|%o|%k|%s|%K|%S|%h|%T\\n"

if not os.path.exists(KCAT):
    pytest.skip("Debian's kcat (/usr/bin/kcat) is not installed", allow_module_level=True)


@pytest.fixture(scope="module")
def kcat_env(tansu, tmp_path_factory) -> dict[str, str]:
    """The environment kcat talks to Tansu with (see the module docstring)."""
    probe = subprocess.run([KCAT, "-L", "-b", tansu.bootstrap, "-m", "3"], capture_output=True, text=True,
                           timeout=60)
    if probe.returncode == 0:
        return dict(os.environ)
    ck = pytest.importorskip("confluent_kafka", reason="kcat needs a newer librdkafka to talk to Tansu")
    libs = sorted((Path(ck.__file__).parent.parent / "confluent_kafka.libs").glob("librdkafka*.so*"))
    if not libs:
        pytest.skip(f"kcat cannot talk to Tansu and no bundled librdkafka was found: {probe.stderr[-300:]}")
    libdir = tmp_path_factory.mktemp("rdkafka")
    (libdir / "librdkafka.so.1").symlink_to(libs[0])
    return dict(os.environ, LD_LIBRARY_PATH=str(libdir))


def kq(*args: str, input: bytes | None = None, timeout: float = 90) -> subprocess.CompletedProcess:
    """Run ``kqactors cat ARGS`` (as the installed entry point would) and return its result (bytes)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, (str(REPO_ROOT), os.environ.get("PYTHONPATH")))))
    return subprocess.run([sys.executable, "-m", "kqactors.cli.main", "cat", *args], input=input,
                          capture_output=True, timeout=timeout, env=env)


def kcat(env: dict[str, str], *args: str, input: bytes | None = None, timeout: float = 60
         ) -> subprocess.CompletedProcess:
    return subprocess.run([KCAT, *args], input=input, capture_output=True, timeout=timeout, env=env)


def ok(result: subprocess.CompletedProcess) -> bytes:
    assert result.returncode == 0, result.stderr.decode(errors="replace")[-2000:]
    return result.stdout


def produce_one_batch_each(bootstrap: str, topic: str, partitions: int, values: list[tuple[int, bytes, int]]) -> None:
    """Create ``topic`` and write (partition, value, timestamp ms) records, one batch each (Tansu's watermarks
    count batches, so -o -<n> needs one record per batch to mean n records)."""
    ck = pytest.importorskip("confluent_kafka")
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept alive until the answer: it is not a daemon
    admin.create_topics([NewTopic(topic, partitions)])[topic].result(30)
    producer = ck.Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for partition, value, ts in values:
        producer.produce(topic, value, key=b"k" + value, partition=partition, timestamp=ts)
        assert producer.flush(30) == 0


def test_kqactors_produces_and_kcat_reads_the_same_bytes(tansu, unique_topic, kcat_env):
    lines = b"k1:v1\n\nk2:v2\n:empty-key\nno key here\nk3:\xc3\xa9t\xc3\xa9\n"
    ok(kq("-b", tansu.bootstrap, "-P", "-t", unique_topic, "-p", "0", "-K:", "-H", "h1=x", "-H", "h2", input=lines))
    theirs = ok(kcat(kcat_env, "-b", tansu.bootstrap, "-C", "-t", unique_topic, "-e", "-q", "-f", FORMAT))
    rows = [row.split(b"|") for row in theirs.splitlines()]
    # The empty line is skipped (as kcat does); a line without the key delimiter has a NULL key.
    assert [(r[3], r[4], r[5], r[7]) for r in rows] == [
        (b"k1", b"v1", b"2", b"h1=x,h2=NULL"), (b"k2", b"v2", b"2", b"h1=x,h2=NULL"),
        (b"", b"empty-key", b"0", b"h1=x,h2=NULL"), (b"", b"no key here", b"-1", b"h1=x,h2=NULL"),
        (b"k3", "été".encode(), b"2", b"h1=x,h2=NULL")]
    assert [r[2] for r in rows] == [b"0", b"1", b"2", b"3", b"4"]
    ours = ok(kq("-b", tansu.bootstrap, "-C", "-t", unique_topic, "-e", "-q", "-f", FORMAT))
    assert ours == theirs


def test_kcat_produces_and_kqactors_reads_the_same_json_envelopes(tansu, unique_topic, kcat_env):
    ok(kcat(kcat_env, "-b", tansu.bootstrap, "-P", "-t", unique_topic, "-K", "#", "-H", "trace=abc",
            input=b"a#1\nb#2\nc#3\nd#4\nnull-key\n"))
    theirs = ok(kcat(kcat_env, "-b", tansu.bootstrap, "-C", "-t", unique_topic, "-e", "-q", "-J"))
    ours = ok(kq("-b", tansu.bootstrap, "-C", "-t", unique_topic, "-e", "-q", "-J"))

    def envelopes(out: bytes) -> list[dict]:
        return sorted((json.loads(line) for line in out.splitlines()), key=lambda e: (e["partition"], e["offset"]))

    assert len(envelopes(theirs)) == 5
    assert envelopes(ours) == envelopes(theirs)
    first = envelopes(ours)[0]
    assert set(first) == {"topic", "partition", "offset", "tstype", "ts", "broker", "headers", "key", "payload"}
    assert first["headers"] == ["trace", "abc"] and first["tstype"] == "create"
    assert {(e["key"], e["payload"]) for e in envelopes(ours)} == {
        ("a", "1"), ("b", "2"), ("c", "3"), ("d", "4"), (None, "null-key")}


def test_metadata_listing_matches_kcat(tansu, unique_topic, kcat_env):
    ok(kq("-b", tansu.bootstrap, "-P", "-t", unique_topic, "-p", "0", input=b"x\n"))

    def body(out: bytes) -> list[str]:  # the first line names the answering broker, which differs by design
        return out.decode().splitlines()[1:]

    theirs = ok(kcat(kcat_env, "-b", tansu.bootstrap, "-L", "-t", unique_topic))
    ours = ok(kq("-b", tansu.bootstrap, "-L", "-t", unique_topic))
    assert body(ours) == body(theirs)
    assert f'topic "{unique_topic}" with' in ours.decode()
    their_all = set(body(ok(kcat(kcat_env, "-b", tansu.bootstrap, "-L"))))
    our_all = set(body(ok(kq("-b", tansu.bootstrap, "-L"))))
    assert {line for line in our_all if unique_topic in line} == {line for line in their_all if unique_topic in line}
    their_json = json.loads(ok(kcat(kcat_env, "-b", tansu.bootstrap, "-L", "-J", "-t", unique_topic)))
    our_json = json.loads(ok(kq("-b", tansu.bootstrap, "-L", "-J", "-t", unique_topic)))
    for key in ("query", "controllerid", "brokers", "topics"):
        assert our_json[key] == their_json[key], key


@pytest.fixture(scope="module")
def timed_topic(tansu):
    """Two partitions, six records each at known timestamps (one batch per record)."""
    import uuid

    topic = f"t-cli-cat-offsets-{uuid.uuid4().hex[:8]}"
    base = 1_700_000_000_000
    records = [(p, f"p{p}-{i}".encode(), base + 1000 * i) for p in (0, 1) for i in range(6)]
    produce_one_batch_each(tansu.bootstrap, topic, 2, records)
    return topic, base


@pytest.mark.parametrize("offset_args, expected_per_partition", [
    (["-o", "beginning"], [0, 1, 2, 3, 4, 5]),
    (["-o", "end"], []),
    (["-o", "4"], [4, 5]),
    (["-o", "-2"], [4, 5]),
    (["-o", "s@1700000003000"], "s@"),
    (["-o", "e@1700000002000"], [0, 1]),
    (["-o", "s@1700000001000", "-o", "e@1700000004000"], "s@"),
])
def test_offset_variants_select_the_records_kcat_selects(tansu, timed_topic, kcat_env, offset_args,
                                                         expected_per_partition):
    topic, _base = timed_topic
    common = ["-b", tansu.bootstrap, "-C", "-t", topic, "-e", "-q", "-f", "%p %o %s %T\\n", *offset_args]
    theirs = ok(kcat(kcat_env, *common))
    ours = ok(kq(*common))
    assert sorted(ours.splitlines()) == sorted(theirs.splitlines())
    if expected_per_partition == "s@":  # from the offset the broker names for the time, up to any e@
        starts = broker_offsets_for_time(tansu.bootstrap, topic, int(offset_args[1][2:]))
        stop = int(offset_args[3][2:]) if len(offset_args) > 2 else None
        expected_per_partition = {p: [i for i in range(starts[p], 6)
                                      if stop is None or 1_700_000_000_000 + 1000 * i < stop] for p in (0, 1)}
    else:
        expected_per_partition = {p: expected_per_partition for p in (0, 1)}
    expected = sorted(f"{p} {i} p{p}-{i} {1_700_000_000_000 + 1000 * i}".encode()
                      for p in (0, 1) for i in expected_per_partition[p])
    assert sorted(ours.splitlines()) == expected


def broker_offsets_for_time(bootstrap: str, topic: str, ts: int) -> dict[int, int]:
    """What the broker answers confluent-kafka for a time lookup (Tansu answers 0 for any time, so -o s@ and -Q
    follow its answer, not the records' timestamps)."""
    ck = pytest.importorskip("confluent_kafka")
    consumer = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": "cli-cat-times"})
    try:
        found = consumer.offsets_for_times([ck.TopicPartition(topic, p, ts) for p in (0, 1)], timeout=30)
    finally:
        consumer.close()
    return {tp.partition: tp.offset for tp in found}


def test_count_and_partition_stop_where_kcat_stops(tansu, timed_topic, kcat_env):
    topic, _base = timed_topic
    args = ["-b", tansu.bootstrap, "-C", "-t", topic, "-p", "1", "-o", "2", "-c", "3", "-f", "%o:%s\\n"]
    theirs = ok(kcat(kcat_env, *args))  # no -e: -c alone ends the run
    assert ok(kq(*args)) == theirs == b"2:p1-2\n3:p1-3\n4:p1-4\n"
    eof = kq("-b", tansu.bootstrap, "-C", "-t", topic, "-p", "0", "-o", "-1", "-e", "-f", "%s\\n")
    assert ok(eof) == b"p0-5\n"
    assert eof.stderr.decode().strip().endswith(f"Reached end of topic {topic} [0] at offset 6: exiting")
    # e@ alone (no -e) ends the run once every partition passed the stop time, as kcat's does.
    stop = ["-b", tansu.bootstrap, "-C", "-t", topic, "-p", "1", "-o", f"e@{_base + 3000}", "-f", "%o\\n"]
    theirs = kcat(kcat_env, *stop)
    ours = kq(*stop)
    assert ok(ours) == ok(theirs) == b"0\n1\n2\n"
    assert ours.stderr.decode().strip().endswith(f"Reached stop timestamp for topic {topic} [1] at offset 3: exiting")


def test_query_by_timestamp_matches_kcat(tansu, timed_topic, kcat_env):
    topic, base = timed_topic
    args = ["-b", tansu.bootstrap, "-Q", "-t", f"{topic}:0:{base + 2500}", "-t", f"{topic}:1:{base}"]
    theirs = ok(kcat(kcat_env, *args))
    ours = ok(kq(*args))
    answers = broker_offsets_for_time(tansu.bootstrap, topic, base + 2500)
    assert sorted(ours.splitlines()) == sorted(theirs.splitlines()) == sorted(
        [f"{topic} [0] offset {answers[0]}".encode(), f"{topic} [1] offset 0".encode()])


def test_balanced_consumer_reads_every_partition_as_kcat_does(tansu, timed_topic, kcat_env):
    topic, _base = timed_topic
    # Tansu's JoinGroup waits about half the session timeout (tests/integration/test_consumer_group_tansu.py).
    args = [topic, "-o", "beginning", "-e", "-f", "%p/%o\\n", "-X", "session.timeout.ms=6000",
            "-X", "heartbeat.interval.ms=500"]
    result = kq("-b", tansu.bootstrap, "-G", f"g-{topic}", *args)
    theirs = ok(kcat(kcat_env, "-b", tansu.bootstrap, "-G", f"g-kcat-{topic}", *args))
    assert sorted(ok(result).splitlines()) == sorted(theirs.splitlines()) == sorted(
        f"{p}/{i}".encode() for p in (0, 1) for i in range(6))
    assert b"rebalanced: assigned:" in result.stderr


def test_producing_files_and_errors_exit_like_kcat(tansu, unique_topic, kcat_env, tmp_path):
    whole = tmp_path / "whole.bin"
    whole.write_bytes(b"line one\nline two\n")
    lines = tmp_path / "lines.txt"
    lines.write_bytes(b"a|b|c")
    ok(kq("-b", tansu.bootstrap, "-P", "-t", unique_topic, "-p", "0", str(whole)))
    ok(kq("-b", tansu.bootstrap, "-P", "-t", unique_topic, "-p", "0", "-D", "|", "-l", str(lines)))
    theirs = ok(kcat(kcat_env, "-b", tansu.bootstrap, "-C", "-t", unique_topic, "-e", "-q", "-f", "%S:%s;"))
    assert theirs == b"18:line one\nline two\n;1:a;1:b;1:c;"
    # -K with -k (per-message keys win), -Z (an empty value is NULL), -c (stop after 2), -T (echo what was sent)
    tee = ok(kq("-b", tansu.bootstrap, "-P", "-t", unique_topic + "-z", "-p", "0", "-K:", "-k", "fixed", "-Z",
                "-c", "2", "-T", input=b"k:\nx\ny\n"))
    assert tee == b"k:\nx\n"
    read = ok(kcat(kcat_env, "-b", tansu.bootstrap, "-C", "-t", unique_topic + "-z", "-e", "-q", "-f", "%k=%S;"))
    assert read == b"k=-1;fixed=1;"
    # No broker configured: an error and exit status 1 from both, and no embedded broker.
    assert kq("-C", "-t", unique_topic).returncode == kcat(kcat_env, "-C", "-t", unique_topic).returncode == 1
    assert kq("-b", tansu.bootstrap, "-C", "-t", unique_topic, "-f", "%Y").returncode == 1
    refused = kq("-b", "127.0.0.1:1", "-L", "-m", "1")  # nothing listens on port 1
    assert refused.returncode == kcat(kcat_env, "-b", "127.0.0.1:1", "-L", "-m", "1").returncode == 1
    assert refused.stderr.decode().splitlines()[-1].startswith("% ERROR: ")
    assert kq("-b", tansu.bootstrap, "-L", "-X", "no.such.property=1").returncode == 1


def test_property_list_names_the_librdkafka_keys():
    listing = ok(kq("-X", "list")).decode()
    assert "bootstrap.servers" in listing and "enable.partition.eof" in listing


def test_stored_offsets_carry_over_between_runs_and_to_kcat(tansu, timed_topic, kcat_env):
    topic, _base = timed_topic
    group = ["-X", f"group.id=stored-{topic}", "-p", "0", "-f", "%o\\n"]
    assert ok(kq("-b", tansu.bootstrap, "-C", "-t", topic, "-o", "stored", "-X", "auto.offset.reset=earliest",
                 "-c", "3", *group)) == b"0\n1\n2\n"
    assert ok(kq("-b", tansu.bootstrap, "-C", "-t", topic, "-o", "stored", "-c", "2", *group)) == b"3\n4\n"
    assert ok(kcat(kcat_env, "-b", tansu.bootstrap, "-C", "-t", topic, "-o", "stored", "-c", "1", *group)) == b"5\n"
