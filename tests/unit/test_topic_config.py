"""The topic config table: validation, effective values and their sources."""

import pytest

from raftlog import topic_config
from raftlog.topic_config import (
    DEFAULT,
    DOUBLE,
    DYNAMIC_TOPIC,
    LIST,
    LONG,
    STATIC_BROKER,
    cleanup_policies,
    effective,
    split_list,
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
        ("", "must not be empty"),
        (" ", "must not be empty"),
        ("compact,,delete", "'' not supported"),
        ("compact,archive", "'archive' not supported; supported: compact, delete"),
        ("Compact", "'Compact' not supported"),
    ],
)
def test_cleanup_policy_rejects_other_values(policy: str, problem: str) -> None:
    message = validate({"cleanup.policy": policy})
    assert message is not None and problem in message and "cleanup.policy" in message


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
        ("1.01", "must be at most 1"),
        ("-0.1", "must be at least 0"),
        ("half", "not a number"),
        ("nan", "not a finite number"),
        ("inf", "not a finite number"),
    ],
)
def test_min_cleanable_dirty_ratio_rejects_the_rest(ratio: str, problem: str) -> None:
    message = validate({"min.cleanable.dirty.ratio": ratio})
    assert message is not None and problem in message


def test_delete_retention_ms_is_a_non_negative_long() -> None:
    assert validate({"delete.retention.ms": "0"}) is None
    assert validate({"delete.retention.ms": str(2**40)}) is None
    assert "must be at least 0" in (validate({"delete.retention.ms": "-1"}) or "")
    assert "not a number" in (validate({"delete.retention.ms": "1.5"}) or "")


def test_existing_settings_keep_their_rules() -> None:
    assert validate({"retention.ms": "-1", "segment.bytes": str(1 << 20)}) is None
    assert "at least 1048576" in (validate({"segment.bytes": "1000"}) or "")
    assert "supported: CreateTime" in (validate({"message.timestamp.type": "LogAppendTime"}) or "")
    assert validate({"no.such.config": "1"}) == "Unknown topic config name: no.such.config"
    assert validate({"retention.ms": None}) == (
        "Null value not supported for topic config retention.ms"
    )


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
