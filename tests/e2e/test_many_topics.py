"""One request that creates many topics, against three real nodes: a CreateTopics of 500
topics at RF 3 (confluent-kafka's AdminClient) and a Metadata v1 naming 2,000 unknown topics,
which auto-creates them (v0-v3 cannot say no). Judged by the client's answer and by every
node's loop-stall detector (raftlog_event_loop_stall_seconds).

Before: each topic was one controller commit and a leader wait of its own, in turn; the
CreateTopics of 1,000 timed out after 60 s with 320 created, and a Metadata v3 of 10,000
names went unanswered for more than 120 s. (500 here: at 1,000 topics of RF 3 every node opens
1,000 replicas at once, which held a node's loop long enough in CI to move a leadership, as a
1,000-partition topic's opening does; the request's handling is not that cost.)
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from support import wire as W
from support.cluster import Cluster, wait_for
from support.loop_stalls import node_figures, stalls_over

from raftlog.common.errors import ErrorCode

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

# A stall this long or longer costs leaderships (election timeouts are 0.5-1 s).
STALL_LIMIT = "1.0"
TOPICS = 500


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    # Room for both requests' replicas (the default budget is 1,100 a node).
    c = Cluster(
        tmp_path_factory.mktemp("many-topics"),
        nodes=3,
        name="many-topics",
        broker={"max.partition.replicas.per.node": 2000},
    )
    try:
        c.start()
        c.create_topic("t", partitions=6, replication_factor=3)
        yield c
    finally:
        c.stop()


def _leaders(admin: AdminClient, prefix: str) -> dict[tuple[str, int], int]:
    topics = admin.list_topics(timeout=30).topics
    return {
        (name, p): info.leader
        for name, topic in topics.items()
        if name.startswith(prefix)
        for p, info in topic.partitions.items()
    }


def test_a_create_topics_of_500_topics_is_answered_and_holds_no_loop(cluster: Cluster) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    before = node_figures(cluster)
    t_leaders = _leaders(admin, "t")
    names = [f"many-{i:04d}" for i in range(TOPICS)]
    started = time.monotonic()
    futures = admin.create_topics(
        [NewTopic(name, 1, 3) for name in names], request_timeout=30, operation_timeout=30
    )
    for name in names:
        futures[name].result(40)  # raises on any topic's error
    answered = time.monotonic() - started
    assert answered < 30, answered

    def all_led() -> bool:
        leaders = _leaders(admin, "many-")
        return len(leaders) == TOPICS and min(leaders.values()) >= 0

    wait_for(all_led, 60, 1.0, "every new topic led")
    time.sleep(1.5)  # a scrape's listing is reused for a moment
    after = node_figures(cluster)
    assert {n: stalls_over(before[n], after[n], STALL_LIMIT) for n in after} == dict.fromkeys(
        after, 0
    )
    assert _leaders(admin, "t") == t_leaders  # the topic that was there kept its leaders
    print(f"\nCreateTopics of {TOPICS} topics answered in {answered:.1f} s")


def test_metadata_auto_creating_2000_topics_is_answered_and_holds_no_loop(
    cluster: Cluster,
) -> None:
    before = node_figures(cluster)
    names = [f"auto-{i:04d}" for i in range(2000)]
    started = time.monotonic()
    with W.KafkaWire(cluster.node(1).kafka_addr, timeout=60) as wire:
        answer = wire.metadata(names, version=1)
    answered = time.monotonic() - started
    # Created (or being created): the client asks again until they are led, as with Kafka.
    assert answer.topic_errors == dict.fromkeys(names, ErrorCode.leader_not_available)
    assert answered < 15, answered
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    wait_for(lambda: len(_leaders(admin, "auto-")) == 2000, 30, 1.0, "the topics listed")
    time.sleep(1.5)
    after = node_figures(cluster)
    assert {n: stalls_over(before[n], after[n], STALL_LIMIT) for n in after} == dict.fromkeys(
        after, 0
    )
    print(f"\nMetadata v1 auto-creating 2,000 topics answered in {answered:.1f} s")
