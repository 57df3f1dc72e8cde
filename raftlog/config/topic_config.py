"""Topic configs raftlog understands: names, types, defaults and validation, in one table.

Names and meanings are Kafka's, so `kafka-configs`, AdminClient and kcat users find what they
expect. A topic config falls back to the broker default of the same setting.
"""

from __future__ import annotations

import re

from raftlog.api.values import ConfigEntry
from raftlog.config.config_def import (
    BOOLEAN,
    DOUBLE,
    INT,
    LIST,
    LONG,
    STRING,
    Setting,
    boolean_error,
    choice_error,
    invalid,
    length_error,
    list_error,
    parse_number,
    range_error,
    split_list,
)
from raftlog.storage import codecs

# Kafka's ConfigSource codes (DescribeConfigs).
DYNAMIC_TOPIC, STATIC_BROKER, DEFAULT = 1, 4, 5

COMPACT, DELETE = "compact", "delete"


# Kafka's Long.MAX_VALUE, the default of the bounds that are off.
LONG_MAX = str(2**63 - 1)
PRODUCER = "producer"
CREATE_TIME, LOG_APPEND_TIME = "CreateTime", "LogAppendTime"
# BrokerCompressionType's names: `producer` keeps batches as produced.
COMPRESSION_TYPES = ("uncompressed", "zstd", "lz4", "snappy", "gzip", PRODUCER)
# Accepted and stored, but raftlog's log does not act on them (docs/configs.md says why).
_INERT = "Accepted for compatibility; raftlog does not act on it: "

TIMESTAMP_BEFORE = "message.timestamp.before.max.ms"
TIMESTAMP_AFTER = "message.timestamp.after.max.ms"
TIMESTAMP_DIFFERENCE = "message.timestamp.difference.max.ms"
REMOTE_STORAGE = "remote.storage.enable"
_THROTTLED = ("leader.replication.throttled.replicas", "follower.replication.throttled.replicas")
_GZIP_LEVEL = "compression.gzip.level"
_FORMAT_VERSION = "message.format.version"
# "*" or partition:broker pairs (Kafka's ThrottledReplicaListValidator).
_THROTTLED_ITEM = re.compile(r"[0-9]+:[0-9]+")
# A MetadataVersion string as Kafka 3.9 reads message.format.version: 0.10.2-IV0, 2.8, 3.0-IV1.
_VERSION = re.compile(r"[0-9]+\.[0-9]+(\.[0-9]+)?(-IV[0-9]+)?")


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
            "compression.type",
            STRING,
            PRODUCER,
            "producer: batches are stored as the producer compressed them; a codec (or "
            "uncompressed): the leader rebuilds each batch in another codec in that one, as "
            "Kafka's broker does.",
            COMPRESSION_TYPES,
        ),
        Setting(
            _GZIP_LEVEL, INT, "-1", "The gzip level of compression.type=gzip (-1: zlib's default)."
        ),
        Setting(
            "compression.lz4.level", INT, "9", "The lz4 level of compression.type=lz4.", (), 1, 17
        ),
        Setting(
            "compression.zstd.level",
            INT,
            "3",
            "The zstd level of compression.type=zstd.",
            (),
            -131072,
            22,
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
            "file.delete.delay.ms",
            LONG,
            "60000",
            _INERT + "a segment past retention is deleted at once.",
            (),
            0,
        ),
        Setting(
            "flush.messages",
            LONG,
            LONG_MAX,
            _INERT + "a record is acknowledged once a Raft majority has it on disk.",
            (),
            1,
        ),
        Setting(
            "flush.ms",
            LONG,
            LONG_MAX,
            _INERT + "a record is acknowledged once a Raft majority has it on disk.",
            (),
            0,
        ),
        *(Setting(name, LIST, "", _INERT + "replication is not throttled.") for name in _THROTTLED),
        Setting("index.interval.bytes", INT, "4096", _INERT + "raftlog's own index.", (), 0),
        Setting(
            "local.retention.bytes",
            LONG,
            "-2",
            _INERT + "there is no tiered storage.",
            (),
            -2,
        ),
        Setting("local.retention.ms", LONG, "-2", _INERT + "there is no tiered storage.", (), -2),
        Setting(
            "max.compaction.lag.ms",
            LONG,
            LONG_MAX,
            _INERT + "compaction runs by min.cleanable.dirty.ratio.",
            (),
            1,
        ),
        Setting("max.message.bytes", INT, "1048588", "Largest record batch accepted.", (), 0),
        Setting(
            "message.downconversion.enable",
            BOOLEAN,
            "true",
            _INERT + "raftlog serves record batch v2 only (Kafka 3.9; removed in 4.0).",
        ),
        Setting(
            _FORMAT_VERSION,
            STRING,
            "3.0-IV1",
            _INERT + "batches are stored as record batch v2 (Kafka 3.9 ignores it too).",
        ),
        Setting(
            TIMESTAMP_AFTER,
            LONG,
            "3600000",
            "A produced CreateTime timestamp may be at most this far ahead of the leader's "
            "clock (INVALID_TIMESTAMP otherwise). Kafka 4's default.",
            (),
            0,
        ),
        Setting(
            TIMESTAMP_BEFORE,
            LONG,
            LONG_MAX,
            "A produced CreateTime timestamp may be at most this far behind the leader's "
            "clock (INVALID_TIMESTAMP otherwise).",
            (),
            0,
        ),
        Setting(
            TIMESTAMP_DIFFERENCE,
            LONG,
            LONG_MAX,
            "Deprecated (Kafka 3.9, removed in 4.0): the bound in both directions where "
            f"{TIMESTAMP_BEFORE} or {TIMESTAMP_AFTER} is not set.",
            (),
            0,
        ),
        Setting(
            "message.timestamp.type",
            STRING,
            CREATE_TIME,
            "CreateTime: a record's timestamp is the producer's, held to "
            f"{TIMESTAMP_BEFORE}/{TIMESTAMP_AFTER}; LogAppendTime: the leader stamps each "
            "batch with its clock as it takes it.",
            (CREATE_TIME, LOG_APPEND_TIME),
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
            "min.compaction.lag.ms",
            LONG,
            "0",
            _INERT + "compaction runs by min.cleanable.dirty.ratio.",
            (),
            0,
        ),
        Setting(
            "min.insync.replicas",
            INT,
            "1",
            "Accepted for compatibility; acks=all always waits for a Raft majority.",
            (),
            1,
        ),
        Setting("preallocate", BOOLEAN, "false", _INERT + "segments grow as written."),
        Setting(
            REMOTE_STORAGE,
            BOOLEAN,
            "false",
            "Tiered storage: raftlog has none, so only false is accepted.",
        ),
        *(
            Setting(name, BOOLEAN, "false", _INERT + "there is no tiered storage.")
            for name in ("remote.log.copy.disable", "remote.log.delete.on.disable")
        ),
        Setting(
            "retention.bytes", LONG, "-1", "Delete old segments past this size; -1: never.", (), -1
        ),
        Setting(
            "retention.ms", LONG, "604800000", "Delete segments older than this; -1: never.", (), -1
        ),
        Setting("segment.bytes", INT, "134217728", "Roll a segment at this size.", (), 1024 * 1024),
        Setting(
            "segment.index.bytes",
            INT,
            "10485760",
            _INERT + "raftlog's own index.",
            (),
            4,
        ),
        Setting("segment.jitter.ms", LONG, "0", _INERT + "segments roll by size only.", (), 0),
        Setting("segment.ms", LONG, "604800000", _INERT + "segments roll by size only.", (), 1),
        Setting(
            "unclean.leader.election.enable",
            BOOLEAN,
            "false",
            _INERT + "a leader is always elected by a Raft majority, never uncleanly.",
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
    return _conflict(configs)


def _check(setting: Setting, value: str) -> str | None:
    name = setting.name
    if setting.type == LIST:
        if name in _THROTTLED:
            return _throttled_error(setting, value)
        return list_error(setting, value)
    if setting.type == BOOLEAN:
        problem = boolean_error(setting, value)
        if problem is None and name == REMOTE_STORAGE and value.strip().lower() == "true":
            # Kafka's words when the broker has no remote log storage system.
            return (
                "Tiered Storage functionality is disabled in the broker. Topic cannot be "
                "configured with remote log storage."
            )
        return problem
    if setting.type == STRING:
        if name == _FORMAT_VERSION:
            if _VERSION.fullmatch(value.strip()):
                return None
            return invalid(name, value, f"Version `{value}` is not a valid version")
        return choice_error(setting, value) if setting.choices else None
    number = parse_number(setting, value)
    if isinstance(number, str):
        return number
    if name == _GZIP_LEVEL and not (1 <= number <= 9 or number == -1):
        return invalid(name, number, "Value must be between 1 and 9 or equal to -1")
    return range_error(setting, number)


def _throttled_error(setting: Setting, value: str) -> str | None:
    """Kafka's ThrottledReplicaListValidator: "*", or partition:broker pairs."""
    items = split_list(value)
    if items == ["*"] or all(_THROTTLED_ITEM.fullmatch(item) for item in items):
        return None
    return invalid(
        setting.name,
        value,
        f"{setting.name} must be the literal '*' or a list of replicas in the following "
        "format: [partitionId]:[brokerId],[partitionId]:[brokerId],...",
    )


def _conflict(configs: dict[str, str | None]) -> str | None:
    """Kafka's LogConfig.validateValues, on valid values: the compaction lags in order."""
    low, high = configs.get("min.compaction.lag.ms"), configs.get("max.compaction.lag.ms")
    low_ms = int(low) if low is not None else 0
    high_ms = int(high) if high is not None else 2**63 - 1
    if low_ms > high_ms:
        return (
            f"conflict topic config setting min.compaction.lag.ms ({low_ms}) > "
            f"max.compaction.lag.ms ({high_ms})"
        )
    return None


# compression.type's codecs by their id in a batch's attributes, and their level settings.
_CODECS = {
    "uncompressed": 0,
    "gzip": codecs.GZIP,
    "snappy": codecs.SNAPPY,
    "lz4": codecs.LZ4,
    "zstd": codecs.ZSTD,
}
_LEVELS = {
    codecs.GZIP: _GZIP_LEVEL,
    codecs.LZ4: "compression.lz4.level",
    codecs.ZSTD: "compression.zstd.level",
}


def compression(settings: dict[str, str]) -> tuple[int, int | None] | None:
    """The codec id and level batches are stored in, from a topic's effective settings;
    None for `producer` (as produced)."""
    codec = _CODECS.get(settings["compression.type"].strip())
    if codec is None:
        return None
    level = _LEVELS.get(codec)
    return codec, int(settings[level]) if level is not None else None


def timestamp_bounds(settings: dict[str, str]) -> tuple[int, int]:
    """How far (ms) a produced CreateTime timestamp may be behind and ahead of the leader's
    clock, from a topic's effective settings: the before/after pair where set, else the
    deprecated message.timestamp.difference.max.ms (Kafka 3.6-3.9's reading), else the
    pair's defaults."""
    difference = settings.get(TIMESTAMP_DIFFERENCE, LONG_MAX)

    def bound(name: str) -> int:
        text = settings.get(name, TOPIC_SETTINGS[name].default)
        if text == TOPIC_SETTINGS[name].default and difference != LONG_MAX:
            text = difference
        return int(text)

    return bound(TIMESTAMP_BEFORE), bound(TIMESTAMP_AFTER)


def cleanup_policies(value: str) -> frozenset[str]:
    """The policies of a valid cleanup.policy value ("compact", "delete" or both, in any order
    and spacing), for the code that runs retention and compaction."""
    return frozenset(split_list(value))


def effective(
    topic_configs: dict[str, str],
    broker_defaults: dict[str, str],
    broker_names: dict[str, str] | None = None,
) -> list[ConfigEntry]:
    """Every topic setting with its value and where the value comes from. `broker_defaults`:
    the node's [broker] values that stand in for unset topic settings; `broker_names`: topic
    setting -> its [broker] synonym's name, for the synonyms (as Kafka lists them: the
    topic's own value, the broker's, the default under the broker's name)."""
    entries = []
    for name, setting in TOPIC_SETTINGS.items():
        synonym = (broker_names or {}).get(name, name)
        synonyms: list[tuple[str, str | None, int]] = []
        if name in topic_configs:
            synonyms.append((name, topic_configs[name], DYNAMIC_TOPIC))
        if name in broker_defaults:
            synonyms.append((synonym, broker_defaults[name], STATIC_BROKER))
        synonyms.append((synonym, setting.default, DEFAULT))
        _, value, source = synonyms[0]  # the first synonym is the effective value
        entries.append(
            ConfigEntry(
                name,
                value,
                source,
                config_type=setting.type,
                documentation=setting.doc,
                synonyms=tuple(synonyms),
            )
        )
    return entries


def value(name: str, topic_configs: dict[str, str], broker_defaults: dict[str, str]) -> str:
    if name in topic_configs:
        return topic_configs[name]
    return broker_defaults.get(name, TOPIC_SETTINGS[name].default)
