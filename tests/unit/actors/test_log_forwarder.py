"""Unit tests for a host's Python logging → LOG payloads (kqactors.actors.log): levels, debug contexts by the
module that logs, the host-named prefix, records from other threads handed to the loop."""

from __future__ import annotations

import logging
import sys
import threading

from kqactors.actors.log import ForwardingHandler, source_of
from kqactors.core.log import ClientLog


def forwarding(**log_args) -> tuple[ForwardingHandler, list[dict], list[dict]]:
    sent: list[dict] = []
    relayed: list[dict] = []
    handler = ForwardingHandler(ClientLog(lambda record: None, thread="h1", **log_args), sent.append,
                                relayed.append)
    return handler, sent, relayed


def record(name: str, level: int, msg: str, *args, exc_info=None) -> logging.LogRecord:
    return logging.LogRecord(name, level, __file__, 1, msg, args, exc_info)


def test_facility_and_context_follow_the_logging_module():
    assert source_of("kqactors.actors.toppar") == ("MSG", "msg")
    assert source_of("kqactors.actors.broker.source") == ("FETCH", "fetch")
    assert source_of("kqactors.actors.broker.actor") == ("BROKER", "broker")
    assert source_of("kqactors.runtime.host") == ("RUNTIME", "generic")
    assert source_of("elsewhere") == ("KQACTORS", "generic")


def test_records_are_filtered_by_level_and_debug_context():
    handler, sent, _ = forwarding(debug="msg")
    handler.emit(record("kqactors.actors.toppar", logging.DEBUG, "LEADER %s", 1))
    handler.emit(record("kqactors.actors.cgrp", logging.DEBUG, "not asked for"))
    handler.emit(record("kqactors.actors.cgrp", logging.WARNING, "rebalance_done ignored"))
    assert sent == [{"level": 7, "fac": "MSG", "message": "[thrd:h1]: LEADER 1"},
                    {"level": 4, "fac": "CGRP", "message": "[thrd:h1]: rebalance_done ignored"}]
    quiet, sent, _ = forwarding(log_level=3)
    quiet.emit(record("kqactors.actors.toppar", logging.WARNING, "below log_level 3"))
    quiet.emit(record("kqactors.actors.toppar", logging.ERROR, "an error"))
    assert [r["message"] for r in sent] == ["[thrd:h1]: an error"]


def test_exceptions_are_included_and_other_threads_are_relayed():
    handler, sent, relayed = forwarding()
    try:
        raise ValueError("boom")
    except ValueError:
        handler.emit(record("kqactors.actors.toppar", logging.ERROR, "failed", exc_info=sys.exc_info()))
    assert "ValueError: boom" in sent[0]["message"] and sent[0]["message"].startswith("[thrd:h1]: failed\n")
    thread = threading.Thread(target=lambda: handler.emit(record("kqactors.runtime", logging.WARNING, "from a thread")))
    thread.start()
    thread.join()
    assert [r["message"] for r in relayed] == ["[thrd:h1]: from a thread"] and len(sent) == 1
