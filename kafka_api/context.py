"""What a handler knows about the request it answers, besides the decoded body."""

from __future__ import annotations

from dataclasses import dataclass

from raftlog.broker_api import Broker
from raftlog.security.principal import ANONYMOUS
from raftlog.security.sasl import SaslSession


@dataclass(frozen=True, slots=True)
class RequestContext:
    """Handlers shape their answer by api_version and authorize by principal and client_host
    (Kafka's ACL host); client_id is for logging only."""

    broker: Broker
    api_version: int
    client_id: str | None
    client_host: str
    principal: str = ANONYMOUS  # "User:<name>", as Kafka's ACLs name it
    sasl: SaslSession | None = None  # the connection's SASL exchange, on SASL listeners
