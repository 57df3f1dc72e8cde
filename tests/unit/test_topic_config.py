"""The topic config table: validation, effective values and their sources."""

import pytest

from raftlog import topic_config
from raftlog.config_def import DOUBLE, LIST, LONG, MAX_VALUE_LENGTH, split_list
from raftlog.topic_config import (
    DEFAULT,
    DYNAMIC_TOPIC,
    STATIC_BROKER,
    cleanup_policies,
    effective,
    validate,
    value,
)


@pytest.mark.parametrize(
    "policy", ["delete", "compact", "compact,delete", "delete,compact", " compact , delete "]
)
def test_cleanup_policy_is_a_list_of_compact_and_delete(policy: str) -> None:
    assert validate({"cleanup.policy": policy}) is None


@pytest.mark.parametrize(
    ("policy", "problem"),
    [
        (
            "",
            "Configuration 'cleanup.policy' must not be empty. Valid values include: "
            "[compact, delete]",
        ),
        (
            " ",
            "Configuration 'cleanup.policy' must not be empty. Valid values include: "
            "[compact, delete]",
        ),
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
    assert validate({"message.timestamp.type": "LogAppendTime"}) == (
        "Invalid value LogAppendTime for configuration message.timestamp.type: "
        "String must be one of: CreateTime"
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
