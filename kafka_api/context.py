"""What a handler knows about the request it answers, besides the decoded body."""

from __future__ import annotations

from dataclasses import dataclass

from raftlog.broker import Broker


@dataclass(frozen=True, slots=True)
class RequestContext:
    """Handlers shape their answer by api_version; the client fields are for logging only."""

    broker: Broker
    api_version: int
    client_id: str | None
    client_host: str
