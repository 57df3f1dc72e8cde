"""DescribeAcls, CreateAcls and DeleteAcls at every advertised version: Kafka's answers without
an authorizer (SECURITY_DISABLED) and to a principal without the cluster permission, the checks
on each new binding, the filters' selection and grouping, and that every answer encodes with
kio and reads back unchanged. The broker keeps its bindings as the controller does."""

from __future__ import annotations

import sys
from types import ModuleType
from typing import Any

import pytest
from support.answers import client_reads
from support.broker_stub import BrokerStub

from kafka_api.codec import build, request_schema
from kafka_api.context import RequestContext
from kafka_api.errors import CloseConnection
from kafka_api.handlers import HANDLERS, create_acls, delete_acls, describe_acls
from raftlog.api.broker import Broker
from raftlog.api.values import AclChange
from raftlog.common.errors import ErrorCode
from raftlog.security import acl_index as index_module
from raftlog.security.acl import (
    MAX_PER_REQUEST,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclRefused,
    PatternType,
    PermissionType,
    ResourceType,
)
from raftlog.security.acl_index import AclIndex
from raftlog.security.authorizer import Authorizer

E = ErrorCode
Op, Res, Pat, Perm = AclOperation, ResourceType, PatternType, PermissionType
ADMIN, ALICE = "User:admin", "User:alice"


class AclBroker(BrokerStub):
    """Keeps bindings as the controller does: its mapping, changed through an AclIndex."""

    def __init__(self, *, authorizer: bool = True, super_users: tuple[str, ...] = (ADMIN,)):
        self.acls: dict[tuple[Any, ...], None] = {}
        self.index = AclIndex(lambda: self.acls)
        self.authorizer = Authorizer(super_users, False, self.index.synced) if authorizer else None
        self.controller_calls = 0

    async def create_acls(self, bindings: list[AclBinding]) -> AclChange:
        self.controller_calls += 1
        try:
            self.index.create(bindings)
        except AclRefused as refused:
            return AclChange(refused.error, refused.message)
        return AclChange()

    async def delete_acls(self, filters: list[AclBindingFilter]) -> AclChange:
        self.controller_calls += 1
        try:
            matched = self.index.delete(filters)
        except AclRefused as refused:
            return AclChange(refused.error, refused.message)
        return AclChange(deleted=tuple(tuple(found) for found in matched))


def _conforms(broker: AclBroker) -> Broker:
    return broker


def ctx(broker: AclBroker, version: int, principal: str = ADMIN) -> RequestContext:
    return RequestContext(broker, version, "c", "10.0.0.1", principal=principal)


def request_module(api_key: int, version: int) -> ModuleType:
    """The request models of one version: kio's, or ours in kio's form (v0)."""
    return sys.modules[request_schema(api_key, version).__module__]


def request(api_key: int, version: int, name: str, **values: Any) -> Any:
    return build(getattr(request_module(api_key, version), name), **values)


def creation(version: int, *fields: Any) -> Any:
    """A CreateAcls entry; v0 has no pattern type (LITERAL)."""
    resource_type, name, pattern, principal, host, operation, permission = fields
    m = request_module(create_acls.API_KEY, version)
    return build(
        m.AclCreation,
        resource_type=resource_type,
        resource_name=name,
        resource_pattern_type=pattern,
        principal=principal,
        host=host,
        operation=operation,
        permission_type=permission,
    )


async def create(broker: AclBroker, version: int, *bindings: tuple, principal: str = ADMIN):
    response = await create_acls.handle(
        ctx(broker, version, principal),
        request(
            create_acls.API_KEY,
            version,
            "CreateAclsRequest",
            creations=tuple(creation(version, *b) for b in bindings),
        ),
    )
    return [
        (r.error_code, r.error_message)
        for r in client_reads(response, create_acls.API_KEY, version).results
    ]


def filter_fields(*fields: Any) -> dict[str, Any]:
    resource_type, name, pattern, principal, host, operation, permission = fields
    return {
        "resource_type_filter": resource_type,
        "resource_name_filter": name,
        "pattern_type_filter": pattern,
        "principal_filter": principal,
        "host_filter": host,
        "operation": operation,
        "permission_type": permission,
    }


async def describe(broker: AclBroker, version: int, *fields: Any, principal: str = ADMIN):
    response = await describe_acls.handle(
        ctx(broker, version, principal),
        request(describe_acls.API_KEY, version, "DescribeAclsRequest", **filter_fields(*fields)),
    )
    return client_reads(response, describe_acls.API_KEY, version)


async def delete(broker: AclBroker, version: int, *filters: tuple, principal: str = ADMIN):
    m = request_module(delete_acls.API_KEY, version)
    response = await delete_acls.handle(
        ctx(broker, version, principal),
        build(
            m.DeleteAclsRequest,
            filters=tuple(build(m.DeleteAclsFilter, **filter_fields(*f)) for f in filters),
        ),
    )
    return client_reads(response, delete_acls.API_KEY, version).filter_results


EVERYTHING = (Res.ANY, None, Pat.ANY, None, None, Op.ANY, Perm.ANY)
READ_T = (Res.TOPIC, "t", Pat.LITERAL, ALICE, "*", Op.READ, Perm.ALLOW)
DENY_PREFIX = (Res.TOPIC, "t", Pat.PREFIXED, "User:*", "10.0.0.9", Op.WRITE, Perm.DENY)
GROUP_G = (Res.GROUP, "g", Pat.LITERAL, ALICE, "*", Op.READ, Perm.ALLOW)


def test_the_acl_apis_are_served_at_kafkas_versions() -> None:
    for module in (describe_acls, create_acls, delete_acls):
        assert HANDLERS[module.API_KEY] is module
        assert (module.MIN_VERSION, module.MAX_VERSION) == (0, 3)  # v0: Kafka 3.9's, not 4's


@pytest.mark.parametrize("version", [1, 2, 3])
async def test_round_trip_create_describe_delete(version: int) -> None:
    broker = AclBroker()
    assert (
        await create(broker, version, READ_T, DENY_PREFIX, GROUP_G, READ_T) == [(E.none, None)] * 4
    )
    assert len(broker.acls) == 3  # one already there is no change

    described = await describe(broker, version, *EVERYTHING)
    assert described.error_code is E.none and described.error_message is None
    grouped = {
        (r.resource_type, r.resource_name, r.pattern_type): [
            (a.principal, a.host, a.operation, a.permission_type) for a in r.acls
        ]
        for r in described.resources
    }
    assert grouped == {
        (Res.TOPIC, "t", Pat.LITERAL): [(ALICE, "*", Op.READ, Perm.ALLOW)],
        (Res.TOPIC, "t", Pat.PREFIXED): [("User:*", "10.0.0.9", Op.WRITE, Perm.DENY)],
        (Res.GROUP, "g", Pat.LITERAL): [(ALICE, "*", Op.READ, Perm.ALLOW)],
    }
    matching = await describe(
        broker, version, Res.TOPIC, "tx", Pat.MATCH, None, None, Op.ANY, Perm.ANY
    )
    assert [(r.resource_name, r.pattern_type) for r in matching.resources] == [("t", Pat.PREFIXED)]

    results = await delete(
        broker,
        version,
        (Res.TOPIC, None, Pat.ANY, None, None, Op.ANY, Perm.ANY),
        (Res.ANY, "t", Pat.ANY, ALICE, None, Op.ANY, Perm.ANY),
        (Res.CLUSTER, None, Pat.ANY, None, None, Op.ANY, Perm.ANY),
    )
    assert [r.error_code for r in results] == [E.none] * 3
    assert [
        [(a.resource_name, a.pattern_type, a.operation) for a in r.matching_acls] for r in results
    ] == [
        [("t", Pat.LITERAL, Op.READ), ("t", Pat.PREFIXED, Op.WRITE)],
        [("t", Pat.LITERAL, Op.READ)],  # also the first filter's: reported by both
        [],
    ]
    assert list(broker.acls) == [tuple(GROUP_G)]


async def test_v0_has_no_pattern_types_so_it_creates_and_matches_literal_acls_only() -> None:
    """sarama 1.22's ACL calls: Kafka 3.9 reads v0's missing pattern type as LITERAL, so a v0
    filter of any resource passes over a PREFIXED ACL (which its answer could not name)."""
    broker = AclBroker()
    assert await create(broker, 0, READ_T, GROUP_G) == [(E.none, None)] * 2
    assert list(broker.acls) == [tuple(READ_T), tuple(GROUP_G)]  # stored LITERAL
    await create(broker, 3, DENY_PREFIX)
    anything = (Res.ANY, None, Pat.LITERAL, None, None, Op.ANY, Perm.ANY)
    described = await describe(broker, 0, *anything)
    assert described.error_code is E.none
    assert [(r.resource_type, r.resource_name) for r in described.resources] == [
        (Res.TOPIC, "t"),
        (Res.GROUP, "g"),
    ]
    (result,) = await delete(broker, 0, (Res.TOPIC, "t", *anything[2:]))
    assert result.error_code is E.none
    assert [(a.resource_name, a.operation) for a in result.matching_acls] == [("t", Op.READ)]
    assert list(broker.acls) == [tuple(GROUP_G), tuple(DENY_PREFIX)]
    # the same authorization as later versions
    assert await create(broker, 0, READ_T, principal=ALICE) == [
        (E.cluster_authorization_failed, "Cluster authorization failed.")
    ]
    denied = await describe(broker, 0, *anything, principal=ALICE)
    assert denied.error_code is E.cluster_authorization_failed
    assert [r.error_code for r in await delete(broker, 0, anything, principal=ALICE)] == [
        E.cluster_authorization_failed
    ]


async def test_without_an_authorizer_the_apis_answer_security_disabled() -> None:
    broker = AclBroker(authorizer=False)
    assert await create(broker, 3, READ_T) == [
        (E.security_disabled, "No Authorizer is configured.")
    ]
    described = await describe(broker, 3, *EVERYTHING)
    assert (described.error_code, described.error_message) == (
        E.security_disabled,
        "No Authorizer is configured on the broker",
    )
    assert [r.error_code for r in await delete(broker, 3, EVERYTHING)] == [E.security_disabled]
    assert broker.controller_calls == 0


async def test_the_apis_need_describe_or_alter_on_the_cluster() -> None:
    broker = AclBroker()
    assert await create(broker, 3, READ_T, principal=ALICE) == [
        (E.cluster_authorization_failed, "Cluster authorization failed.")
    ]
    assert (await describe(broker, 3, *EVERYTHING, principal=ALICE)).error_code is (
        E.cluster_authorization_failed
    )
    assert [r.error_code for r in await delete(broker, 3, EVERYTHING, principal=ALICE)] == [
        E.cluster_authorization_failed
    ]
    assert broker.controller_calls == 0
    # DESCRIBE is implied by ALTER; ALTER lets Alice change ACLs
    cluster = (Res.CLUSTER, "kafka-cluster", Pat.LITERAL, ALICE, "*", Op.ALTER, Perm.ALLOW)
    await create(broker, 3, cluster)
    assert (await describe(broker, 3, *EVERYTHING, principal=ALICE)).error_code is E.none
    assert await create(broker, 3, READ_T, principal=ALICE) == [(E.none, None)]


async def test_each_binding_kafka_refuses_is_invalid_request_and_the_rest_are_created() -> None:
    broker = AclBroker()
    results = await create(
        broker,
        3,
        (Res.CLUSTER, "other", Pat.LITERAL, ALICE, "*", Op.ALTER, Perm.ALLOW),
        (Res.TOPIC, "", Pat.LITERAL, ALICE, "*", Op.READ, Perm.ALLOW),
        (Res.ANY, "t", Pat.LITERAL, ALICE, "*", Op.READ, Perm.ALLOW),
        (Res.TOPIC, "t", Pat.MATCH, ALICE, "*", Op.READ, Perm.ALLOW),
        (Res.TOPIC, "t", Pat.LITERAL, ALICE, "*", Op.ANY, Perm.ALLOW),
        (Res.TOPIC, "t", Pat.LITERAL, ALICE, "*", Op.READ, Perm.ANY),
        (Res.TOPIC, "t", Pat.LITERAL, "alice", "*", Op.READ, Perm.ALLOW),
        READ_T,
    )
    assert [error for error, _ in results] == [E.invalid_request] * 7 + [E.none]
    assert results[0][1] == "The only valid name for the CLUSTER resource is kafka-cluster"
    assert results[2][1] == "Invalid resourceType ANY"
    assert list(broker.acls) == [tuple(READ_T)]


@pytest.mark.parametrize(
    "bad",
    [
        (0, "t", Pat.LITERAL, ALICE, "*", Op.READ, Perm.ALLOW),
        (Res.TOPIC, "t", 9, ALICE, "*", Op.READ, Perm.ALLOW),
        (Res.TOPIC, "t", Pat.LITERAL, ALICE, "*", 0, Perm.ALLOW),
        (Res.TOPIC, "t", Pat.LITERAL, ALICE, "*", Op.READ, 4),
    ],
)
async def test_an_unknown_code_closes_the_connection_as_kafka_fails_to_parse_it(bad) -> None:
    broker = AclBroker()
    with pytest.raises(CloseConnection):
        await create(broker, 3, bad)
    with pytest.raises(CloseConnection):
        await describe(broker, 3, *bad)
    with pytest.raises(CloseConnection):
        await delete(broker, 3, bad)
    assert broker.controller_calls == 0


def topic_acl(i: int) -> tuple:
    return (Res.TOPIC, f"t{i}", Pat.LITERAL, ALICE, "*", Op.READ, Perm.ALLOW)


async def test_a_create_of_more_than_ten_thousand_acls_is_refused_whole() -> None:
    """Kafka's controller bound (10,000 records per operation), before anything is proposed:
    every creation gets POLICY_VIOLATION; the message rides on the first only, so the answer
    stays a few bytes per creation however many there are."""
    broker = AclBroker()
    results = await create(broker, 3, *(topic_acl(i) for i in range(MAX_PER_REQUEST + 1)))
    assert len(results) == MAX_PER_REQUEST + 1
    assert {error for error, _ in results} == {E.policy_violation}
    assert results[0][1] == (
        "Unable to perform excessively large batch operation: 10001 ACL creations in one "
        "request, at most 10000."
    )
    assert {message for _, message in results[1:]} == {None}
    assert broker.controller_calls == 0 and broker.acls == {}
    results = await create(broker, 3, *(topic_acl(i) for i in range(MAX_PER_REQUEST)))
    assert results == [(E.none, None)] * MAX_PER_REQUEST
    assert len(broker.acls) == MAX_PER_REQUEST


async def test_the_clusters_bound_answers_every_creation(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(index_module, "MAX_ACLS", 2)
    broker = AclBroker()
    bad_host = (Res.TOPIC, "t", Pat.LITERAL, ALICE, "h" * 256, Op.READ, Perm.ALLOW)
    results = await create(broker, 3, topic_acl(0), bad_host, topic_acl(1), topic_acl(2))
    assert [error for error, _ in results] == [
        E.policy_violation,
        E.invalid_request,
        E.policy_violation,
        E.policy_violation,
    ]
    assert results[1][1] == "Host of 256 characters is longer than the maximum of 255"
    assert results[0][1] is not None and "may hold at most 2" in results[0][1]
    assert broker.acls == {}


async def test_a_delete_of_more_than_ten_thousand_filters_or_matches_deletes_nothing() -> None:
    broker = AclBroker()
    for start in range(0, MAX_PER_REQUEST + 1, MAX_PER_REQUEST):
        broker.index.create(topic_acl(i) for i in range(start, start + MAX_PER_REQUEST))
    stored = dict(broker.acls)
    every_topic = (Res.TOPIC, None, Pat.ANY, None, None, Op.ANY, Perm.ANY)
    results = await delete(broker, 3, *[every_topic] * (MAX_PER_REQUEST + 1))
    assert len(results) == MAX_PER_REQUEST + 1
    assert {(r.error_code, len(r.matching_acls)) for r in results} == {(E.policy_violation, 0)}
    assert results[0].error_message == (
        "Unable to perform excessively large batch operation: 10001 DeleteAcls filters in one "
        "request, at most 10000."
    )
    assert broker.controller_calls == 0
    # one filter matching 20,000: Kafka's answer, for every filter, and nothing deleted
    first = (Res.TOPIC, "t0", Pat.LITERAL, None, None, Op.ANY, Perm.ANY)
    results = await delete(broker, 3, first, every_topic)
    assert [(r.error_code, r.error_message) for r in results] == [
        (E.invalid_request, "Cannot remove more than 10000 acls in a single delete operation.")
    ] * 2
    assert broker.acls == stored


async def test_strings_past_their_bounds_get_invalid_request_and_the_rest_go_on() -> None:
    broker = AclBroker()
    huge_name = (Res.TOPIC, "t" * 20_000, Pat.LITERAL, ALICE, "*", Op.READ, Perm.ALLOW)
    huge_principal = (Res.GROUP, "g", Pat.LITERAL, "User:" + "p" * 5000, "*", Op.READ, Perm.ALLOW)
    results = await create(broker, 3, huge_name, huge_principal, READ_T, GROUP_G)
    assert [error for error, _ in results] == [E.invalid_request] * 2 + [E.none] * 2
    assert (
        results[0][1] == "TOPIC resource name of 20000 characters is longer than the maximum of 249"
    )
    assert list(broker.acls) == [tuple(READ_T), tuple(GROUP_G)]

    long_filter = (Res.ANY, "n" * 1025, Pat.ANY, None, None, Op.ANY, Perm.ANY)
    described = await describe(broker, 3, *long_filter)
    assert (described.error_code, described.resources) == (E.invalid_request, ())
    assert described.error_message == (
        "Resource name filter of 1025 characters is longer than the maximum of 1024"
    )
    results = await delete(broker, 3, long_filter, (Res.GROUP, None, Pat.ANY, None, None, 1, 1))
    assert [r.error_code for r in results] == [E.invalid_request, E.none]
    assert [len(r.matching_acls) for r in results] == [0, 1]
    assert list(broker.acls) == [tuple(READ_T)]


async def test_a_describe_of_many_acls_groups_them_by_pattern() -> None:
    """Matched, built and encoded in a thread: the answer is what a client reads."""
    broker = AclBroker()
    bob = [
        (Res.TOPIC, f"t{i}", Pat.LITERAL, "User:bob", "*", Op.WRITE, Perm.DENY) for i in range(5000)
    ]
    broker.index.create(
        b for pair in zip(map(topic_acl, range(5000)), bob, strict=True) for b in pair
    )
    described = await describe(broker, 3, *EVERYTHING)
    assert described.error_code is E.none
    assert [
        (r.resource_name, [(a.principal, a.operation) for a in r.acls]) for r in described.resources
    ] == [(f"t{i}", [(ALICE, Op.READ), ("User:bob", Op.WRITE)]) for i in range(5000)]
    bobs = await describe(broker, 3, Res.TOPIC, None, Pat.ANY, "User:bob", None, Op.ANY, Perm.DENY)
    assert sum(len(r.acls) for r in bobs.resources) == 5000
