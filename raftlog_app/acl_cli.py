"""`raftlog acl add|list|remove`: Kafka's ACLs, managed as kafka-acls.sh manages them, over the
Kafka protocol (kafka-python's KafkaAdminClient: CreateAcls, DescribeAcls, DeleteAcls).

`add` creates one ACL per principal, host, operation and resource given; `list` shows the ACLs
a filter matches; `remove` deletes the ACLs `add` would have made from the same options, or,
given no principal, every ACL on the resources."""

from __future__ import annotations

import argparse
import itertools
import sys
from typing import Any, TextIO

from raftlog.security.acl import CLUSTER_NAME, WILDCARD
from raftlog_app import client_config
from raftlog_app.kafka_command import admin_call, table

CLIENT_ID = "raftlog-acl"
# kafka-acls.sh's names of operations (any case is taken, as it does)
OPERATIONS = (
    "All",
    "Read",
    "Write",
    "Create",
    "Delete",
    "Alter",
    "Describe",
    "ClusterAction",
    "DescribeConfigs",
    "AlterConfigs",
    "IdempotentWrite",
    "CreateTokens",
    "DescribeTokens",
)
PATTERN_TYPES = ("literal", "prefixed", "any", "match")


def admin_client(bootstrap: str) -> Any:
    """The one place the command's Kafka client is made (tests replace it)."""
    return client_config.admin(bootstrap, CLIENT_ID)


def add_parsers(sub: Any) -> list[argparse.ArgumentParser]:
    """`raftlog acl ...`; returns the action parsers (the caller adds --bootstrap/--data)."""
    acl = sub.add_parser("acl", help="add, list and remove ACLs (authorization)")
    acl_sub = acl.add_subparsers(metavar="ACTION", required=True)
    add = acl_sub.add_parser("add", help="add ACLs (as kafka-acls --add)")
    listing = acl_sub.add_parser("list", help="list ACLs (as kafka-acls --list)")
    remove = acl_sub.add_parser("remove", help="remove ACLs (as kafka-acls --remove)")
    for parser in (add, listing, remove):
        resources = parser.add_argument_group("resources (any number; none: all, for list)")
        resources.add_argument("--topic", action="append", default=[], metavar="NAME")
        resources.add_argument("--group", action="append", default=[], metavar="NAME")
        resources.add_argument("--transactional-id", action="append", default=[], metavar="ID")
        resources.add_argument("--cluster", action="store_true", help="the cluster resource")
        parser.add_argument(
            "--resource-pattern-type",
            type=str.lower,
            choices=PATTERN_TYPES[:2] if parser is add else PATTERN_TYPES,
            default="literal",
            help="literal (the default; the name '*' is every resource), prefixed; "
            "any (any pattern, this name) and match (what applies to the name) filter list and "
            "remove",
        )
    for parser in (add, remove):
        for kind in ("allow", "deny"):
            parser.add_argument(
                f"--{kind}-principal",
                action="append",
                default=[],
                metavar="PRINCIPAL",
                help="e.g. User:alice, User:* for everyone",
            )
            parser.add_argument(
                f"--{kind}-host",
                action="append",
                default=[],
                metavar="HOST",
                help=f"an IP address the {kind} ACLs apply from (default *: any)",
            )
        parser.add_argument(
            "--operation",
            action="append",
            default=[],
            type=_operation,
            metavar="OPERATION",
            help=f"one of {', '.join(OPERATIONS)} (default All)",
        )
    listing.add_argument("--principal", help="only the ACLs of this principal")
    add.set_defaults(run_acl=acl_add)
    listing.set_defaults(run_acl=acl_list)
    remove.set_defaults(run_acl=acl_remove)
    return [add, listing, remove]


def _operation(text: str) -> str:
    """kafka-python's name of the operation kafka-acls.sh calls `text` (ClusterAction is
    CLUSTER_ACTION)."""
    for name in OPERATIONS:
        if text.lower().replace("_", "") == name.lower():
            return "".join(f"_{c}" if c.isupper() else c for c in name).lstrip("_").upper()
    raise argparse.ArgumentTypeError(f"unknown operation {text!r}; one of {', '.join(OPERATIONS)}")


def _resources(args: argparse.Namespace) -> list[tuple[str, str]]:
    """(kafka-python ResourceType name, resource name) of every resource named."""
    found = [("TOPIC", name) for name in args.topic]
    found += [("GROUP", name) for name in args.group]
    found += [("TRANSACTIONAL_ID", name) for name in args.transactional_id]
    if args.cluster:
        found.append(("CLUSTER", CLUSTER_NAME))
    return found


def _acls(args: argparse.Namespace) -> list[Any]:
    """The ACLs the options describe, as kafka-acls.sh makes them: every principal with every
    host of its kind (or *), operation (or All) and resource."""
    from kafka.admin import (
        ACL,
        ACLOperation,
        ACLPermissionType,
        ACLResourcePatternType,
        ResourcePattern,
        ResourceType,
    )

    resources = _resources(args)
    if not resources:
        raise _Usage(
            "name at least one resource: --topic, --group, --transactional-id or --cluster"
        )
    operations = [ACLOperation[name] for name in args.operation or ["ALL"]]
    acls = []
    for kind in ("allow", "deny"):
        principals = getattr(args, f"{kind}_principal")
        hosts = getattr(args, f"{kind}_host") or [WILDCARD]
        permission = ACLPermissionType.ALLOW if kind == "allow" else ACLPermissionType.DENY
        for principal, host, operation, (resource_type, name) in itertools.product(
            principals, hosts, operations, resources
        ):
            acls.append(
                ACL(
                    principal=principal,
                    host=host,
                    operation=operation,
                    permission_type=permission,
                    resource_pattern=ResourcePattern(
                        ResourceType[resource_type],
                        name,
                        ACLResourcePatternType[args.resource_pattern_type.upper()],
                    ),
                )
            )
    return acls


class _Usage(Exception):
    """The options do not say what to do."""


def acl_add(bootstrap: str, args: argparse.Namespace, out: TextIO = sys.stdout) -> int:
    try:
        acls = _acls(args)
        if not acls:
            raise _Usage("name at least one --allow-principal or --deny-principal")
    except _Usage as e:
        print(f"raftlog: {e}", file=sys.stderr)
        return 2
    result = admin_call(
        lambda: admin_client(bootstrap), lambda a: a.create_acls(acls), "cannot add ACLs"
    )
    if result is None:
        return 1
    for acl in result["succeeded"]:
        print(f"added {_describe(acl)}", file=out)
    for error in result["failed"]:
        print(f"raftlog: an ACL was refused: {error.__name__}", file=sys.stderr)
    return 1 if result["failed"] else 0


def acl_list(bootstrap: str, args: argparse.Namespace, out: TextIO = sys.stdout) -> int:
    def described(admin: Any) -> list[Any]:
        acls: list[Any] = []
        for acl_filter in _filters(args, args.principal, listing=True):
            found, _ = admin.describe_acls(acl_filter)
            acls.extend(a for a in found if a not in acls)
        return acls

    acls = admin_call(lambda: admin_client(bootstrap), described, "cannot list ACLs")
    if acls is None:
        return 1
    rows = [["PRINCIPAL", "HOST", "OPERATION", "PERMISSION", "RESOURCE", "NAME", "PATTERN"]]
    for acl in sorted(acls, key=_row):
        rows.append(_row(acl))
    table(rows, out)
    return 0


def acl_remove(bootstrap: str, args: argparse.Namespace, out: TextIO = sys.stdout) -> int:
    try:
        if args.allow_principal or args.deny_principal:
            filters = _acls(args)  # an ACL is a filter that matches itself
        else:
            if not _resources(args):
                raise _Usage("name the resources to remove every ACL of, or the ACLs")
            filters = _filters(args, None, listing=False)
    except _Usage as e:
        print(f"raftlog: {e}", file=sys.stderr)
        return 2
    results = admin_call(
        lambda: admin_client(bootstrap), lambda a: a.delete_acls(filters), "cannot remove ACLs"
    )
    if results is None:
        return 1
    failed = False
    for _, removed, error in results:
        if error.errno != 0:
            print(f"raftlog: cannot remove ACLs: {error.__name__}", file=sys.stderr)
            failed = True
        for acl in removed:
            print(f"removed {_describe(acl)}", file=out)
    return 1 if failed else 0


def _filters(args: argparse.Namespace, principal: str | None, listing: bool) -> list[Any]:
    """One filter per resource named; for list, one for every ACL when none is."""
    from kafka.admin import (
        ACLFilter,
        ACLOperation,
        ACLPermissionType,
        ACLResourcePatternType,
        ResourcePatternFilter,
        ResourceType,
    )

    pattern_name = args.resource_pattern_type
    resources: list[tuple[str, str | None]] = list(_resources(args))
    if not resources and listing:  # every ACL
        resources, pattern_name = [("ANY", None)], "any"
    return [
        ACLFilter(
            principal=principal,
            host=None,
            operation=ACLOperation.ANY,
            permission_type=ACLPermissionType.ANY,
            resource_pattern=ResourcePatternFilter(
                ResourceType[resource_type], name, ACLResourcePatternType[pattern_name.upper()]
            ),
        )
        for resource_type, name in resources
    ]


def _row(acl: Any) -> list[str]:
    pattern = acl.resource_pattern
    return [
        acl.principal,
        acl.host,
        acl.operation.name,
        acl.permission_type.name,
        pattern.resource_type.name,
        pattern.resource_name,
        pattern.pattern_type.name,
    ]


def _describe(acl: Any) -> str:
    principal, host, operation, permission, kind, name, pattern = _row(acl)
    return f"{permission} {principal} {operation} on {kind} {name} ({pattern}) from {host}"
