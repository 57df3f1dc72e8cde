"""Group configs (KIP-932's share.* settings) through confluent-kafka's AdminClient: set with
IncrementalAlterConfigs and AlterConfigs on ResourceType.GROUP (32 on the wire), read back with
DescribeConfigs, validated as Kafka does, replicated by the controller to every node and kept
across a restart of the whole cluster."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    ResourceType,
)
from support import wire as W
from support.cluster import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

DEFAULTS = {
    "consumer.heartbeat.interval.ms": "5000",
    "consumer.session.timeout.ms": "45000",
    "share.auto.offset.reset": "latest",
    "share.delivery.count.limit": "5",
    "share.heartbeat.interval.ms": "5000",
    "share.isolation.level": "read_uncommitted",
    "share.partition.max.record.locks": "2000",
    "share.record.lock.duration.ms": "30000",
    "share.renew.acknowledge.enable": "true",
    "share.session.timeout.ms": "45000",
}
DESCRIBE_CONFIGS = 32
INCREMENTAL_ALTER_CONFIGS = 44
GROUP_RESOURCE = 32  # Kafka's ConfigResource.Type.GROUP on the wire


def admin_for(cluster: Any) -> AdminClient:
    return AdminClient({"bootstrap.servers": cluster.bootstrap})


def incremental(admin: AdminClient, group: str, *ops: tuple[str, str | None, AlterConfigOpType]):
    resource = ConfigResource(
        ResourceType.GROUP,
        group,
        incremental_configs=[
            ConfigEntry(name, value, incremental_operation=op) for name, value, op in ops
        ],
    )
    return admin.incremental_alter_configs([resource])[resource].result(30)


def describe(admin: AdminClient, group: str) -> dict[str, tuple[str, ConfigSource]]:
    resource = ConfigResource(ResourceType.GROUP, group)
    entries = admin.describe_configs([resource])[resource].result(30)
    return {name: (e.value, ConfigSource(e.source)) for name, e in entries.items()}


def refused(call) -> KafkaError:
    with pytest.raises(KafkaException) as caught:
        call()
    return caught.value.args[0]


def described_by(node_addr: tuple[str, int], group: str) -> dict[str, tuple[str, int]]:
    """DescribeConfigs sent to one node (the AdminClient picks its broker itself)."""
    with W.KafkaWire(node_addr) as conn:
        response = conn.call(
            DESCRIBE_CONFIGS,
            4,
            {
                "resources": [
                    {
                        "resource_type": GROUP_RESOURCE,
                        "resource_name": group,
                        "configuration_keys": None,
                    }
                ],
                "include_synonyms": False,
                "include_documentation": False,
            },
        )
    (result,) = response.results
    assert W.code(result.error_code) == 0, result.error_message
    return {c.name: (c.value, int(c.config_source)) for c in result.configs}


def test_set_describe_refuse_and_delete(module_cluster) -> None:
    admin = admin_for(module_cluster)
    before = describe(admin, "never-configured")  # any group id answers, as in Kafka
    assert before == {
        name: (value, ConfigSource.DEFAULT_CONFIG) for name, value in DEFAULTS.items()
    }

    incremental(
        admin,
        "g",
        ("share.auto.offset.reset", "earliest", AlterConfigOpType.SET),
        ("share.record.lock.duration.ms", "20000", AlterConfigOpType.SET),
    )
    after = describe(admin, "g")
    assert after == {
        **before,
        "share.auto.offset.reset": ("earliest", ConfigSource.GROUP_CONFIG),
        "share.record.lock.duration.ms": ("20000", ConfigSource.GROUP_CONFIG),
    }

    for bad in (
        ("share.record.lock.duration.ms", "1000", AlterConfigOpType.SET),  # below 15000
        ("share.auto.offset.reset", "sometimes", AlterConfigOpType.SET),
        ("share.delivery.count.limit", "ten", AlterConfigOpType.SET),
        ("share.no.such.setting", "1", AlterConfigOpType.SET),
        ("share.isolation.level", "read_committed", AlterConfigOpType.APPEND),
    ):
        error = refused(lambda bad=bad: incremental(admin, "g", bad))
        assert error.code() == KafkaError.INVALID_CONFIG, (bad, error)
    assert describe(admin, "g") == after  # nothing refused was kept

    incremental(admin, "g", ("share.record.lock.duration.ms", None, AlterConfigOpType.DELETE))
    deleted = describe(admin, "g")
    assert deleted["share.record.lock.duration.ms"] == ("30000", ConfigSource.DEFAULT_CONFIG)
    assert deleted["share.auto.offset.reset"] == ("earliest", ConfigSource.GROUP_CONFIG)


def test_alter_configs_replaces_every_group_setting(module_cluster) -> None:
    admin = admin_for(module_cluster)
    incremental(admin, "whole", ("share.delivery.count.limit", "3", AlterConfigOpType.SET))
    resource = ConfigResource(
        ResourceType.GROUP, "whole", set_config={"share.isolation.level": "read_committed"}
    )
    admin.alter_configs([resource])[resource].result(30)
    after = describe(admin, "whole")
    assert after["share.isolation.level"] == ("read_committed", ConfigSource.GROUP_CONFIG)
    assert after["share.delivery.count.limit"] == ("5", ConfigSource.DEFAULT_CONFIG)


def test_a_group_config_name_of_a_mebibyte_is_refused_and_nothing_stored(module_cluster) -> None:
    """Every node keeps every configured group's name: one of 1 MiB was accepted and
    replicated. Now a name over 255 bytes is INVALID_REQUEST; the node keeps serving and the
    group describes as never configured, on every node."""
    cluster = module_cluster
    name = "g" * 2**20
    with W.KafkaWire(cluster.node(1).kafka) as conn:
        response = conn.call(
            INCREMENTAL_ALTER_CONFIGS,
            1,
            {
                "resources": [
                    {
                        "resource_type": GROUP_RESOURCE,
                        "resource_name": name,
                        "configs": [
                            {
                                "name": "share.delivery.count.limit",
                                "config_operation": 0,
                                "value": "3",
                            }
                        ],
                    }
                ],
                "validate_only": False,
            },
            timeout=30,
        )
    (result,) = response.responses
    assert (W.code(result.error_code), result.error_message) == (
        W.INVALID_REQUEST,
        "Group name of 1048576 bytes is longer than the maximum of 255 bytes for a group "
        "with configs",
    )
    for node_id in cluster.node_ids:
        assert cluster.is_alive(node_id), cluster.log_tails([node_id])
        seen = described_by(cluster.node(node_id).kafka_addr, name)
        assert {source for _value, source in seen.values()} == {5}  # DEFAULT_CONFIG only
    admin = admin_for(cluster)
    incremental(admin, "g" * 255, ("share.delivery.count.limit", "3", AlterConfigOpType.SET))
    assert describe(admin, "g" * 255)["share.delivery.count.limit"] == (
        "3",
        ConfigSource.GROUP_CONFIG,
    )


def test_every_node_sees_the_configs_and_they_survive_a_full_restart(module_cluster) -> None:
    """Last in this module: it restarts the shared cluster."""
    cluster = module_cluster
    admin = admin_for(cluster)
    incremental(
        admin,
        "kept",
        ("share.auto.offset.reset", "by_duration:PT1H", AlterConfigOpType.SET),
        ("share.delivery.count.limit", "7", AlterConfigOpType.SET),
    )
    wanted = {
        "share.auto.offset.reset": ("by_duration:PT1H", 8),
        "share.delivery.count.limit": ("7", 8),
        "share.record.lock.duration.ms": ("30000", 5),
    }

    def everywhere() -> bool:
        for node_id in cluster.node_ids:
            seen = described_by(cluster.node(node_id).kafka_addr, "kept")
            if any(seen[name] != value for name, value in wanted.items()):
                return False
        return True

    wait_for(everywhere, 30, what="every node to describe group kept's configs")

    cluster.down()
    assert not cluster.live_nodes()
    for node_id in cluster.node_ids:
        cluster.restart(node_id, wait=False)
    cluster.wait_all_ready(timeout=120)
    wait_for(everywhere, 60, what="the configs after the restart, on every node")
    assert describe(admin_for(cluster), "kept")["share.delivery.count.limit"] == (
        "7",
        ConfigSource.GROUP_CONFIG,
    )
