"""What the node's listeners count for its /metrics (raftlog/node/metrics.py serves them):
the Kafka API's requests, errors and latencies per API (KafkaMetrics, counted by kafka_api as
it answers), and the HTTP listeners' connections and refusals, each as a metric family of plain
rows (Family) that prometheus_client's families are built from at scrape time."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from kio.schema.index import api_key_map
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

from raftlog.common.counters import Histogram
from raftlog.common.errors import ErrorCode
from raftlog.common.http_listener import (
    BAD_REQUEST_STATUSES,
    REFUSED_BY_ADDRESS,
    REFUSED_BY_LISTENER,
)

if TYPE_CHECKING:
    from raftlog.common.http_listener import HttpStats

# Request latency: from a request's decode to its encoded answer; Fetch long polls wait up to
# their max wait (500 ms by default in most clients), hence the upper buckets.
REQUEST_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5)
# Error codes counted apart per API; any further code of that API counts as OTHER.
ERROR_CODES_PER_API = 8


COUNTER, GAUGE, HISTOGRAM = "counter", "gauge", "histogram"
_FAMILIES = {COUNTER: CounterMetricFamily, GAUGE: GaugeMetricFamily}


class Family:
    """A metric family's samples as plain rows, taken on the event loop; metric() builds
    prometheus_client's family from them, which may happen in another thread."""

    __slots__ = ("doc", "kind", "labels", "name", "rows")

    def __init__(self, kind: str, name: str, doc: str, labels: Sequence[str] = ()) -> None:
        self.kind, self.name, self.doc, self.labels = kind, name, doc, list(labels)
        self.rows: list[tuple[list[str], Any]] = []

    def add(self, labels: list[str], value: Any) -> Family:
        self.rows.append((labels, value))
        return self

    def metric(self) -> Metric:
        if self.kind == HISTOGRAM:
            histogram = HistogramMetricFamily(self.name, self.doc, labels=self.labels)
            for labels, (buckets, total) in self.rows:
                histogram.add_metric(labels, buckets, total)
            return histogram
        family = _FAMILIES[self.kind](self.name, self.doc, labels=self.labels)
        for labels, value in self.rows:
            family.add_metric(labels, value)
        return family


# --- Kafka listener --------------------------------------------------------------------------

_TOPIC_LISTS = ("responses", "topics", "results")
_PARTITION_LISTS = ("partitions", "partition_responses")


def response_error(response: Any) -> int:
    """A Kafka response's error code: its top-level one, else the first non-zero one of its
    topics or their partitions (one pass over them, as the handler built them), else 0."""
    code = getattr(response, "error_code", 0)
    if code:
        return int(code)
    topics: Sequence[Any] = ()
    for name in _TOPIC_LISTS:
        topics = getattr(response, name, ())
        if topics:
            break
    for topic in topics:
        code = getattr(topic, "error_code", 0)
        if code:
            return int(code)
        for name in _PARTITION_LISTS:
            for partition in getattr(topic, name, ()):
                code = getattr(partition, "error_code", 0)
                if code:
                    return int(code)
    return 0


class ApiStats:
    """One Kafka API's requests, errors by code and latency."""

    __slots__ = ("errors", "latency", "requests")

    def __init__(self) -> None:
        self.requests = 0
        self.errors: dict[int | None, int] = {}  # error code (None: OTHER) -> answers
        self.latency = Histogram(REQUEST_BUCKETS)

    def answered(self, seconds: float, response: Any) -> None:
        """A request answered (or, for acks=0, handled): response is None when unanswered."""
        self.requests += 1
        self.latency.observe(seconds)
        if response is not None:
            code = response_error(response)
            if code:
                self._error(code)

    def failed(self, seconds: float) -> None:
        """The handler raised: the connection is closed (counted as UNKNOWN_SERVER_ERROR)."""
        self.requests += 1
        self.latency.observe(seconds)
        self._error(int(ErrorCode.unknown_server_error))

    def _error(self, code: int) -> None:
        key: int | None = code
        if code not in self.errors and len(self.errors) >= ERROR_CODES_PER_API:
            key = None
        self.errors[key] = self.errors.get(key, 0) + 1


def api_name(api_key: int) -> str:
    """Kafka's name of an API (Produce, ShareFetch), the label value of its metrics."""
    snake = api_key_map.get(api_key)
    return "".join(w.capitalize() for w in snake.split("_")) if snake else str(api_key)


def error_name(code: int | None) -> str:
    if code is None:
        return "OTHER"
    try:
        return ErrorCode(code).name.upper()
    except ValueError:
        return str(code)


class KafkaMetrics:
    """What a node's Kafka listener counts: requests per API, connections, failed logins."""

    def __init__(self) -> None:
        self.apis: dict[int, ApiStats] = {}
        self.connections_opened = 0
        self.connections_closed = 0
        # closed at once, by cap (kafka_api/connection_caps.py), and closed to make room
        self.connections_refused = {"node": 0, "address": 0}
        self.connections_evicted = 0
        self.authentication_failures = 0

    def api(self, api_key: int) -> ApiStats:
        stats = self.apis.get(api_key)
        if stats is None:
            stats = self.apis[api_key] = ApiStats()
        return stats

    def authentication_failed(self) -> None:
        """A SASL or TLS client authentication was refused
        (raftlog_kafka_authentication_failures_total)."""
        self.authentication_failures += 1

    def read(self) -> list[Family]:
        requests = Family(
            COUNTER, "raftlog_kafka_requests_total", "Kafka requests handled, by API.", ["api"]
        )
        errors = Family(
            COUNTER,
            "raftlog_kafka_request_errors_total",
            "Kafka answers carrying an error code (top level, else the first of a topic or "
            f"partition), by API and code; past {ERROR_CODES_PER_API} codes of an API: OTHER.",
            ["api", "error"],
        )
        latency = Family(
            HISTOGRAM,
            "raftlog_kafka_request_duration_seconds",
            "Time from a request's decode to its encoded answer, by API.",
            ["api"],
        )
        for key, stats in sorted(self.apis.items()):
            name = api_name(key)
            requests.add([name], stats.requests)
            for code, count in stats.errors.items():
                errors.add([name, error_name(code)], count)
            latency.add([name], stats.latency.read())
        refused = Family(
            COUNTER,
            "raftlog_kafka_connections_refused_total",
            "Kafka connections closed at once: the client's address had max.connections.per.ip "
            "open (cap address), or the node max.connections, each with a request in progress "
            "(cap node).",
            ["cap"],
        )
        for cap, count in sorted(self.connections_refused.items()):
            refused.add([cap], count)
        return [
            requests,
            errors,
            latency,
            Family(
                GAUGE, "raftlog_kafka_connections_open", "Kafka client connections open now."
            ).add([], self.connections_opened - self.connections_closed),
            Family(
                COUNTER, "raftlog_kafka_connections_total", "Kafka client connections accepted."
            ).add([], self.connections_opened),
            refused,
            Family(
                COUNTER,
                "raftlog_kafka_connections_evicted_total",
                "Kafka connections quiet longest closed to let a new one in, the node having "
                "max.connections open.",
            ).add([], self.connections_evicted),
            Family(
                COUNTER,
                "raftlog_kafka_authentication_failures_total",
                "Kafka client authentications refused (SASL or TLS client certificate).",
            ).add([], self.authentication_failures),
        ]


def http_families(listeners: dict[str, HttpStats]) -> list[Family]:
    """The HTTP listeners' counts (raftlog/common/http_listener.py), by listener."""
    opened = Family(
        GAUGE, "raftlog_http_connections_open", "HTTP connections open now.", ["listener"]
    )
    accepted = Family(
        COUNTER, "raftlog_http_connections_total", "HTTP connections accepted.", ["listener"]
    )
    refused = Family(
        COUNTER,
        "raftlog_http_connections_refused_total",
        "HTTP connections closed at once: the client's address had "
        "http.max.connections.per.ip open, or the listener http.max.connections, each with a "
        "request in progress.",
        ["listener", "cap"],
    )
    evicted = Family(
        COUNTER,
        "raftlog_http_connections_evicted_total",
        "HTTP connections waiting for a request head closed to let a new one in, the "
        "listener having http.max.connections open.",
        ["listener"],
    )
    bad = Family(
        COUNTER,
        "raftlog_http_bad_requests_total",
        "HTTP requests refused unread: 414 URL too long, 431 header too large, 400 malformed.",
        ["listener", "status"],
    )
    for name, stats in sorted(listeners.items()):
        opened.add([name], stats.open)
        accepted.add([name], stats.accepted)
        for cap in (REFUSED_BY_LISTENER, REFUSED_BY_ADDRESS):
            refused.add([name, cap], stats.refused[cap])
        evicted.add([name], stats.evicted)
        for status in BAD_REQUEST_STATUSES:
            bad.add([name, str(status)], stats.bad_requests[status])
    return [opened, accepted, refused, evicted, bad]
