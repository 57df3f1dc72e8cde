"""A node's log: one line per event, as text or as JSON (`log.format` in [broker]), written
to one place only. `raftlog serve` logs to stderr, where a terminal, docker or systemd
shows it; `raftlog cluster up` starts its detached nodes with --log-file
DIR/node-<i>/raftlog.log, and their console.log then holds only what never reached the log
(a crash's traceback). Both used to get every line, so each event was written twice."""

from __future__ import annotations

import datetime
import json
import logging


class TextFormatter(logging.Formatter):
    """`time LEVEL [node N] logger: message`, a traceback kept on its event's line (newlines
    written as \\n) so that each line is one event for grep and line-based collectors. A
    process that is no node names itself (`[proxy]`, the standalone consume proxy)."""

    def __init__(self, node_id: int | str) -> None:
        who = f"node {node_id}" if isinstance(node_id, int) else node_id
        super().__init__(f"%(asctime)s %(levelname)s [{who}] %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        return super().format(record).replace("\n", "\\n")


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time (UTC, ISO 8601, ms), level, node, logger, message, and
    exception / stack when the event carries them."""

    def __init__(self, node_id: int) -> None:
        super().__init__()
        self._node_id = node_id

    def format(self, record: logging.LogRecord) -> str:
        created = datetime.datetime.fromtimestamp(record.created, datetime.UTC)
        event: dict[str, object] = {
            "time": created.isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "node": self._node_id,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            event["exception"] = self.formatException(record.exc_info)
        if record.stack_info:
            event["stack"] = self.formatStack(record.stack_info)
        return json.dumps(event, ensure_ascii=False)


def configure(handler: logging.Handler, node_id: int, log_format: str) -> None:
    """Every logger of the process writes through `handler` alone, in `log_format`."""
    formatter = JsonFormatter(node_id) if log_format == "json" else TextFormatter(node_id)
    handler.setFormatter(formatter)
    logging.basicConfig(level=logging.INFO, handlers=[handler], force=True)
