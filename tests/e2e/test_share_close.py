"""A share consumer's close never loses its acknowledgements (issue 43), with confluent-kafka's
ShareConsumer, unchanged, against a 3-node cluster whose nodes lock records for 1 s (the
broker settings confluent-kafka's own suite runs with).

The two flows of confluent-kafka's suite that lost acknowledgements, each repeated ITERATIONS
times (RAFTLOG_SHARE_CLOSE_ITERATIONS, 200 by default) in each of two groups:
- partial: a consumer acknowledges half of what it got (ACCEPT) and closes; the rest goes
  back to the group (test_explicit_close_partial_acks_releases_remainder);
- async: a consumer acknowledges all it got, commit_async() and close() at once
  (test_commit_async_then_immediate_close_persists).
librdkafka's close sends its last acknowledgements to the partition's leader and its leave to
the group's coordinator together; before the fix, a leave that got there first ended the
member's session on every node, the acknowledgements were refused (librdkafka logged
"ShareAcknowledge reply error: Broker: The share session was not found") and the records went
to the next consumer again: 20 rounds of the old code had 40-52 of 78 accepted records
delivered again in the partial flow, 48 of 60 in the async flow's group coordinated elsewhere.
Each flow runs in two groups, one coordinated on the partition leader's node and one
elsewhere (each on its own topic, in parallel), and each iteration's consumer is the previous
one's witness: it must get what the previous one left unacknowledged (delivery count 2) and
never a record any consumer accepted. A last consumer of each group polls past the lock."""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest
from confluent_kafka import AcknowledgeType, Producer, ShareConsumer
from support import groups as G
from support import wire as W
from support.cluster import Cluster
from support.share import share_consumer, share_group

# A close takes 10-40 ms here: 200 rounds of each flow in two groups take about 8 s.
ITERATIONS = int(os.environ.get("RAFTLOG_SHARE_CLOSE_ITERATIONS", "200"))
pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300 + 2 * ITERATIONS)]

BROKER = {
    "group.share.record.lock.duration.ms": 1000,
    "group.share.min.record.lock.duration.ms": 1000,
}
READ_DEADLINE = 30.0  # for what a consumer must get
WITNESS_SECONDS = 3.0  # the last consumer's polls: past the 1 s lock
NOT_FOUND = "share session was not found"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    workdir = tmp_path_factory.mktemp("share_close")
    with G.running_cluster(workdir, name="share_close", broker=BROKER) as c:
        yield c


class Refusals(logging.Handler):
    """Counts librdkafka's log lines saying a share request found no session."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0
        self.lines: list[str] = []  # the first few, to tell which request it was

    def emit(self, record: logging.LogRecord) -> None:
        if NOT_FOUND in record.getMessage():
            self.count += 1
            if len(self.lines) < 5:
                self.lines.append(
                    f"{time.strftime('%H:%M:%S', time.gmtime())} UTC: {record.getMessage()}"
                )


@dataclass
class Ledger:
    """What one group's consumers accepted, and what came back that should not have."""

    flow: str
    topic: str
    group: str
    accepted: dict[bytes, int] = field(default_factory=dict)  # value -> iteration closed
    again: list[str] = field(default_factory=list)  # accepted records delivered again
    slowest_close: float = 0.0
    refusals: Refusals = field(default_factory=Refusals)

    def seen(self, iteration: int, value: bytes, count: int) -> None:
        if value in self.accepted:
            self.again.append(
                f"{self.group} iteration {iteration}: {value!r} (delivery {count}) was accepted "
                f"by iteration {self.accepted[value]}'s consumer"
            )

    def consumer(self, cluster: Cluster) -> ShareConsumer:
        logger = logging.getLogger(f"share-close.{self.group}")
        logger.propagate = False
        logger.setLevel(logging.DEBUG)
        if self.refusals not in logger.handlers:
            logger.addHandler(self.refusals)
        return share_consumer(cluster, self.group, explicit=True, logger=logger)


def _group(cluster: Cluster, topic: str, on_leader: bool) -> str:
    """A new group coordinated by the node leading `topic`'s partition, or by
    another one (the leave and the last acknowledgements then reach different nodes)."""
    partition, _ = W.find_partition_leader(cluster.bootstrap, topic, 0)
    for i in range(200):
        name = f"{topic}-{i}"
        here = G.coordinator_address(cluster.bootstrap, name).node_id == partition.leader
        if here == on_leader:
            return share_group(cluster, name=name)
    raise AssertionError(f"no group coordinated {'on' if on_leader else 'off'} the leader")


def _run(cluster: Cluster, flow: str, ledger: Ledger, iterations: int) -> None:
    """The flow, `iterations` times in one group; each consumer also witnesses the last."""
    topic = ledger.topic
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "linger.ms": 5, "acks": "all"})
    size = 4 if flow == "partial" else 3
    released: set[bytes] = set()  # what the last consumer left unacknowledged
    for i in range(iterations):
        new = [f"{ledger.group}-{i}-{k}".encode() for k in range(size)]
        for value in new:
            producer.produce(topic, value, partition=0)
        assert producer.flush(30) == 0
        keep = set(new[: size // 2]) if flow == "partial" else set(new)
        consumer = ledger.consumer(cluster)
        consumer.subscribe([topic])
        got: dict[bytes, int] = {}
        accepted: set[bytes] = set()
        deadline = time.monotonic() + READ_DEADLINE
        try:
            while not (set(new) | released) <= set(got) and time.monotonic() < deadline:
                for m in consumer.poll(0.5):
                    assert m.error() is None, m.error()
                    value = m.value()
                    ledger.seen(i, value, m.delivery_count())
                    got[value] = m.delivery_count()
                    if value in keep or value not in new:  # all but the half to leave
                        consumer.acknowledge(m, AcknowledgeType.ACCEPT)
                        accepted.add(value)
            if flow == "async":
                consumer.commit_async()
        finally:
            started = time.monotonic()
            consumer.close()
            ledger.slowest_close = max(ledger.slowest_close, time.monotonic() - started)
        missing = (set(new) | released) - set(got)
        assert not missing, f"{ledger.group} iteration {i}: never got {sorted(missing)}"
        assert all(got[v] >= 2 for v in released), (ledger.group, i, got)
        ledger.accepted.update(dict.fromkeys(accepted, i))
        released = set(new) - keep
    # The last consumer gets what the one before left and a record produced now (so it is
    # fetching), then polls past the lock: nothing accepted comes back.
    end = f"{ledger.group}-end".encode()
    producer.produce(topic, end, partition=0)
    assert producer.flush(30) == 0
    witness = ledger.consumer(cluster)
    witness.subscribe([topic])
    got = {}
    try:
        deadline = time.monotonic() + READ_DEADLINE
        quiet = time.monotonic() + WITNESS_SECONDS
        while time.monotonic() < max(quiet, deadline if end not in got else 0):
            for m in witness.poll(0.5):
                ledger.seen(iterations, m.value(), m.delivery_count())
                got[m.value()] = m.delivery_count()
                witness.acknowledge(m, AcknowledgeType.ACCEPT)
                quiet = time.monotonic() + WITNESS_SECONDS
    finally:
        witness.close()
    assert set(got) == released | {end}, (ledger.group, sorted(got), sorted(released))


@pytest.mark.parametrize("flow", ["partial", "async"])
def test_acknowledgements_sent_as_a_share_consumer_closes_are_never_lost(
    cluster: Cluster, flow: str
) -> None:
    ledgers = []
    for placement in ("leader", "elsewhere"):  # a topic and a group each
        topic = f"share-close-{flow}-{placement}"
        cluster.create_topic(topic, partitions=1, replication_factor=3)
        ledgers.append(Ledger(flow, topic, _group(cluster, topic, placement == "leader")))
    errors: list[BaseException] = []

    def run(ledger: Ledger) -> None:
        try:
            _run(cluster, flow, ledger, ITERATIONS)
        except BaseException as e:  # noqa: BLE001 - reported below, with the ledgers
            errors.append(e)

    started = time.monotonic()
    threads = [threading.Thread(target=run, args=(ledger,)) for ledger in ledgers]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    took = time.monotonic() - started
    for ledger in ledgers:
        print(
            f"\n{flow} {ledger.group}: {ITERATIONS} closes in {took:.1f} s, slowest close "
            f"{ledger.slowest_close:.2f} s, {len(ledger.accepted)} records accepted, "
            f"{len(ledger.again)} delivered again, {ledger.refusals.count} "
            f"'{NOT_FOUND}' lines from librdkafka"
        )
    again = [line for ledger in ledgers for line in ledger.again]
    assert again == [], "\n".join(again[:20])
    refused = [line for ledger in ledgers for line in ledger.refusals.lines]
    assert [ledger.refusals.count for ledger in ledgers] == [0, 0], refused  # the symptom
    if errors:
        raise errors[0]
    for n in cluster.node_ids:
        logged = cluster.nodes[n].log.read_text(errors="replace")
        bad = [line for line in logged.splitlines() if " ERROR " in line or "Traceback" in line]
        assert bad == [], f"node {n} logged:\n" + "\n".join(bad[:20])
