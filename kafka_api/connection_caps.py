"""How many Kafka client connections a node holds open, over all its Kafka listeners (Kafka's
max.connections and max.connections.per.ip).

Nothing bounded them before: 19,950 connections from one client took every file descriptor
of a node (ulimit -n 20,000) and 300 MB more of its memory, and until they closed the node
accepted no other client (and a partition file it had to open would have failed too). Now a
node holds at most max.connections, by default what its descriptors leave after its partition
replicas, its HTTP listeners and the segments it keeps open for reads
(raftlog/common/limits.py). At the cap, the connection that has been quiet longest, with no
request in progress, is closed to let the new one in: a flood of idle connections cannot keep
real clients out. Only when the EVICTION_SCAN least recently active ones all have requests in
progress is the new one closed at once. A new connection past max.connections.per.ip from one
address is closed at once (Kafka's default is no such cap, and so is raftlog's). Each is
counted (/metrics) and reported in at most one log line per REPORT_INTERVAL_SECONDS (log_reports.py).
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Protocol

from raftlog.common.log_reports import Reports
from raftlog.node.listener_metrics import KafkaMetrics

log = logging.getLogger(__name__)

# Connections looked at, least recently active first, for one to close at the cap: the work
# of one accept stays bounded however many connections are open.
EVICTION_SCAN = 64
NO_CAP = 2**31 - 1  # Kafka's default of both settings
BY_NODE, BY_ADDRESS = "node", "address"


class Capped(Protocol):
    """What the caps read of a connection (connection.py's Connection)."""

    def idle_for(self, now: float) -> float: ...

    def close(self) -> object: ...


class ConnectionCaps:
    """The node's Kafka connections, least recently active first, within its two caps."""

    def __init__(
        self,
        max_connections: int = NO_CAP,
        max_per_address: int = NO_CAP,
        metrics: KafkaMetrics | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.max_connections = max_connections
        self.max_per_address = max_per_address
        self.metrics = metrics or KafkaMetrics()
        self._clock = clock
        self._open: OrderedDict[Capped, str] = OrderedDict()  # -> the client's address
        self._by_address: dict[str, int] = {}
        self._reports = Reports(log, clock)

    @property
    def open(self) -> int:
        return len(self._open)

    def admit(self, conn: Capped, address: str) -> bool:
        """Counts a new connection in, closing the idlest at the node's cap to make room; or
        refuses it (False: the caller closes it)."""
        from_address = self._by_address.get(address, 0)
        if from_address >= self.max_per_address:
            self._refuse(BY_ADDRESS, address, "max.connections.per.ip", from_address)
            return False
        if len(self._open) >= self.max_connections:
            idlest = self._idlest()
            if idlest is None:
                self._refuse(BY_NODE, address, "max.connections", len(self._open))
                return False
            self.metrics.connections_evicted += 1
            self._reports.report(
                "evicted",
                logging.WARNING,
                "%d Kafka connections open (max.connections): closed the one quiet longest, "
                "from %s, to let one from %s in",
                len(self._open),
                self._open[idlest],
                address,
            )
            self.release(idlest)
            idlest.close()
        self._open[conn] = address
        self._by_address[address] = from_address + 1
        return True

    def active(self, conn: Capped) -> None:
        """The client sent something: its connection moves to the back of the eviction line."""
        if conn in self._open:
            self._open.move_to_end(conn)

    def release(self, conn: Capped) -> None:
        """Counts a connection out, once (an evicted one is counted out when evicted)."""
        address = self._open.pop(conn, None)
        if address is None:
            return
        left = self._by_address.pop(address) - 1
        if left:
            self._by_address[address] = left

    def _idlest(self) -> Capped | None:
        now = self._clock()
        for scanned, conn in enumerate(self._open):
            if scanned >= EVICTION_SCAN:
                return None
            if conn.idle_for(now) > 0:  # 0 while a request of it is in progress
                return conn
        return None

    def _refuse(self, cap: str, address: str, setting: str, count: int) -> None:
        self.metrics.connections_refused[cap] += 1
        where = "open" if cap == BY_NODE else "open from that address"
        self._reports.report(
            f"refused {cap}",
            logging.WARNING,
            "closed a new Kafka connection from %s at once: %d connections %s (%s)",
            address,
            count,
            where,
            setting,
        )
