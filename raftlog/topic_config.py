"""Topic configs raftlog understands: names, types, defaults and validation, in one table.

Names and meanings are Kafka's, so `kafka-configs`, AdminClient and kcat users find what they
expect. A topic config falls back to the broker default of the same setting.
"""

from __future__ import annotations

from dataclasses import dataclass

from raftlog.broker import ConfigEntry

# Kafka's ConfigType (DescribeConfigs v3+) and ConfigSource codes.
BOOLEAN, STRING, INT, LONG = 1, 2, 3, 5
DYNAMIC_TOPIC, STATIC_BROKER, DEFAULT = 1, 4, 5


@dataclass(frozen=True)
class Setting:
    name: str
    type: int
    default: str
    doc: str
    choices: tuple[str, ...] = ()
    minimum: int | None = None


TOPIC_SETTINGS: dict[str, Setting] = {
    s.name: s
    for s in (
        Setting("cleanup.policy", STRING, "delete", "Old segments are deleted.", ("delete",)),
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


def validate(configs: dict[str, str | None]) -> str | None:
    """The first problem with a set of topic configs, as a message for INVALID_CONFIG."""
    for name, value in configs.items():
        setting = TOPIC_SETTINGS.get(name)
        if setting is None:
            return f"Unknown topic config name: {name}"
        if value is None:
            return f"Null value not supported for topic config {name}"
        if setting.choices and value not in setting.choices:
            return f"Invalid value {value} for {name}; supported: {', '.join(setting.choices)}"
        if setting.type in (INT, LONG):
            try:
                number = int(value)
            except ValueError:
                return f"Invalid value {value} for {name}: not a number"
            if setting.minimum is not None and number < setting.minimum:
                return f"Invalid value {value} for {name}: must be at least {setting.minimum}"
    return None


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
