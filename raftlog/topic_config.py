"""Topic configs raftlog understands: names, types, defaults and validation, in one table.

Names and meanings are Kafka's, so `kafka-configs`, AdminClient and kcat users find what they
expect. A topic config falls back to the broker default of the same setting.
"""

from __future__ import annotations

from raftlog.broker import ConfigEntry
from raftlog.config_def import (
    DOUBLE,
    INT,
    LIST,
    LONG,
    STRING,
    Setting,
    choice_error,
    length_error,
    list_error,
    parse_number,
    range_error,
    split_list,
)

# Kafka's ConfigSource codes (DescribeConfigs).
DYNAMIC_TOPIC, STATIC_BROKER, DEFAULT = 1, 4, 5

COMPACT, DELETE = "compact", "delete"


TOPIC_SETTINGS: dict[str, Setting] = {
    s.name: s
    for s in (
        Setting(
            "cleanup.policy",
            LIST,
            DELETE,
            "delete: old segments are deleted by retention.ms/retention.bytes; compact: only "
            "the latest record per key is kept; both: compaction plus retention.",
            (COMPACT, DELETE),
        ),
        Setting(
            "delete.retention.ms",
            LONG,
            "86400000",
            "How long a compacted topic keeps a tombstone (a null value) after its batch's "
            "timestamp, so that consumers can see the deletion.",
            (),
            0,
        ),
        Setting(
            "min.cleanable.dirty.ratio",
            DOUBLE,
            "0.5",
            "Compaction runs once the bytes not yet compacted reach this share of the "
            "compactable log.",
            (),
            0,
            1,
        ),
        Setting(
            "retention.ms", LONG, "604800000", "Delete segments older than this; -1: never.", (), -1
        ),
        Setting(
            "retention.bytes", LONG, "-1", "Delete old segments past this size; -1: never.", (), -1
        ),
        Setting("segment.bytes", INT, "134217728", "Roll a segment at this size.", (), 1024 * 1024),
        Setting("max.message.bytes", INT, "1048588", "Largest record batch accepted.", (), 0),
        Setting(
            "message.timestamp.type",
            STRING,
            "CreateTime",
            "Record timestamps are the producer's.",
            ("CreateTime",),
        ),
        Setting(
            "min.insync.replicas",
            INT,
            "1",
            "Accepted for compatibility; acks=all always waits for a Raft majority.",
            (),
            1,
        ),
    )
}


def altered(
    current: dict[str, str], changes: dict[str, str | None], incremental: bool
) -> dict[str, str | None]:
    """Configs after an alter, as Kafka applies one to topics and groups alike:
    IncrementalAlterConfigs changes `current` (a None value deletes the key), AlterConfigs
    replaces every explicit config with `changes`. To be validated before it is stored."""
    configs: dict[str, str | None] = dict(current) if incremental else {}
    for key, value in changes.items():
        if value is None and incremental:
            configs.pop(key, None)
        else:
            configs[key] = value
    return configs


def validate(configs: dict[str, str | None]) -> str | None:
    """The first problem with a set of topic configs, as Kafka words it for INVALID_CONFIG:
    CreateTopics, AlterConfigs and IncrementalAlterConfigs all check here."""
    for name, value in configs.items():
        setting = TOPIC_SETTINGS.get(name)
        if setting is None:
            return f"Unknown topic config name: {name}"
        if value is None:
            return f"Null value not supported for topic config {name}"
        problem = length_error(setting, value) or _check(setting, value)
        if problem is not None:
            return problem
    return None


def _check(setting: Setting, value: str) -> str | None:
    if setting.type == LIST:
        return list_error(setting, value)
    if setting.type == STRING:
        return choice_error(setting, value) if setting.choices else None
    number = parse_number(setting, value)
    if isinstance(number, str):
        return number
    return range_error(setting, number)


def cleanup_policies(value: str) -> frozenset[str]:
    """The policies of a valid cleanup.policy value ("compact", "delete" or both, in any order
    and spacing), for the code that runs retention and compaction."""
    return frozenset(split_list(value))


def effective(topic_configs: dict[str, str], broker_defaults: dict[str, str]) -> list[ConfigEntry]:
    """Every topic setting with its value and where the value comes from."""
    entries = []
    for name, setting in TOPIC_SETTINGS.items():
        if name in topic_configs:
            value, source = topic_configs[name], DYNAMIC_TOPIC
        elif name in broker_defaults:
            value, source = broker_defaults[name], STATIC_BROKER
        else:
            value, source = setting.default, DEFAULT
        entries.append(
            ConfigEntry(name, value, source, config_type=setting.type, documentation=setting.doc)
        )
    return entries


def value(name: str, topic_configs: dict[str, str], broker_defaults: dict[str, str]) -> str:
    if name in topic_configs:
        return topic_configs[name]
    return broker_defaults.get(name, TOPIC_SETTINGS[name].default)
