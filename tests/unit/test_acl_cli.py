"""`raftlog acl`'s options as kafka-acls.sh reads them: every principal with every host of its
kind, operation and resource; remove without a principal means every ACL of the resources;
list without a resource means every ACL."""

from __future__ import annotations

import pytest
from kafka.admin import ACLOperation, ACLPermissionType, ACLResourcePatternType, ResourceType

from raftlog_app import acl_cli
from raftlog_app.cli import _parser


def parse(*argv: str):
    return _parser().parse_args(["acl", *argv])


def rows(acls) -> list[list[str]]:
    return sorted(acl_cli._row(a) for a in acls)


def test_add_makes_every_combination_as_kafka_acls_does() -> None:
    args = parse(
        "add",
        "--allow-principal",
        "User:a",
        "--allow-principal",
        "User:b",
        "--allow-host",
        "10.0.0.1",
        "--deny-principal",
        "User:*",
        "--operation",
        "read",
        "--operation",
        "ClusterAction",
        "--topic",
        "t",
        "--cluster",
        "--resource-pattern-type",
        "PREFIXED",
    )
    made = rows(acl_cli._acls(args))
    assert len(made) == 3 * 2 * 2  # principals x operations x resources (one host each)
    assert [
        "User:a",
        "10.0.0.1",
        "CLUSTER_ACTION",
        "ALLOW",
        "CLUSTER",
        "kafka-cluster",
        "PREFIXED",
    ] in made
    assert ["User:*", "*", "READ", "DENY", "TOPIC", "t", "PREFIXED"] in made
    only_all = acl_cli._acls(parse("add", "--allow-principal", "User:a", "--group", "g"))
    assert [(a.operation, a.permission_type, a.host) for a in only_all] == [
        (ACLOperation.ALL, ACLPermissionType.ALLOW, "*")
    ]


def test_filters_of_list_and_remove() -> None:
    (every,) = acl_cli._filters(parse("list"), None, listing=True)
    assert every.resource_pattern.resource_type == ResourceType.ANY
    assert every.resource_pattern.pattern_type == ACLResourcePatternType.ANY
    assert every.operation == ACLOperation.ANY and every.principal is None
    topic, group = acl_cli._filters(
        parse("list", "--topic", "t", "--group", "g", "--resource-pattern-type", "match"),
        "User:a",
        listing=True,
    )
    assert (topic.resource_pattern.resource_name, topic.principal) == ("t", "User:a")
    assert group.resource_pattern.pattern_type == ACLResourcePatternType.MATCH
    (literal,) = acl_cli._filters(parse("remove", "--topic", "t"), None, listing=False)
    assert literal.resource_pattern.pattern_type == ACLResourcePatternType.LITERAL


def test_refused_options() -> None:
    with pytest.raises(SystemExit):
        parse("add", "--operation", "Fly", "--topic", "t")
    with pytest.raises(SystemExit):
        parse("add", "--resource-pattern-type", "match", "--topic", "t")
    assert acl_cli.acl_add("127.0.0.1:1", parse("add", "--topic", "t")) == 2  # no principal
    assert acl_cli.acl_add("127.0.0.1:1", parse("add", "--allow-principal", "User:a")) == 2
    assert acl_cli.acl_remove("127.0.0.1:1", parse("remove")) == 2  # nothing named
