"""The topic config table: validation, effective values and their sources."""

import pytest

from raftlog.config import topic_config
from raftlog.config.config_def import DOUBLE, LIST, LONG, MAX_VALUE_LENGTH, split_list
from raftlog.config.topic_config import (
    DEFAULT,
    DYNAMIC_TOPIC,
    STATIC_BROKER,
    cleanup_policies,
    effective,
    validate,
    value,
)


@pytest.mark.parametrize(
    "policy",
    ["delete", "compact", "compact,delete", "delete,compact", " compact , delete ", "", " "],
)
def test_cleanup_policy_is_a_list_of_compact_and_delete(policy: str) -> None:
    """Empty too: Kafka 4.1+ (KIP-1161) keeps such a topic's records, neither deleting nor
    compacting them (confluent-kafka's suite SUBTRACTs both)."""
    assert validate({"cleanup.policy": policy}) is None
    assert cleanup_policies(policy) <= {"compact", "delete"}


@pytest.mark.parametrize(
    ("policy", "problem"),
    [
        ("compact,,delete", "Configuration 'cleanup.policy' values must not be empty."),
        (
            "compact,archive",
            "Invalid value archive for configuration cleanup.policy: String must be one of: "
            "compact, delete",
        ),
        (
            "Compact",
            "Invalid value Compact for configuration cleanup.policy: String must be one of: "
            "compact, delete",
        ),
    ],
)
def test_cleanup_policy_rejects_other_values_in_kafkas_words(policy: str, problem: str) -> None:
    assert validate({"cleanup.policy": policy}) == problem


def test_cleanup_policies_parse_like_kafka() -> None:
    assert split_list(" compact ,delete") == ["compact", "delete"]
    assert split_list("") == []
    assert cleanup_policies("delete, compact") == {"compact", "delete"}
    assert cleanup_policies("compact") == {"compact"}


@pytest.mark.parametrize("ratio", ["0", "0.5", "1", "1.0", "0.01", "5e-1"])
def test_min_cleanable_dirty_ratio_is_a_double_from_0_to_1(ratio: str) -> None:
    assert validate({"min.cleanable.dirty.ratio": ratio}) is None


@pytest.mark.parametrize(
    ("ratio", "problem"),
    [
        ("1.01", "1.01 for configuration min.cleanable.dirty.ratio: Value must be no more than 1"),
        ("-0.1", "-0.1 for configuration min.cleanable.dirty.ratio: Value must be at least 0"),
        ("Infinity", "Infinity for configuration min.cleanable.dirty.ratio: Value must be no more"),
        ("half", "half for configuration min.cleanable.dirty.ratio: Not a number of type DOUBLE"),
        ("NaN", "NaN for configuration min.cleanable.dirty.ratio: Not a number of type DOUBLE"),
        ("inf", "inf for configuration min.cleanable.dirty.ratio: Not a number of type DOUBLE"),
        ("1_0", "1_0 for configuration min.cleanable.dirty.ratio: Not a number of type DOUBLE"),
    ],
)
def test_min_cleanable_dirty_ratio_rejects_the_rest(ratio: str, problem: str) -> None:
    assert (validate({"min.cleanable.dirty.ratio": ratio}) or "").startswith(
        f"Invalid value {problem}"
    )


def test_delete_retention_ms_is_a_non_negative_long() -> None:
    assert validate({"delete.retention.ms": "0"}) is None
    assert validate({"delete.retention.ms": str(2**40)}) is None
    assert validate({"delete.retention.ms": "-1"}) == (
        "Invalid value -1 for configuration delete.retention.ms: Value must be at least 0"
    )
    assert validate({"delete.retention.ms": "1.5"}) == (
        "Invalid value 1.5 for configuration delete.retention.ms: Not a number of type LONG"
    )


def test_existing_settings_keep_their_rules() -> None:
    assert validate({"retention.ms": "-1", "segment.bytes": str(1 << 20)}) is None
    assert validate({"segment.bytes": "1000"}) == (
        "Invalid value 1000 for configuration segment.bytes: Value must be at least 1048576"
    )
    assert validate({"message.timestamp.type": "LogAppendTime"}) is None
    assert validate({"message.timestamp.type": "logappendtime"}) == (
        "Invalid value logappendtime for configuration message.timestamp.type: "
        "String must be one of: CreateTime, LogAppendTime"
    )
    assert validate({"message.timestamp.type": " CreateTime "}) is None  # Kafka trims
    assert validate({"no.such.config": "1"}) == "Unknown topic config name: no.such.config"
    assert validate({"retention.ms": None}) == (
        "Null value not supported for topic config retention.ms"
    )


@pytest.mark.parametrize(
    ("name", "value", "kind"),
    [
        ("max.message.bytes", "2147483648", "INT"),  # 2^31: past Java's Integer
        ("segment.bytes", "-2147483649", "INT"),
        ("min.insync.replicas", "1e3", "INT"),
        ("retention.ms", "99999999999999999999", "LONG"),  # past Java's Long
        ("retention.bytes", "9223372036854775808", "LONG"),
        ("delete.retention.ms", "", "LONG"),
        ("retention.ms", "1_000", "LONG"),
    ],
)
def test_numbers_outside_their_java_type_are_refused_as_kafka_words_it(
    name: str, value: str, kind: str
) -> None:
    assert validate({name: value}) == (
        f"Invalid value {value} for configuration {name}: Not a number of type {kind}"
    )


def test_numbers_at_their_java_types_edges_pass() -> None:
    assert validate({"max.message.bytes": str(2**31 - 1), "min.insync.replicas": " +3 "}) is None
    assert validate({"retention.ms": str(2**63 - 1), "retention.bytes": "-1"}) is None
    assert validate({"retention.ms": "-2"}) == (
        "Invalid value -2 for configuration retention.ms: Value must be at least -1"
    )


def test_a_value_is_bounded_in_length_before_it_is_read() -> None:
    longest = "0" * (MAX_VALUE_LENGTH - 1) + "1"  # Java reads leading zeros
    assert validate({"retention.ms": longest}) is None
    message = validate({"retention.ms": longest + "0", "cleanup.policy": "compact"})
    assert message == (
        f"Invalid value of {MAX_VALUE_LENGTH + 1} characters for configuration retention.ms: "
        f"longer than the maximum of {MAX_VALUE_LENGTH}"
    )
    assert "x" * 100 not in (validate({"cleanup.policy": "x" * 2**20}) or "")


def test_effective_reports_types_defaults_and_sources() -> None:
    entries = {
        e.name: e for e in effective({"cleanup.policy": "compact"}, {"delete.retention.ms": "1000"})
    }
    assert set(entries) == set(topic_config.TOPIC_SETTINGS)
    policy = entries["cleanup.policy"]
    assert (policy.value, policy.source, policy.config_type) == ("compact", DYNAMIC_TOPIC, LIST)
    retention = entries["delete.retention.ms"]
    assert (retention.value, retention.source, retention.config_type) == (
        "1000",
        STATIC_BROKER,
        LONG,
    )
    ratio = entries["min.cleanable.dirty.ratio"]
    assert (ratio.value, ratio.source, ratio.config_type) == ("0.5", DEFAULT, DOUBLE)
    assert all(e.documentation for e in entries.values())


def test_value_prefers_topic_then_broker_then_default() -> None:
    assert value("delete.retention.ms", {}, {}) == "86400000"
    assert value("delete.retention.ms", {}, {"delete.retention.ms": "5"}) == "5"
    assert value("delete.retention.ms", {"delete.retention.ms": "7"}, {}) == "7"
    assert value("cleanup.policy", {}, {}) == "delete"
    assert value("min.cleanable.dirty.ratio", {}, {}) == "0.5"


KAFKA_39_TOPIC_CONFIGS = {
    "cleanup.policy": "LIST",
    "compression.type": "STRING",
    "compression.gzip.level": "INT",
    "compression.lz4.level": "INT",
    "compression.zstd.level": "INT",
    "delete.retention.ms": "LONG",
    "file.delete.delay.ms": "LONG",
    "flush.messages": "LONG",
    "flush.ms": "LONG",
    "follower.replication.throttled.replicas": "LIST",
    "index.interval.bytes": "INT",
    "leader.replication.throttled.replicas": "LIST",
    "local.retention.bytes": "LONG",
    "local.retention.ms": "LONG",
    "max.compaction.lag.ms": "LONG",
    "max.message.bytes": "INT",
    "message.downconversion.enable": "BOOLEAN",
    "message.format.version": "STRING",
    "message.timestamp.after.max.ms": "LONG",
    "message.timestamp.before.max.ms": "LONG",
    "message.timestamp.difference.max.ms": "LONG",
    "message.timestamp.type": "STRING",
    "min.cleanable.dirty.ratio": "DOUBLE",
    "min.compaction.lag.ms": "LONG",
    "min.insync.replicas": "INT",
    "preallocate": "BOOLEAN",
    "remote.storage.enable": "BOOLEAN",
    "remote.log.copy.disable": "BOOLEAN",  # Kafka 3.9 (KIP-950)
    "remote.log.delete.on.disable": "BOOLEAN",
    "retention.bytes": "LONG",
    "retention.ms": "LONG",
    "segment.bytes": "INT",
    "segment.index.bytes": "INT",
    "segment.jitter.ms": "LONG",
    "segment.ms": "LONG",
    "unclean.leader.election.enable": "BOOLEAN",
}
_TYPES = {"BOOLEAN": 1, "STRING": 2, "INT": 3, "LONG": 5, "DOUBLE": 6, "LIST": 7}


def test_every_kafka_topic_config_is_known_with_kafkas_type_and_its_default_valid() -> None:
    assert set(KAFKA_39_TOPIC_CONFIGS) <= set(topic_config.TOPIC_SETTINGS)
    for name, kind in KAFKA_39_TOPIC_CONFIGS.items():
        setting = topic_config.TOPIC_SETTINGS[name]
        assert setting.type == _TYPES[kind], name
        assert validate({name: setting.default}) is None, name


@pytest.mark.parametrize("codec", ["producer", "uncompressed", "gzip", "snappy", "lz4", "zstd"])
def test_compression_type_takes_kafkas_codec_names(codec: str) -> None:
    assert validate({"compression.type": codec}) is None


@pytest.mark.parametrize(
    ("name", "value", "problem"),
    [
        ("compression.type", "brotli", "String must be one of: uncompressed, zstd, lz4, snappy"),
        ("compression.gzip.level", "0", "Value must be between 1 and 9 or equal to -1"),
        ("compression.gzip.level", "10", "Value must be between 1 and 9 or equal to -1"),
        ("compression.lz4.level", "18", "Value must be no more than 17"),
        ("compression.zstd.level", "-131073", "Value must be at least -131072"),
        ("message.timestamp.after.max.ms", "-1", "Value must be at least 0"),
        ("message.timestamp.before.max.ms", "x", "Not a number of type LONG"),
        ("message.timestamp.difference.max.ms", "-5", "Value must be at least 0"),
        ("message.downconversion.enable", "yes", "Expected value to be either true or false"),
        ("message.format.version", "latest", "is not a valid version"),
        ("leader.replication.throttled.replicas", "0:1,x", "must be the literal '*' or a list"),
        ("local.retention.ms", "-3", "Value must be at least -2"),
        ("segment.ms", "0", "Value must be at least 1"),
        ("remote.storage.enable", "true", "Tiered Storage functionality is disabled"),
    ],
)
def test_new_settings_are_validated_in_kafkas_words(name: str, value: str, problem: str) -> None:
    assert problem in (validate({name: value}) or "")


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("compression.gzip.level", "-1"),
        ("compression.gzip.level", "9"),
        ("compression.zstd.level", "-5"),
        ("message.format.version", "3.0-IV1"),
        ("message.format.version", "0.10.2"),
        ("follower.replication.throttled.replicas", "*"),
        ("leader.replication.throttled.replicas", "0:1, 1:2"),
        ("preallocate", "TRUE"),
        ("remote.storage.enable", "false"),
        ("unclean.leader.election.enable", "true"),
    ],
)
def test_new_settings_take_what_kafka_takes(name: str, value: str) -> None:
    assert validate({name: value}) is None


def test_compaction_lags_must_be_in_order() -> None:
    assert validate({"min.compaction.lag.ms": "10", "max.compaction.lag.ms": "10"}) is None
    assert validate({"min.compaction.lag.ms": "11", "max.compaction.lag.ms": "10"}) == (
        "conflict topic config setting min.compaction.lag.ms (11) > max.compaction.lag.ms (10)"
    )


def test_timestamp_bounds_fall_back_to_the_deprecated_difference_as_kafka_3_9_does() -> None:
    def bounds(configs: dict[str, str]) -> tuple[int, int]:
        return topic_config.timestamp_bounds(
            {name: value(name, configs, {}) for name in topic_config.TOPIC_SETTINGS}
        )

    assert bounds({}) == (2**63 - 1, 3_600_000)  # Kafka 4's defaults
    assert bounds({"message.timestamp.difference.max.ms": "500"}) == (500, 500)
    assert bounds(
        {
            "message.timestamp.difference.max.ms": "500",
            "message.timestamp.before.max.ms": "7",
            "message.timestamp.after.max.ms": "9",
        }
    ) == (7, 9)


def test_a_broker_default_is_static_and_a_built_in_one_is_default() -> None:
    entries = {e.name: e for e in effective({}, {"retention.ms": "1000"})}
    assert (entries["retention.ms"].value, entries["retention.ms"].source) == (
        "1000",
        STATIC_BROKER,
    )
    compression = entries["compression.type"]
    assert (compression.value, compression.source, compression.config_type) == (
        "producer",
        DEFAULT,
        2,
    )


def test_synonyms_list_the_topics_value_the_brokers_and_the_default_as_kafka_does() -> None:
    names = {"retention.ms": "log.retention.ms"}
    entries = {e.name: e for e in effective({"retention.ms": "5"}, {"retention.ms": "9"}, names)}
    assert entries["retention.ms"].synonyms == (
        ("retention.ms", "5", DYNAMIC_TOPIC),
        ("log.retention.ms", "9", STATIC_BROKER),
        ("log.retention.ms", "604800000", DEFAULT),
    )
    unset = {e.name: e for e in effective({}, {}, names)}
    assert unset["retention.ms"].synonyms == (("log.retention.ms", "604800000", DEFAULT),)
    assert unset["preallocate"].synonyms == (("preallocate", "false", DEFAULT),)
