"""Source transforms and the key taken from a JSON field."""

from __future__ import annotations

import json

import pytest

from kqactors.ingest.transform import TransformError, compile_transforms


def run(steps, lines):
    return compile_transforms(steps).run(lines)


def test_each_step():
    assert run([{"op": "strip"}], [b"  a \t", b"b"]) == [b"a", b"b"]
    assert run([{"op": "drop_empty"}], [b"", b"x", b""]) == [b"x"]
    assert run([{"op": "grep", "pattern": "ERR"}], [b"ERR 1", b"ok", b"x ERR"]) == [b"ERR 1", b"x ERR"]
    assert run([{"op": "exclude", "pattern": "^#"}], [b"#c", b"v"]) == [b"v"]
    assert run([{"op": "replace", "pattern": r"(\d+)", "with": r"<\1>"}], [b"a1b22"]) == [b"a<1>b<22>"]
    assert run([{"op": "prefix", "text": "p:"}, {"op": "suffix", "text": ":s"}], [b"x"]) == [b"p:x:s"]
    assert run([{"op": "truncate", "bytes": 3}], [b"abcdef", b"ab"]) == [b"abc", b"ab"]
    wrapped = run([{"op": "wrap_json", "add": {"host": "h1"}}], [b"caf\xc3\xa9", b"\xff"])
    assert [json.loads(w) for w in wrapped] == [{"message": "café", "host": "h1"}, {"message": "\ufffd", "host": "h1"}]
    added = run([{"op": "add_fields", "fields": {"env": "prod"}}], [b'{"a": 1}', b"not json", b"[1]"])
    assert json.loads(added[0]) == {"a": 1, "env": "prod"} and added[1:] == [b"not json", b"[1]"]


def test_steps_apply_in_order_and_raw_is_detected():
    pipeline = compile_transforms([{"op": "strip"}, {"op": "drop_empty"}])
    assert pipeline.run([b" ", b" a "]) == [b"a"] and not pipeline.raw
    assert compile_transforms([]).raw
    assert not compile_transforms([], "id").raw


def test_keys_from_a_json_field():
    pipeline = compile_transforms([], "user.id")
    values = [b'{"user": {"id": "u1"}}', b'{"user": {"id": 7}}', b'{"user": {}}', b"plain", b'{"user": {"id": null}}',
              b'{"user": [1]}']
    keys, missing = pipeline.keys(values)
    assert keys == [b"u1", b"7", None, None, None, None] and missing == 4


@pytest.mark.parametrize(("steps", "message"), [
    ([{"op": "grep"}], "needs a non-empty pattern"),
    ([{"op": "replace", "pattern": "a", "with": r"\9"}], "bad replacement"),
    ([{"op": "truncate", "bytes": 0}], "needs bytes"),
    ([{"op": "prefix"}], "needs text"),
    ([{"op": "strip", "extra": 1}], "unknown key(s) extra"),
    (["strip"], "must be a table"),
])
def test_bad_steps(steps, message):
    with pytest.raises(TransformError, match=message.replace("(", r"\(").replace(")", r"\)")):
        compile_transforms(steps)
