"""The group config table (Kafka's GroupConfig): names, bounds, the share.auto.offset.reset
grammar, effective values and their sources; and GroupAdmin's changes through the facade."""

from types import SimpleNamespace

import pytest

import raftlog.controller as controller_module
from raftlog.broker.facade import BrokerFacade
from raftlog.common.errors import ErrorCode
from raftlog.config.config_def import BOOLEAN, INT, MAX_VALUE_LENGTH, STRING
from raftlog.config.group_config import (
    BY_DURATION,
    DYNAMIC_GROUP,
    GROUP_SETTINGS,
    MAX_NAME_BYTES,
    Bounds,
    canonical,
    effective,
    name_error,
    parse_auto_offset_reset,
    parse_duration,
    validate,
    values,
)
from raftlog.config.topic_config import DEFAULT
from raftlog.controller import ControllerUnavailable

KAFKA_DEFAULTS = {
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

# Kafka 4.3's group-level bounds: group.share.min/max.* and group.consumer.min/max.* defaults.
BOUNDS = {
    "consumer.heartbeat.interval.ms": (5000, 15000),
    "consumer.session.timeout.ms": (45000, 60000),
    "share.delivery.count.limit": (2, 10),
    "share.heartbeat.interval.ms": (5000, 15000),
    "share.partition.max.record.locks": (100, 4000),
    "share.record.lock.duration.ms": (15000, 60000),
    "share.session.timeout.ms": (45000, 60000),
}


def test_every_key_has_kafkas_default() -> None:
    assert values({}) == KAFKA_DEFAULTS
    assert validate(dict(KAFKA_DEFAULTS)) is None  # the defaults are valid settings


@pytest.mark.parametrize(("name", "bounds"), sorted(BOUNDS.items()))
def test_numbers_are_bounded_like_kafkas_group_level_bounds(
    name: str, bounds: tuple[int, int]
) -> None:
    low, high = bounds
    assert GROUP_SETTINGS[name].type == INT
    assert validate({name: str(low)}) is None
    assert validate({name: str(high)}) is None
    for outside in (low - 1, high + 1):
        assert validate({name: str(outside)}) == (
            f"{name} must be in the range {low} to {high} inclusive."
        )


@pytest.mark.parametrize("given", ["1.2", "-0.1", "ten", "", "1_000", "99999999999"])
def test_an_int_is_what_javas_parseInt_reads(given: str) -> None:
    message = validate({"share.delivery.count.limit": given})
    assert message is not None and "Not a number of type INT" in message


def test_an_int_may_have_blanks_and_a_plus_and_is_stored_plain() -> None:
    configs = {"share.delivery.count.limit": " +7 ", "share.renew.acknowledge.enable": "FALSE"}
    assert validate(dict(configs)) is None
    assert canonical(configs) == {
        "share.delivery.count.limit": "7",
        "share.renew.acknowledge.enable": "false",
    }


@pytest.mark.parametrize(
    "value",
    [
        "latest",
        "earliest",
        "by_duration:PT10S",
        "by_duration:P1DT2H3M4.5S",
        "by_duration:pt1h",
        "by_duration:PT0S",
        "by_duration:-PT0S",
        "by_duration:P2D",
        "by_duration:PT1,5S",
    ],
)
def test_auto_offset_reset_accepts_kafkas_strategies(value: str) -> None:
    assert validate({"share.auto.offset.reset": value}) is None


@pytest.mark.parametrize(
    "value",
    [
        "",
        "none",
        "Earliest",
        "LATEST",
        "by_duration",
        "by_duration:",
        "by_duration:-PT10S",
        "by_duration:PT-1S",
        "by_duration:P",
        "by_duration:PT",
        "by_duration:P1DT",
        "by_duration:10s",
        "by_duration:PT1H ",
        "earliest ",
    ],
)
def test_auto_offset_reset_refuses_the_rest(value: str) -> None:
    assert validate({"share.auto.offset.reset": value}) == (
        f"Invalid value `{value}` for configuration share.auto.offset.reset. The value must be "
        "either 'earliest', 'latest' or of the format 'by_duration:<PnDTnHnMn.nS.>'."
    )


def test_durations_read_as_java_reads_them() -> None:
    assert parse_duration("PT10S") == 10
    assert parse_duration("P1DT1H1M1.5S") == 86400 + 3600 + 60 + 1.5
    assert parse_duration("-PT1M") == -60
    assert parse_duration("PT-1.5S") == -1.5
    assert parse_duration("PT1M-30S") == 30
    assert parse_duration("1 hour") is None
    assert parse_auto_offset_reset("by_duration:PT1H") == (BY_DURATION, 3600)
    assert parse_auto_offset_reset("earliest") == ("earliest", None)
    assert parse_auto_offset_reset("by_duration:-PT1H") is None


@pytest.mark.parametrize(
    ("value", "ok"),
    [
        ("read_committed", True),
        ("read_uncommitted", True),
        ("READ_COMMITTED", False),
        ("none", False),
    ],
)
def test_isolation_level_is_one_of_two(value: str, ok: bool) -> None:
    message = validate({"share.isolation.level": value})
    assert (message is None) == ok
    if not ok:
        assert message == (
            f"Invalid value {value} for configuration share.isolation.level: "
            "String must be one of: read_committed, read_uncommitted"
        )


@pytest.mark.parametrize(
    ("value", "ok"),
    [("true", True), ("False", True), (" TRUE ", True), ("yes", False), ("1", False)],
)
def test_renew_acknowledge_is_a_boolean(value: str, ok: bool) -> None:
    assert (validate({"share.renew.acknowledge.enable": value}) is None) == ok


def test_unknown_names_are_refused_before_any_value() -> None:
    assert validate({"share.delivery.count.limit": "1", "streams.num.standby.replicas": "1"}) == (
        "Unknown group config name: streams.num.standby.replicas"
    )
    assert validate({"retention.ms": "1"}) == "Unknown group config name: retention.ms"
    assert validate({"share.delivery.count.limit": None}) == (
        "Null value not supported for group configs: share.delivery.count.limit"
    )


def test_effective_values_say_where_they_come_from() -> None:
    mine = {"share.auto.offset.reset": "earliest", "share.record.lock.duration.ms": "15000"}
    assert values(mine) == {**KAFKA_DEFAULTS, **mine}
    entries = {e.name: e for e in effective(mine)}
    assert list(entries) == sorted(KAFKA_DEFAULTS)
    assert (
        entries["share.auto.offset.reset"].value,
        entries["share.auto.offset.reset"].source,
    ) == (
        "earliest",
        DYNAMIC_GROUP,
    )
    assert entries["share.record.lock.duration.ms"].source == DYNAMIC_GROUP == 8
    assert (
        entries["share.delivery.count.limit"].value,
        entries["share.delivery.count.limit"].source,
    ) == (
        "5",
        DEFAULT,
    )
    assert {e.config_type for e in entries.values()} == {INT, STRING, BOOLEAN}
    assert entries["share.renew.acknowledge.enable"].config_type == BOOLEAN
    assert all(e.documentation and not e.read_only for e in entries.values())


# --------------------------------------------------------------------------- GroupAdmin


class FakeController:
    """The controller as GroupAdmin and BrokerFacade use it: replicated state and call()."""

    def __init__(self, up: bool = True) -> None:
        self.state = SimpleNamespace(group_configs={})
        self.calls: list[tuple] = []
        self.up = up
        self.refusal: str | None = None  # what the command answers where it is applied

    async def call(self, method: str, *args: object) -> str | None:
        self.calls.append((method, *args))
        if not self.up:
            raise ControllerUnavailable(f"{method}: no controller commit within 10.0s")
        assert method == "store_group_configs"
        if self.refusal is not None:
            return self.refusal
        group_id, configs = args
        if configs:
            self.state.group_configs[group_id] = dict(configs)
        else:
            self.state.group_configs.pop(group_id, None)
        return None


def facade(controller: FakeController, bounds: Bounds | None = None) -> BrokerFacade:
    """`bounds`: the node's share group settings (NodeConfig.group_bounds); none: Kafka's."""
    config = SimpleNamespace(group_bounds=lambda: dict(bounds or {}))
    return BrokerFacade(SimpleNamespace(node_id=1, controller=controller, config=config))


async def test_incremental_changes_merge_into_the_groups_configs() -> None:
    controller = FakeController()
    broker = facade(controller)
    result = await broker.alter_group_configs(
        "g", {"share.auto.offset.reset": "earliest"}, incremental=True, validate_only=False
    )
    assert (result.name, result.error, result.message) == ("g", ErrorCode.none, None)
    await broker.alter_group_configs(
        "g", {"share.record.lock.duration.ms": " 20000 "}, incremental=True, validate_only=False
    )
    assert controller.state.group_configs == {
        "g": {"share.auto.offset.reset": "earliest", "share.record.lock.duration.ms": "20000"}
    }
    assert broker.group_config("g") == {
        **KAFKA_DEFAULTS,
        "share.auto.offset.reset": "earliest",
        "share.record.lock.duration.ms": "20000",
    }
    sources = {e.name: e.source for e in broker.group_configs("g")}
    assert sources["share.auto.offset.reset"] == DYNAMIC_GROUP
    assert sources["share.delivery.count.limit"] == DEFAULT
    for name in ("share.auto.offset.reset", "share.record.lock.duration.ms", "not.set.anyway"):
        await broker.alter_group_configs("g", {name: None}, incremental=True, validate_only=False)
    assert controller.state.group_configs == {}  # nothing left: the entry goes
    assert broker.group_config("g") == KAFKA_DEFAULTS == broker.group_config("never-seen")


async def test_alter_configs_replaces_every_setting() -> None:
    controller = FakeController()
    controller.state.group_configs["g"] = {"share.auto.offset.reset": "earliest"}
    broker = facade(controller)
    await broker.alter_group_configs(
        "g", {"share.delivery.count.limit": "3"}, incremental=False, validate_only=False
    )
    assert controller.state.group_configs == {"g": {"share.delivery.count.limit": "3"}}


async def test_refused_and_validate_only_changes_reach_no_controller() -> None:
    controller = FakeController()
    controller.state.group_configs["g"] = {"share.auto.offset.reset": "earliest"}
    broker = facade(controller)
    cases = [
        ("g", {"share.delivery.count.limit": "11"}, ErrorCode.invalid_config),
        ("g", {"group.share.delivery.count.limit": "3"}, ErrorCode.invalid_config),
        ("", {"share.delivery.count.limit": "3"}, ErrorCode.invalid_request),
    ]
    for group, changes, error in cases:
        for incremental in (True, False):
            result = await broker.alter_group_configs(group, changes, incremental, False)
            assert result.error == error and result.message
    ok = await broker.alter_group_configs("g", {"share.delivery.count.limit": "3"}, True, True)
    assert ok.error == ErrorCode.none
    assert controller.calls == []
    assert controller.state.group_configs == {"g": {"share.auto.offset.reset": "earliest"}}


async def test_no_controller_commit_is_a_timeout() -> None:
    broker = facade(FakeController(up=False))
    result = await broker.alter_group_configs(
        "g", {"share.delivery.count.limit": "3"}, incremental=True, validate_only=False
    )
    assert result.error == ErrorCode.request_timed_out and "no controller commit" in result.message


async def test_a_group_config_name_is_bounded_before_anything_is_stored() -> None:
    """Every node keeps every configured group's name: 255 bytes at most (INVALID_REQUEST,
    like Kafka's refusal of the empty name); a 1 MiB name is refused, nothing proposed."""
    controller = FakeController()
    broker = facade(controller)
    change = {"share.delivery.count.limit": "3"}
    for name in ("g" * MAX_NAME_BYTES, "é" * (MAX_NAME_BYTES // 2)):
        assert (await broker.alter_group_configs(name, change, True, False)).error == ErrorCode.none
    for name in ("g" * (MAX_NAME_BYTES + 1), "é" * 128, "g" * 2**20):
        result = await broker.alter_group_configs(name, change, True, False)
        assert result.error == ErrorCode.invalid_request
        assert result.message == (
            f"Group name of {len(name.encode())} bytes is longer than the maximum of 255 "
            "bytes for a group with configs"
        )
    assert len(controller.calls) == 2 and len(controller.state.group_configs) == 2
    assert name_error("") == "Default group resources are not allowed."


def test_a_group_config_value_is_bounded_in_length() -> None:
    value = "by_duration:PT" + "0" * MAX_VALUE_LENGTH + "1S"
    assert validate({"share.auto.offset.reset": value}) == (
        f"Invalid value of {len(value)} characters for configuration share.auto.offset.reset: "
        f"longer than the maximum of {MAX_VALUE_LENGTH}"
    )
    assert validate({"share.delivery.count.limit": " " * 2000 + "3"}) is not None


async def test_configuring_a_group_past_the_clusters_cap_is_a_policy_violation(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Checked on the state the node has (validate_only too) and again where the controller
    applies the command (its answer); a group already configured may always change."""
    monkeypatch.setattr(controller_module, "MAX_CONFIGURED_GROUPS", 2)
    controller = FakeController()
    controller.state.group_configs.update({"a": {"share.delivery.count.limit": "3"}, "b": {}})
    broker = facade(controller)
    full = "Too many groups with configs: the cluster holds the configs of at most 2 groups"
    for validate_only in (True, False):
        result = await broker.alter_group_configs(
            "c", {"share.delivery.count.limit": "3"}, True, validate_only
        )
        assert (result.error, result.message) == (ErrorCode.policy_violation, full)
    assert controller.calls == []
    ok = await broker.alter_group_configs("a", {"share.delivery.count.limit": "4"}, True, False)
    assert ok.error == ErrorCode.none
    controller.state.group_configs.pop("b")
    controller.refusal = full  # another node's new group took the last place meanwhile
    result = await broker.alter_group_configs("c", {"share.delivery.count.limit": "3"}, True, False)
    assert (result.error, result.message) == (ErrorCode.policy_violation, full)


def test_a_nodes_broker_settings_bound_and_default_its_groups() -> None:
    node: Bounds = {"share.record.lock.duration.ms": (1000, 1000, 60000)}
    name = "share.record.lock.duration.ms"
    assert validate({name: "1000"}) == f"{name} must be in the range 15000 to 60000 inclusive."
    assert validate({name: "1000"}, node) is None
    assert validate({name: "999"}, node) == f"{name} must be in the range 1000 to 60000 inclusive."
    assert values({}, node)[name] == "1000"
    assert values({name: "2000"}, node)[name] == "2000"
    described = {e.name: e for e in effective({}, node)}[name]
    assert (described.value, described.source) == ("1000", DEFAULT)


async def test_a_group_alter_is_held_to_the_nodes_bounds() -> None:
    controller = FakeController()
    name = "share.record.lock.duration.ms"
    broker = facade(controller, {name: (1000, 1000, 60000)})
    result = await broker.alter_group_configs("g", {name: "1000"}, True, False)
    assert result.error == ErrorCode.none
    assert broker.group_config("h")[name] == "1000"  # the node's default for a group without
    assert (
        await facade(controller).alter_group_configs("g", {name: "1000"}, True, False)
    ).error == (ErrorCode.invalid_config)
