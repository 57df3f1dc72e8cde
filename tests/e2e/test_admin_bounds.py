"""Admin requests against real nodes are bounded before they are trusted (issue 26).

DescribeConfigs naming one topic 20,000 times built a 23.5 MB answer and held the node's
loop 4.6 s; topic configs past their Java type (`max.message.bytes=2147483648`,
`retention.ms=99999999999999999999`) were stored; a DeleteTopics could name any number of
topics. Each is now refused with Kafka's error, the node keeps serving, and nothing refused
is stored. (CreateTopics and CreatePartitions over the per-request bound: test_limits.py;
a group config name of 1 MiB: test_group_configs.py.)
"""

from __future__ import annotations

import time

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewTopic,
    ResourceType,
)
from kio.index import load_request_schema, load_response_schema
from support import wire as W

from kafka_api.entry_bounds import MAX_ENTRIES

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

TOPIC = "bounded"
DESCRIBE_CONFIGS = 32
DELETE_TOPICS = 20
TOPIC_RESOURCE = 2


@pytest.fixture(scope="module")
def topic(module_cluster):
    module_cluster.create_topic(TOPIC, partitions=1, replication_factor=3)
    W.topic_metadata(module_cluster.bootstrap, TOPIC)
    return TOPIC


def admin_for(cluster) -> AdminClient:
    return AdminClient({"bootstrap.servers": cluster.bootstrap})


def topic_configs(admin: AdminClient, name: str) -> dict[str, tuple[str, ConfigSource]]:
    resource = ConfigResource(ResourceType.TOPIC, name)
    entries = admin.describe_configs([resource])[resource].result(30)
    return {key: (e.value, ConfigSource(e.source)) for key, e in entries.items()}


def refused(call) -> KafkaError:
    with pytest.raises(KafkaException) as caught:
        call()
    return caught.value.args[0]


def assert_all_serving(cluster) -> None:
    for node_id in cluster.node_ids:
        assert cluster.is_alive(node_id), cluster.log_tails([node_id])
        with W.KafkaWire(cluster.node(node_id).kafka, timeout=10) as w:
            assert w.metadata([TOPIC]).topic_errors[TOPIC] == W.NONE


def test_describe_configs_naming_a_topic_20000_times_is_answered_small(
    module_cluster, topic
) -> None:
    """Over 1,000 resources, every one is INVALID_REQUEST without configs; up to 1,000, every
    copy of a resource named twice is. The answer is what the request's names make, not
    20,000 topics' configs with their documentation (past MAX_ENTRIES resources the request
    is refused unread: test_request_bounds.py)."""
    request_type = load_request_schema(DESCRIBE_CONFIGS, 4)
    response_type = load_response_schema(DESCRIBE_CONFIGS, 4)
    cases = [
        (MAX_ENTRIES, f"DescribeConfigs names {MAX_ENTRIES} resources, at most 1000 per request"),
        (1_000, "The request names this resource more than once"),
    ]
    with W.KafkaWire(module_cluster.node(1).kafka, timeout=30) as w:
        for copies, message in cases:
            resource = {
                "resource_type": TOPIC_RESOURCE,
                "resource_name": TOPIC,
                "configuration_keys": None,
            }
            payload = W.build(
                request_type,
                {
                    "resources": [resource] * copies,
                    "include_synonyms": True,
                    "include_documentation": True,
                },
            )
            cid = w.next_correlation_id()
            started = time.monotonic()
            w.send_bytes(W.encode_request(payload, cid))
            frame = w.recv_frame(30)
            took = time.monotonic() - started
            _, response = W.decode_response(frame, response_type)
            assert len(response.results) == copies
            assert {
                (W.code(r.error_code), r.error_message, r.configs) for r in response.results
            } == {(W.INVALID_REQUEST, message, ())}
            assert len(frame) < 100 * copies, len(frame)  # 23.5 MB before for 20,000
            assert took < 2.5, took  # ~0.3 s here for 20,000; the stall was 4.6 s
    admin = admin_for(module_cluster)
    assert topic_configs(admin, TOPIC)["max.message.bytes"][0] == "1048588"
    assert_all_serving(module_cluster)


OVERFLOWS = [
    (
        "max.message.bytes",
        "2147483648",
        "Invalid value 2147483648 for configuration max.message.bytes: Not a number of type INT",
    ),
    (
        "retention.ms",
        "99999999999999999999",
        "Invalid value 99999999999999999999 for configuration retention.ms: "
        "Not a number of type LONG",
    ),
    (
        "segment.bytes",
        "1" * 2000,
        "Invalid value of 2000 characters for configuration segment.bytes: "
        "longer than the maximum of 1024",
    ),
]


@pytest.mark.parametrize(("name", "value", "message"), OVERFLOWS)
def test_topic_config_values_past_their_type_are_refused_and_not_stored(
    module_cluster, topic, name: str, value: str, message: str
) -> None:
    """CreateTopics, IncrementalAlterConfigs and AlterConfigs share one check: Kafka's
    INVALID_CONFIG with Kafka's ConfigDef message, and nothing of the request kept."""
    admin = admin_for(module_cluster)
    before = topic_configs(admin, TOPIC)
    created = admin.create_topics([NewTopic("overflowing", 1, 1, config={name: value})])
    error = refused(lambda: created["overflowing"].result(30))
    assert (error.code(), error.str()) == (KafkaError.INVALID_CONFIG, message)
    assert "overflowing" not in admin.list_topics(timeout=10).topics

    resource = ConfigResource(
        ResourceType.TOPIC,
        TOPIC,
        incremental_configs=[
            ConfigEntry("retention.bytes", "5", incremental_operation=AlterConfigOpType.SET),
            ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET),
        ],
    )
    error = refused(lambda: admin.incremental_alter_configs([resource])[resource].result(30))
    assert (error.code(), error.str()) == (KafkaError.INVALID_CONFIG, message)
    # AlterConfigs, raw: confluent-kafka has deprecated it
    with W.KafkaWire(module_cluster.node(1).kafka) as w:
        response = w.call(
            33,
            2,
            {
                "resources": [
                    {
                        "resource_type": TOPIC_RESOURCE,
                        "resource_name": TOPIC,
                        "configs": [{"name": name, "value": value}],
                    }
                ],
                "validate_only": False,
            },
        )
    (result,) = response.responses
    assert (W.code(result.error_code), result.error_message) == (40, message)  # INVALID_CONFIG
    assert topic_configs(admin, TOPIC) == before


def test_delete_topics_over_the_bound_is_refused_unread(module_cluster, topic) -> None:
    """Kafka refuses more than 10,000 topics in one DeleteTopics (POLICY_VIOLATION for each);
    here the request is refused before it is read, and its connection closed, since the
    answer would carry every name (kafka_api/entry_bounds.py). Nothing is deleted."""
    names = [TOPIC] + [f"gone-{i}" for i in range(MAX_ENTRIES)]
    with (
        W.KafkaWire(module_cluster.node(1).kafka, timeout=30) as w,
        pytest.raises(W.ConnectionClosed),
    ):
        w.call(DELETE_TOPICS, 5, {"topic_names": names, "timeout": 30000})
    assert TOPIC in admin_for(module_cluster).list_topics(timeout=10).topics
    assert_all_serving(module_cluster)
