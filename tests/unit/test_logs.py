"""A node's log lines (raftlog_app/logs.py): one line per event, as text or JSON."""

from __future__ import annotations

import json
import logging
import sys

from raftlog_app.logs import JsonFormatter, TextFormatter


def record(message: str, *args: object, error: bool = False) -> logging.LogRecord:
    exc_info = None
    if error:
        try:
            raise ValueError("bad\nvalue")
        except ValueError:
            exc_info = sys.exc_info()
    return logging.LogRecord(
        "raftlog.node.node", logging.WARNING, __file__, 1, message, args, exc_info
    )


def test_a_json_line_carries_the_event_and_its_exception() -> None:
    line = JsonFormatter(3).format(
        record("partition %s-%d: %s", "t", 0, "lost\nleader", error=True)
    )
    assert "\n" not in line
    event = json.loads(line)
    assert event["level"] == "WARNING"
    assert event["node"] == 3
    assert event["logger"] == "raftlog.node.node"
    assert event["message"] == "partition t-0: lost\nleader"
    assert event["time"].endswith("+00:00") and "T" in event["time"]
    assert (
        event["exception"].startswith("Traceback")
        and "ValueError: bad\nvalue" in (event["exception"])
    )


def test_a_json_line_without_an_exception_has_no_exception_field() -> None:
    event = json.loads(JsonFormatter(1).format(record("plain ünïcode")))
    assert event["message"] == "plain ünïcode"
    assert "exception" not in event and "stack" not in event


def test_a_text_line_keeps_a_traceback_on_its_line() -> None:
    line = TextFormatter(2).format(record("stalled for %.2fs", 0.5, error=True))
    assert "\n" not in line
    assert " WARNING [node 2] raftlog.node.node: stalled for 0.50s\\nTraceback" in line
    assert line.endswith("ValueError: bad\\nvalue")


def test_a_process_that_is_no_node_names_itself() -> None:
    line = TextFormatter("proxy").format(record("serving"))
    assert " WARNING [proxy] raftlog.node.node: serving" in line
