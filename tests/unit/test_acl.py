"""The authorizer against Kafka's rules (StandardAuthorizer, AclBindingFilter,
authorizeByResourceType): a Hypothesis model of the rules written from their definition, the
corner cases by name, the filters of DescribeAcls and DeleteAcls, the checks on new bindings,
and the cache, which must forget everything when the bindings change."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raftlog.common.errors import ConfigError, ErrorCode
from raftlog.config.broker_settings import BROKER_DEFAULTS
from raftlog.security import acl_index as index_module
from raftlog.security.acl import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclRefused,
    PatternType,
    PermissionType,
    ResourceType,
    creation_error,
    filter_error,
    select,
    unknown_codes,
)
from raftlog.security.acl_index import AclIndex
from raftlog.security.authorizer import CACHE_ENTRIES, Authorizer, authorizer_for

Op, Res, Pat, Perm = AclOperation, ResourceType, PatternType, PermissionType
ALICE, BOB = "User:alice", "User:bob"
HOST = "10.0.0.1"


class Bindings:
    """The controller's `acls` as the index reads it; `set` replaces the mapping, as loading a
    snapshot does."""

    def __init__(self, *bindings: AclBinding) -> None:
        self.current: dict[tuple[Any, ...], None] = {tuple(b): None for b in bindings}

    def set(self, *bindings: AclBinding) -> None:
        self.current = {tuple(b): None for b in bindings}

    def __call__(self) -> dict[tuple[Any, ...], None]:
        return self.current


def acl(
    name: str = "t",
    operation: Op = Op.READ,
    permission: Perm = Perm.ALLOW,
    principal: str = ALICE,
    host: str = "*",
    pattern: Pat = Pat.LITERAL,
    resource_type: Res = Res.TOPIC,
) -> AclBinding:
    return AclBinding(resource_type, name, pattern, principal, host, operation, permission)


def authorizer(*bindings: AclBinding, allow_if_no_acl: bool = False, supers=()) -> Authorizer:
    return Authorizer(supers, allow_if_no_acl, AclIndex(Bindings(*bindings)).synced)


def may(auth: Authorizer, operation: Op, name: str = "t", principal: str = ALICE, **kw) -> bool:
    return auth.authorize(
        principal, kw.get("host", HOST), operation, kw.get("resource_type", Res.TOPIC), name
    )


# --- the model --------------------------------------------------------------------------

IMPLIED = {
    Op.DESCRIBE: {Op.READ, Op.WRITE, Op.DELETE, Op.ALTER},
    Op.DESCRIBE_CONFIGS: {Op.ALTER_CONFIGS},
}


def model(
    bindings: list[AclBinding],
    supers: set[str],
    allow_if_no_acl: bool,
    principal: str,
    host: str,
    operation: Op,
    resource_type: Res,
    name: str,
) -> bool:
    """Kafka's rules as its documentation states them, over every binding in turn."""
    if principal in supers:
        return True
    applying = [
        b
        for b in bindings
        if b.resource_type == resource_type
        and (
            (b.pattern_type == Pat.LITERAL and b.name in (name, "*"))
            or (b.pattern_type == Pat.PREFIXED and name.startswith(b.name))
        )
    ]
    if not applying:
        return allow_if_no_acl
    speaking = [
        b
        for b in applying
        if b.principal in (principal, "User:*")
        and b.host in (host, "*")
        and (
            b.operation in (Op.ALL, operation)
            or (b.permission == Perm.ALLOW and b.operation in IMPLIED.get(operation, ()))
        )
    ]
    if any(b.permission == Perm.DENY for b in speaking):
        return False
    return any(b.permission == Perm.ALLOW for b in speaking)


NAMES = st.sampled_from(["t", "to", "top", "topic", "other", "*", "x"])
PRINCIPALS = st.sampled_from([ALICE, BOB, "User:*"])
HOSTS = st.sampled_from([HOST, "10.0.0.2", "*"])
OPERATIONS = st.sampled_from([op for op in Op if op not in (Op.UNKNOWN, Op.ANY)])
TYPES = st.sampled_from([Res.TOPIC, Res.GROUP])
BINDINGS = st.builds(
    AclBinding,
    TYPES,
    NAMES,
    st.sampled_from([Pat.LITERAL, Pat.PREFIXED]),
    PRINCIPALS,
    HOSTS,
    OPERATIONS,
    st.sampled_from([Perm.ALLOW, Perm.DENY]),
)


@settings(max_examples=400, deadline=None)
@given(
    bindings=st.lists(BINDINGS, max_size=8),
    supers=st.sets(st.sampled_from([ALICE, BOB]), max_size=1),
    allow_if_no_acl=st.booleans(),
    questions=st.lists(
        st.tuples(
            st.sampled_from([ALICE, BOB]),
            st.sampled_from([HOST, "10.0.0.2"]),
            OPERATIONS,
            TYPES,
            NAMES,
        ),
        min_size=1,
        max_size=6,
    ),
)
def test_decisions_follow_kafkas_rules(bindings, supers, allow_if_no_acl, questions) -> None:
    auth = authorizer(*bindings, allow_if_no_acl=allow_if_no_acl, supers=supers)
    for _ in range(2):  # the second round answers from the cache
        for principal, host, operation, resource_type, name in questions:
            expected = model(
                bindings, supers, allow_if_no_acl, principal, host, operation, resource_type, name
            )
            assert auth.authorize(principal, host, operation, resource_type, name) == expected, (
                principal,
                host,
                operation.name,
                resource_type.name,
                name,
            )


@settings(max_examples=300, deadline=None)
@given(bindings=st.lists(BINDINGS, max_size=8), resource_type=TYPES, name=NAMES)
def test_a_match_filter_selects_the_bindings_that_apply(bindings, resource_type, name) -> None:
    """Kafka's MATCH: every binding whose pattern covers the name, which are exactly those the
    authorizer weighs."""
    selected = AclBindingFilter(resource_type, name, Pat.MATCH, None, None, Op.ANY, Perm.ANY)
    applying = {
        b
        for b in bindings
        if b.resource_type == resource_type
        and (
            (b.pattern_type == Pat.LITERAL and b.name in (name, "*"))
            or (b.pattern_type == Pat.PREFIXED and name.startswith(b.name))
        )
    }
    assert set(select(authorizer(*bindings).bindings(), selected)) == applying


# --- the rules by name ------------------------------------------------------------------


def test_deny_wins_over_allow() -> None:
    auth = authorizer(acl(operation=Op.READ), acl(operation=Op.READ, permission=Perm.DENY))
    assert not may(auth, Op.READ)


def test_implied_operations_come_from_allow_only() -> None:
    for granting in (Op.READ, Op.WRITE, Op.DELETE, Op.ALTER):
        assert may(authorizer(acl(operation=granting)), Op.DESCRIBE), granting
    assert not may(authorizer(acl(operation=Op.CREATE)), Op.DESCRIBE)
    assert may(authorizer(acl(operation=Op.ALTER_CONFIGS)), Op.DESCRIBE_CONFIGS)
    assert not may(authorizer(acl(operation=Op.DESCRIBE)), Op.READ)  # not the other way
    # a DENY of READ does not deny DESCRIBE...
    auth = authorizer(acl(operation=Op.DESCRIBE), acl(operation=Op.READ, permission=Perm.DENY))
    assert may(auth, Op.DESCRIBE) and not may(auth, Op.READ)
    # ...and ALL allows or denies everything
    assert may(authorizer(acl(operation=Op.ALL)), Op.ALTER_CONFIGS)
    auth = authorizer(acl(operation=Op.READ), acl(operation=Op.ALL, permission=Perm.DENY))
    assert not may(auth, Op.READ)


def test_wildcards_of_principal_host_and_name() -> None:
    auth = authorizer(acl(name="*", principal="User:*", host="*"))
    assert may(auth, Op.READ, "anything", BOB, host="192.168.1.1")
    host_bound = authorizer(acl(host="10.0.0.9"))
    assert not may(host_bound, Op.READ) and may(host_bound, Op.READ, host="10.0.0.9")
    # a PREFIXED "*" is a prefix like any other, not a wildcard
    assert not may(authorizer(acl(name="*", pattern=Pat.PREFIXED)), Op.READ, "t")
    assert may(authorizer(acl(name="*", pattern=Pat.PREFIXED)), Op.READ, "*t")


def test_prefixes_and_literals() -> None:
    auth = authorizer(acl(name="orders.", pattern=Pat.PREFIXED))
    assert may(auth, Op.READ, "orders.eu") and may(auth, Op.READ, "orders.")
    assert not may(auth, Op.READ, "orders")
    literal = authorizer(acl(name="orders"))
    assert may(literal, Op.READ, "orders") and not may(literal, Op.READ, "orders.eu")


def test_super_users_and_the_no_acl_default() -> None:
    denying = acl(principal="User:*", operation=Op.ALL, permission=Perm.DENY)
    assert may(authorizer(denying, supers={ALICE}), Op.WRITE)
    assert not may(authorizer(), Op.READ)
    assert may(authorizer(allow_if_no_acl=True), Op.READ)
    # any binding on the resource, even for someone else, ends the default
    assert not may(authorizer(acl(principal=BOB), allow_if_no_acl=True), Op.READ)
    assert may(authorizer(acl(principal=BOB), allow_if_no_acl=True), Op.READ, "other")
    # a binding on another resource type does not count
    group_acl = acl(principal=BOB, resource_type=Res.GROUP)
    assert may(authorizer(group_acl, allow_if_no_acl=True), Op.READ)


@pytest.mark.parametrize(
    ("bindings", "allow_if_no_acl", "allowed"),
    [
        ([], False, False),
        ([], True, True),  # nothing applies to any name: the default
        ([acl(operation=Op.WRITE)], False, True),
        ([acl(operation=Op.ALL)], False, True),
        ([acl(operation=Op.READ)], False, False),
        ([acl(operation=Op.WRITE), acl(operation=Op.WRITE, permission=Perm.DENY)], False, False),
        # a prefix DENY covers the allowed prefix and literal names that start with it
        (
            [
                acl("fo", Op.WRITE, pattern=Pat.PREFIXED),
                acl("f", Op.WRITE, Perm.DENY, pattern=Pat.PREFIXED),
            ],
            False,
            False,
        ),
        (
            [acl("foo", Op.WRITE), acl("fo", Op.WRITE, Perm.DENY, pattern=Pat.PREFIXED)],
            False,
            False,
        ),
        # a literal DENY covers only that literal name
        (
            [acl("foo", Op.WRITE, pattern=Pat.PREFIXED), acl("foo", Op.WRITE, Perm.DENY)],
            False,
            True,
        ),
        ([acl("a", Op.WRITE), acl("b", Op.WRITE, Perm.DENY)], False, True),
        ([acl("*", Op.WRITE), acl("t", Op.WRITE, Perm.DENY)], False, True),
        ([acl("t", Op.WRITE), acl("*", Op.WRITE, Perm.DENY)], False, False),
        ([acl("t", Op.WRITE, principal=BOB)], False, False),
        ([acl("t", Op.WRITE, principal="User:*", host=HOST)], False, True),
        ([acl("t", Op.WRITE, host="10.9.9.9")], False, False),
    ],
)
def test_authorize_by_resource_type(bindings, allow_if_no_acl, allowed) -> None:
    """Kafka's authorizeByResourceType (KIP-679), which InitProducerId asks of WRITE."""
    auth = authorizer(*bindings, allow_if_no_acl=allow_if_no_acl)
    assert auth.authorize_by_resource_type(ALICE, HOST, Op.WRITE, Res.TOPIC) is allowed
    assert authorizer(*bindings, supers={ALICE}).authorize_by_resource_type(
        ALICE, HOST, Op.WRITE, Res.TOPIC
    )


def test_the_cache_forgets_when_the_bindings_change() -> None:
    bindings = Bindings(acl(operation=Op.WRITE))
    auth = Authorizer((), False, AclIndex(bindings).synced)
    assert may(auth, Op.WRITE)
    assert auth.authorize_by_resource_type(ALICE, HOST, Op.WRITE, Res.TOPIC)
    bindings.set(acl(operation=Op.WRITE), acl(operation=Op.WRITE, permission=Perm.DENY))
    assert not may(auth, Op.WRITE)
    assert not auth.authorize_by_resource_type(ALICE, HOST, Op.WRITE, Res.TOPIC)
    bindings.set()
    assert not may(auth, Op.WRITE)
    assert auth.bindings() == []


def test_the_cache_is_bounded() -> None:
    auth = authorizer(acl(name="t", operation=Op.READ))
    for i in range(CACHE_ENTRIES + 10):
        may(auth, Op.READ, f"topic-{i}")
    assert len(auth._cache) <= CACHE_ENTRIES
    assert may(auth, Op.READ, "t")


# --- the index, changed in place ----------------------------------------------------------

FILTERS = st.builds(
    AclBindingFilter,
    st.sampled_from([Res.ANY, Res.TOPIC, Res.GROUP]),
    st.one_of(st.none(), NAMES),
    st.sampled_from([Pat.ANY, Pat.MATCH, Pat.LITERAL, Pat.PREFIXED]),
    st.one_of(st.none(), PRINCIPALS),
    st.one_of(st.none(), HOSTS),
    st.sampled_from([Op.ANY, Op.READ, Op.WRITE, Op.ALL]),
    st.sampled_from([Perm.ANY, Perm.ALLOW, Perm.DENY]),
)
CHANGES = st.lists(
    st.one_of(
        st.tuples(st.just("create"), st.lists(BINDINGS, max_size=5)),
        st.tuples(st.just("delete"), st.lists(FILTERS, min_size=1, max_size=3)),
    ),
    max_size=12,
)


def layout(index: AclIndex) -> dict[int, tuple[Any, ...]]:
    """What the index holds per resource type, comparable across two indexes."""
    found = {}
    for kind in (Res.TOPIC, Res.GROUP):
        section = index.section(kind)
        if section is not None and (section.literal or section.prefixed):
            found[kind] = (
                {name: list(named) for name, named in section.literal.items()},
                {name: list(named) for name, named in section.prefixed.items()},
                dict(section.prefix_lengths),
            )
    return found


@settings(max_examples=300, deadline=None)
@given(changes=CHANGES, questions=st.lists(st.tuples(PRINCIPALS, OPERATIONS, TYPES, NAMES)))
def test_the_index_changed_in_place_is_the_one_built_from_scratch(changes, questions) -> None:
    """Each change costs what it adds or removes; after any run of them the index, the
    mapping, DeleteAcls's matches and the authorizer's decisions are what a from-scratch
    index and Kafka's rules, over the same bindings, give."""
    acls: dict[tuple[Any, ...], None] = {}
    index = AclIndex(lambda: acls)
    auth = Authorizer((), False, index.synced)
    model: list[AclBinding] = []  # the bindings, in creation order
    for kind, entries in changes:
        if kind == "create":
            index.create(entries)
            model += [b for b in dict.fromkeys(entries) if b not in model]
        else:
            matched = index.delete(entries)
            assert [sorted(found) for found in matched] == [
                sorted(b for b in model if f.matches(b)) for f in entries
            ]
            model = [b for b in model if not any(f.matches(b) for f in entries)]
        assert list(acls) == [tuple(b) for b in model] == index.bindings()
        scratch = AclIndex(lambda: dict(acls)).synced()
        assert layout(index) == layout(scratch)
        for principal, operation, resource_type, name in questions:
            expected = model_decision(model, principal, operation, resource_type, name)
            assert auth.authorize(principal, HOST, operation, resource_type, name) == expected


def model_decision(
    bindings: list[AclBinding], principal: str, op: Op, kind: Res, name: str
) -> bool:
    return model(bindings, set(), False, principal, HOST, op, kind, name)


def test_a_change_in_place_and_a_replaced_mapping_both_reach_the_decisions() -> None:
    bindings = Bindings()
    index = AclIndex(bindings)
    auth = Authorizer((), False, index.synced)
    assert not may(auth, Op.READ)
    index.create([acl()])
    assert may(auth, Op.READ)
    index.delete([AclBindingFilter(Res.TOPIC, "t", Pat.LITERAL, None, None, Op.ANY, Perm.ANY)])
    assert not may(auth, Op.READ) and bindings() == {}
    bindings.set(acl())  # as a snapshot loaded by pysyncobj: rebuilt from it
    assert may(auth, Op.READ) and index.bindings() == [tuple(acl())]


def test_the_cluster_holds_at_most_max_acls(monkeypatch: pytest.MonkeyPatch) -> None:
    """Checked when the command applies: over the bound, none of its bindings is stored."""
    monkeypatch.setattr(index_module, "MAX_ACLS", 3)
    acls: dict[tuple[Any, ...], None] = {}
    index = AclIndex(lambda: acls)
    index.create([acl("a"), acl("b")])
    with pytest.raises(AclRefused) as refused:
        index.create([acl("c"), acl("d")])
    assert refused.value.error is ErrorCode.policy_violation
    assert "may hold at most 3" in refused.value.message
    assert list(acls) == [acl("a"), acl("b")]
    index.create([acl("a"), acl("c"), acl("c")])  # one new: a is there, c twice
    assert list(acls) == [acl("a"), acl("b"), acl("c")]


def test_a_delete_over_its_bounds_deletes_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    """More matches than MAX_PER_REQUEST: Kafka's INVALID_REQUEST and message. Filters that
    would look at more than MAX_EXAMINED stored ACLs together: POLICY_VIOLATION. A filter
    naming its resource looks only at that name's ACLs."""
    monkeypatch.setattr(index_module, "MAX_PER_REQUEST", 3)
    monkeypatch.setattr(index_module, "MAX_EXAMINED", 8)
    stored = [acl(f"t{i}") for i in range(6)]
    acls = {tuple(b): None for b in stored}
    index = AclIndex(lambda: acls)

    def named(name: str | None, principal: str | None = None) -> AclBindingFilter:
        return AclBindingFilter(Res.TOPIC, name, Pat.ANY, principal, None, Op.ANY, Perm.ANY)

    with pytest.raises(AclRefused) as refused:
        index.delete([named("t0"), named("t1"), named("t2"), named("t3")])
    assert (refused.value.error, refused.value.message) == (
        ErrorCode.invalid_request,
        "Cannot remove more than 3 acls in a single delete operation.",
    )
    with pytest.raises(AclRefused) as refused:
        index.delete([named(None, BOB), named(None, BOB)])  # 12 looked at, none matched
    assert refused.value.error is ErrorCode.policy_violation
    assert "more than 8 ACLs" in refused.value.message
    assert list(acls) == [tuple(b) for b in stored]
    assert (
        index.delete([named(f"t{i}") for i in range(3)] * 2) == [[stored[i]] for i in range(3)] * 2
    )
    assert list(acls) == [tuple(b) for b in stored[3:]]


def test_match_filters_pay_for_the_prefix_lengths_they_look_up(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A MATCH filter looks its name up at every prefix length some PREFIXED binding has: each
    lookup counts against MAX_EXAMINED with the bindings found, so many such filters cannot
    make the controller's apply long either."""
    monkeypatch.setattr(index_module, "MAX_EXAMINED", 12)
    prefixes = [acl("abcde"[:size], pattern=Pat.PREFIXED) for size in range(1, 6)]
    acls = {tuple(b): None for b in prefixes}
    index = AclIndex(lambda: acls)
    match = AclBindingFilter(Res.TOPIC, "abcdefg", Pat.MATCH, BOB, None, Op.ANY, Perm.ANY)
    assert index.delete([match]) == [[]]  # 5 lengths and 5 bindings looked at
    with pytest.raises(AclRefused):
        index.delete([match, match])
    assert len(acls) == 5


# --- filters ----------------------------------------------------------------------------


def test_filters_as_kafka_matches_them() -> None:
    literal, prefixed, wildcard = (
        acl("orders"),
        acl("ord", pattern=Pat.PREFIXED),
        acl("*"),
    )
    group = acl("orders", resource_type=Res.GROUP, principal=BOB, permission=Perm.DENY)
    auth = authorizer(literal, prefixed, wildcard, group)

    def selected(*fields: Any) -> list[AclBinding]:
        return select(auth.bindings(), AclBindingFilter(*fields))

    everything = (Res.ANY, None, Pat.ANY, None, None, Op.ANY, Perm.ANY)
    assert selected(*everything) == [literal, prefixed, wildcard, group]
    # ANY takes the name literally, across pattern types
    assert selected(Res.ANY, "orders", Pat.ANY, None, None, Op.ANY, Perm.ANY) == [literal, group]
    assert selected(Res.TOPIC, "ord", Pat.PREFIXED, None, None, Op.ANY, Perm.ANY) == [prefixed]
    assert selected(Res.TOPIC, "ord", Pat.LITERAL, None, None, Op.ANY, Perm.ANY) == []
    # MATCH: what applies to the name
    assert selected(Res.TOPIC, "orders", Pat.MATCH, None, None, Op.ANY, Perm.ANY) == [
        literal,
        prefixed,
        wildcard,
    ]
    assert selected(Res.ANY, None, Pat.ANY, BOB, None, Op.ANY, Perm.ANY) == [group]
    assert selected(Res.ANY, None, Pat.ANY, None, "*", Op.READ, Perm.DENY) == [group]
    assert selected(Res.ANY, None, Pat.ANY, None, "10.0.0.1", Op.ANY, Perm.ANY) == []


def test_unknown_codes_and_refused_bindings() -> None:
    assert unknown_codes(Res.TOPIC, Pat.LITERAL, Op.READ, Perm.ALLOW) == []
    assert unknown_codes(0, Pat.LITERAL, 15, Perm.ALLOW) == ["resource type 0", "operation 15"]
    assert creation_error(acl()) is None
    assert creation_error(acl("*", pattern=Pat.PREFIXED)) is None
    refused = {
        acl("other", resource_type=Res.CLUSTER): "The only valid name for the CLUSTER resource",
        acl(""): "Invalid empty resource name",
        acl(resource_type=Res.ANY): "Invalid resourceType ANY",
        acl(pattern=Pat.MATCH): "Invalid patternType MATCH",
        acl(pattern=Pat.ANY): "Invalid patternType ANY",
        acl(operation=Op.ANY): "Invalid operation ANY",
        acl(permission=Perm.ANY): "Invalid permissionType ANY",
        acl(principal="alice"): "expected a string in format principalType:principalName",
        acl(principal="User:"): "expected a string in format principalType:principalName",
    }
    for binding, message in refused.items():
        problem = creation_error(binding)
        assert problem is not None and problem.startswith(message), binding


def test_every_string_of_a_binding_or_filter_is_bounded() -> None:
    """INVALID_REQUEST past the bound: 249 characters for a topic name (Kafka's longest topic
    name: no longer pattern could apply to one), 1,024 for other names and principals, 255 for
    a host; an empty host too."""
    assert creation_error(acl("t" * 249)) is None
    assert creation_error(acl("t" * 249, pattern=Pat.PREFIXED)) is None
    assert creation_error(acl("t" * 250)) == (
        "TOPIC resource name of 250 characters is longer than the maximum of 249"
    )
    assert creation_error(acl("g" * 1024, resource_type=Res.GROUP)) is None
    assert creation_error(acl("g" * 1025, resource_type=Res.TRANSACTIONAL_ID)) == (
        "TRANSACTIONAL_ID resource name of 1025 characters is longer than the maximum of 1024"
    )
    assert creation_error(acl(principal="User:" + "p" * 1019)) is None
    assert creation_error(acl(principal="User:" + "p" * 1020)) == (
        "Principal of 1025 characters is longer than the maximum of 1024"
    )
    assert creation_error(acl(host="h" * 255)) is None
    assert creation_error(acl(host="h" * 256)) == (
        "Host of 256 characters is longer than the maximum of 255"
    )
    assert creation_error(acl(host="")) == "Invalid empty host"

    def selecting(name=None, principal=None, host=None) -> AclBindingFilter:
        return AclBindingFilter(Res.ANY, name, Pat.MATCH, principal, host, Op.ANY, Perm.ANY)

    assert filter_error(selecting("n" * 1024, "p" * 1024, "h" * 255)) is None
    assert filter_error(selecting()) is None
    assert filter_error(selecting(name="n" * 1025)) == (
        "Resource name filter of 1025 characters is longer than the maximum of 1024"
    )
    assert filter_error(selecting(principal="p" * 1025)) == (
        "Principal filter of 1025 characters is longer than the maximum of 1024"
    )
    assert filter_error(selecting(host="h" * 256)) == (
        "Host filter of 256 characters is longer than the maximum of 255"
    )


def test_the_authorizer_is_configured_as_kafkas() -> None:
    def config(**broker: Any) -> Any:
        return lambda name: broker.get(name, BROKER_DEFAULTS[name])

    assert authorizer_for(config(), dict) is None
    auth = authorizer_for(
        config(
            **{
                "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                "super.users": " User:admin ; User:ops;",
                "allow.everyone.if.no.acl.found": True,
            }
        ),
        dict,
    )
    assert auth is not None
    assert auth.super_users == {"User:admin", "User:ops"} and auth.allow_if_no_acl
    with pytest.raises(ConfigError, match="authorizer.class.name"):
        authorizer_for(config(**{"authorizer.class.name": "com.example.Mine"}), dict)
