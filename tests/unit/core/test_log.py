"""Unit tests for the client's librdkafka-style log (kqactors.core.log): which records are made, and their text."""

from __future__ import annotations

import logging

from kqactors.core.log import (
    DEBUG_CONTEXTS,
    LOG_DEBUG,
    LOG_ERR,
    LOG_INFO,
    LOG_WARNING,
    ClientLog,
    python_level,
    syslog_level,
)


def recorder(**kwargs) -> tuple[ClientLog, list[dict]]:
    records: list[dict] = []
    return ClientLog(records.append, **kwargs), records


def test_log_level_filters_by_syslog_level():
    log, records = recorder(log_level=LOG_WARNING)
    log.log(LOG_ERR, "FAIL", "an error")
    log.log(LOG_WARNING, "WARN", "a warning")
    log.log(LOG_INFO, "INFO", "too chatty")
    assert [(r["level"], r["fac"]) for r in records] == [(LOG_ERR, "FAIL"), (LOG_WARNING, "WARN")]


def test_debug_records_need_their_context_and_debug_raises_the_level():
    log, records = recorder(log_level=LOG_ERR, debug="broker,topic")
    assert log.level == LOG_DEBUG  # librdkafka: any debug context sets log_level to 7
    log.debug("broker", "STATE", "state change")
    log.debug("msg", "PRODUCE", "not enabled")
    log.log(LOG_INFO, "INFO", "shown now too")
    assert [r["fac"] for r in records] == ["STATE", "INFO"]
    assert log.debugging("msg", "topic") and not log.debugging("msg", "fetch")


def test_all_enables_every_context_and_no_debug_enables_none():
    log, _ = recorder(debug=["all"])
    assert log.contexts == frozenset(DEBUG_CONTEXTS)
    quiet, records = recorder(debug="")
    assert not quiet.debugging("broker") and quiet.level == LOG_INFO
    quiet.debug("broker", "STATE", "x")
    quiet.debug_any("INIT", "x")
    assert records == []


def test_thread_name_prefix_follows_log_thread_name_and_renames():
    log, records = recorder(thread="127.0.0.1:9092/bootstrap")
    log.log(LOG_ERR, "FAIL", "down")
    log.rename("127.0.0.1:9092/1")
    log.log(LOG_ERR, "FAIL", "down again")
    assert [r["message"] for r in records] == ["[thrd:127.0.0.1:9092/bootstrap]: down", "[thrd:127.0.0.1:9092/1]: down again"]
    plain, records = recorder(thread="main", thread_name=False)
    plain.log(LOG_ERR, "FAIL", "down")
    assert records[0]["message"] == "down"


def test_from_config_reads_librdkafka_names_with_defaults():
    log = ClientLog.from_config({"log_level": 3, "debug": ["fetch"], "log.thread.name": False}, print, "x")
    assert log.contexts == {"fetch"} and log.level == LOG_DEBUG and log.prefix == ""
    default = ClientLog.from_config({}, print, "main")
    assert default.level == LOG_INFO and default.prefix == "[thrd:main]: " and not default.contexts


def test_python_and_syslog_levels_map_as_confluent_kafka_does():
    assert [python_level(level) for level in range(8)] == [50, 50, 50, 40, 30, 20, 20, 10]
    assert [syslog_level(level) for level in (logging.CRITICAL, logging.ERROR, logging.WARNING, logging.INFO,
                                              logging.DEBUG)] == [2, 3, 4, 6, 7]
