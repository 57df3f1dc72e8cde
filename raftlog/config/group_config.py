"""Group configs raftlog understands (Kafka's GroupConfig, config resource type GROUP = 32):
names, types, defaults and bounds in one table, validation, and each group's effective values.

As in Kafka, group configs live apart from the groups: a group need not exist to be configured
or described, and its settings outlive it. A share setting's default and bounds are the
node's [broker] settings of the same name (group.share.record.lock.duration.ms and its
group.share.min/max siblings, ...), as Kafka's GroupConfig reads them; the table holds
Kafka 4.3's defaults of those.
"""

from __future__ import annotations

import re

from raftlog.api.values import ConfigEntry
from raftlog.config.config_def import (
    BOOLEAN,
    INT,
    STRING,
    Setting,
    boolean_error,
    invalid,
    length_error,
    parse_number,
)
from raftlog.config.topic_config import DEFAULT

# Kafka's ConfigSource GROUP_CONFIG (DescribeConfigsResponse.ConfigSource): a group's own value.
DYNAMIC_GROUP = 8

AUTO_OFFSET_RESET = "share.auto.offset.reset"
ISOLATION_LEVEL = "share.isolation.level"
RECORD_LOCK_DURATION_MS = "share.record.lock.duration.ms"
DELIVERY_COUNT_LIMIT = "share.delivery.count.limit"
PARTITION_MAX_RECORD_LOCKS = "share.partition.max.record.locks"
SHARE_SESSION_TIMEOUT_MS = "share.session.timeout.ms"
SHARE_HEARTBEAT_INTERVAL_MS = "share.heartbeat.interval.ms"
RENEW_ACKNOWLEDGE_ENABLE = "share.renew.acknowledge.enable"
CONSUMER_SESSION_TIMEOUT_MS = "consumer.session.timeout.ms"
CONSUMER_HEARTBEAT_INTERVAL_MS = "consumer.heartbeat.interval.ms"

LATEST, EARLIEST, BY_DURATION = "latest", "earliest", "by_duration"
READ_UNCOMMITTED, READ_COMMITTED = "read_uncommitted", "read_committed"

# Group config resource names are stored by every node (as topic names are; Kafka bounds
# those at 249 characters). Group ids themselves may be longer (up to 32,767 bytes, the
# coordinator's bound): such a group can be described but not configured.
MAX_NAME_BYTES = 255

GROUP_SETTINGS: dict[str, Setting] = {
    s.name: s
    for s in (
        Setting(
            CONSUMER_HEARTBEAT_INTERVAL_MS,
            INT,
            "5000",
            "The heartbeat interval given to the members of a consumer group. Accepted for "
            "compatibility: raftlog serves classic groups only, not the consumer protocol.",
            (),
            5000,
            15000,
        ),
        Setting(
            CONSUMER_SESSION_TIMEOUT_MS,
            INT,
            "45000",
            "The timeout to detect client failures when using the consumer group protocol. "
            "Accepted for compatibility: raftlog serves classic groups only.",
            (),
            45000,
            60000,
        ),
        Setting(
            AUTO_OFFSET_RESET,
            STRING,
            LATEST,
            "The strategy to initialize the share-partition start offset: earliest, latest, "
            "or by_duration:<ISO-8601 duration> (the offset of that long before now).",
        ),
        Setting(
            DELIVERY_COUNT_LIMIT,
            INT,
            "5",
            "The maximum number of delivery attempts for a record delivered to a share group.",
            (),
            2,
            10,
        ),
        Setting(
            SHARE_HEARTBEAT_INTERVAL_MS,
            INT,
            "5000",
            "The heartbeat interval given to the members of a share group.",
            (),
            5000,
            15000,
        ),
        Setting(
            ISOLATION_LEVEL,
            STRING,
            READ_UNCOMMITTED,
            "Controls how to read records written transactionally: read_committed delivers "
            "only committed transactional records, read_uncommitted all of them.",
            (READ_COMMITTED, READ_UNCOMMITTED),
        ),
        Setting(
            PARTITION_MAX_RECORD_LOCKS,
            INT,
            "2000",
            "Share-group record lock limit per share-partition.",
            (),
            100,
            4000,
        ),
        Setting(
            RECORD_LOCK_DURATION_MS,
            INT,
            "30000",
            "The record acquisition lock duration in milliseconds for share groups.",
            (),
            15000,
            60000,
        ),
        Setting(
            RENEW_ACKNOWLEDGE_ENABLE,
            BOOLEAN,
            "true",
            "Whether the renew acknowledge type is enabled for the share group.",
        ),
        Setting(
            SHARE_SESSION_TIMEOUT_MS,
            INT,
            "45000",
            "The timeout to detect client failures when using the share group protocol.",
            (),
            45000,
            60000,
        ),
    )
}

# Group setting -> (default, minimum, maximum) of an INT setting; a node's (NodeConfig.
# group_bounds, from its [broker] group.share.* settings) stand in for the table's.
Bounds = dict[str, tuple[int, int, int]]


def bounds(node: Bounds | None = None) -> Bounds:
    """Every INT group setting's default and bounds: the table's, and the node's where given."""
    out: Bounds = {
        name: (int(s.default), int(s.minimum or 0), int(s.maximum or 0))
        for name, s in GROUP_SETTINGS.items()
        if s.type == INT
    }
    out.update(node or {})
    return out


# java.time.Duration.parse's grammar (PnDTnHnMn.nS, any letter case, signed parts).
_DURATION = re.compile(
    r"([-+]?)P(?:([-+]?[0-9]+)D)?"
    r"(T(?:([-+]?[0-9]+)H)?(?:([-+]?[0-9]+)M)?(?:([-+]?[0-9]+)(?:[.,]([0-9]{0,9}))?S)?)?",
    re.IGNORECASE,
)


def name_error(group_id: str) -> str | None:
    """Why configs cannot be stored under this group name (INVALID_REQUEST), None if they can."""
    if not group_id:
        # Kafka's ControllerConfigurationValidator: no cluster-wide default group.
        return "Default group resources are not allowed."
    size = len(group_id.encode())
    if size > MAX_NAME_BYTES:
        return (
            f"Group name of {size} bytes is longer than the maximum of {MAX_NAME_BYTES} bytes "
            "for a group with configs"
        )
    return None


def validate(configs: dict[str, str | None], limits: Bounds | None = None) -> str | None:
    """The first problem with a group's explicit configs, as Kafka words it for
    INVALID_CONFIG; None when every name is known and every value valid. `limits`: the
    node's (NodeConfig.group_bounds), else Kafka's defaults."""
    unknown = next((name for name in configs if name not in GROUP_SETTINGS), None)
    if unknown is not None:  # Kafka checks every name before any value
        return f"Unknown group config name: {unknown}"
    limits = bounds(limits)
    for name, value in configs.items():
        if value is None:
            return f"Null value not supported for group configs: {name}"
        problem = _check(GROUP_SETTINGS[name], value, limits)
        if problem is not None:
            return problem
    return None


def _check(setting: Setting, value: str, limits: Bounds) -> str | None:
    name = setting.name
    problem = length_error(setting, value)
    if problem is not None:
        return problem
    if setting.type == INT:
        number = parse_number(setting, value)
        if isinstance(number, str):
            return number
        _, low, high = limits[name]
        if not low <= number <= high:
            return f"{name} must be in the range {low} to {high} inclusive."
        return None
    if setting.type == BOOLEAN:
        return boolean_error(setting, value)
    if name == AUTO_OFFSET_RESET:
        if parse_auto_offset_reset(value) is None:
            return (
                f"Invalid value `{value}` for configuration {name}. The value must be either "
                "'earliest', 'latest' or of the format 'by_duration:<PnDTnHnMn.nS.>'."
            )
        return None
    if setting.choices and value not in setting.choices:
        return invalid(name, value, f"String must be one of: {', '.join(setting.choices)}")
    return None


def parse_duration(text: str) -> float | None:
    """Seconds of an ISO-8601 duration as Java's Duration.parse reads it ("PT10S", "P1DT2H",
    "-PT0.5S"); None if it is not one."""
    match = _DURATION.fullmatch(text)
    if match is None:
        return None
    sign, days, time, hours, minutes, seconds, fraction = match.groups()
    if days is None and hours is None and minutes is None and seconds is None:
        return None  # "P" and "PT" name no amount
    if time is not None and time.upper() == "T":
        return None
    total: float = (
        int(days or 0) * 86400 + int(hours or 0) * 3600 + int(minutes or 0) * 60 + int(seconds or 0)
    )
    if fraction:
        part = int(fraction.ljust(9, "0")) / 1e9
        total += -part if (seconds or "").startswith("-") else part
    if abs(total) >= 2**63:
        return None  # Java's long seconds overflow
    return -total if sign == "-" else total


def parse_auto_offset_reset(value: str) -> tuple[str, float | None] | None:
    """share.auto.offset.reset as (strategy, seconds back for by_duration), or None if Kafka
    refuses it. Case matters, as in Kafka's ShareGroupAutoOffsetResetStrategy; a negative
    duration is refused."""
    if value in (LATEST, EARLIEST):
        return value, None
    prefix = BY_DURATION + ":"
    if not value.startswith(prefix):
        return None
    seconds = parse_duration(value[len(prefix) :])
    if seconds is None or seconds < 0:
        return None
    return BY_DURATION, seconds


def canonical(configs: dict[str, str]) -> dict[str, str]:
    """Valid configs as they are stored and described: numbers without blanks or signs,
    booleans in lower case (Kafka describes the parsed value, not the text given)."""
    out = {}
    for name, value in configs.items():
        kind = GROUP_SETTINGS[name].type
        if kind == INT:
            out[name] = str(int(value.strip()))
        elif kind == BOOLEAN:
            out[name] = value.strip().lower()
        else:
            out[name] = value
    return out


def values(group_configs: dict[str, str], limits: Bounds | None = None) -> dict[str, str]:
    """Every group setting's effective value: the group's own, else the node's default
    (`limits`, NodeConfig.group_bounds), else the table's."""
    return {name: value for name, value, _ in _resolved(group_configs, limits)}


def effective(group_configs: dict[str, str], limits: Bounds | None = None) -> list[ConfigEntry]:
    """Every group setting with its value and where the value comes from (DescribeConfigs)."""
    return [
        ConfigEntry(
            name,
            value,
            source,
            config_type=GROUP_SETTINGS[name].type,
            documentation=GROUP_SETTINGS[name].doc,
        )
        for name, value, source in _resolved(group_configs, limits)
    ]


def _resolved(group_configs: dict[str, str], limits: Bounds | None) -> list[tuple[str, str, int]]:
    defaults = limits or {}
    out = []
    for name, setting in GROUP_SETTINGS.items():
        if name in group_configs:
            out.append((name, group_configs[name], DYNAMIC_GROUP))
        elif name in defaults:
            out.append((name, str(defaults[name][0]), DEFAULT))
        else:
            out.append((name, setting.default, DEFAULT))
    return out
