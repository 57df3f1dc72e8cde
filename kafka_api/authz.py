"""Authorization of requests (Kafka's AuthHelper): the one place handlers ask whether the
request's principal, from its host, may do an operation on a resource. Without an authorizer
every answer is "yes" after one None test, so an unsecured cluster's requests cost what they
did; with one, each answer is a cached decision (raftlog.security.authorizer.Authorizer)."""

from __future__ import annotations

from collections.abc import Iterable

from kafka_api.context import RequestContext
from raftlog.common.errors import ErrorCode
from raftlog.security.acl import (
    CLUSTER_NAME,
    SUPPORTED_OPERATIONS,
    AclOperation,
    ResourceType,
)

Op = AclOperation
Resource = ResourceType
CLUSTER = CLUSTER_NAME

# Kafka's messages for its authorization errors (Errors.*.message()).
DENIED_MESSAGES = {
    ErrorCode.topic_authorization_failed: "Topic authorization failed.",
    ErrorCode.group_authorization_failed: "Group authorization failed.",
    ErrorCode.cluster_authorization_failed: "Cluster authorization failed.",
    ErrorCode.transactional_id_authorization_failed: "Transactional Id authorization failed.",
}


def authorize(ctx: RequestContext, operation: Op, resource_type: Resource, name: str) -> bool:
    authorizer = ctx.broker.authorizer
    return authorizer is None or authorizer.authorize(
        ctx.principal, ctx.client_host, operation, resource_type, name
    )


def authorize_cluster(ctx: RequestContext, operation: Op) -> bool:
    return authorize(ctx, operation, Resource.CLUSTER, CLUSTER_NAME)


def authorized(
    ctx: RequestContext, operation: Op, resource_type: Resource, names: Iterable[str]
) -> set[str]:
    """The names the principal may do `operation` on (Kafka's filterByAuthorized)."""
    authorizer = ctx.broker.authorizer
    if authorizer is None:
        return set(names)
    principal, host = ctx.principal, ctx.client_host
    return {
        name
        for name in set(names)
        if authorizer.authorize(principal, host, operation, resource_type, name)
    }


def authorize_by_resource_type(ctx: RequestContext, operation: Op, resource_type: Resource) -> bool:
    """May the principal do `operation` on any resource of the type (KIP-679)?"""
    authorizer = ctx.broker.authorizer
    return authorizer is None or authorizer.authorize_by_resource_type(
        ctx.principal, ctx.client_host, operation, resource_type
    )


def authorized_operations(ctx: RequestContext, resource_type: Resource, name: str) -> int:
    """The bit field (1 << operation code) of the resource type's operations the principal
    may do, as Metadata, DescribeCluster and the group describes report it when asked; every
    operation without an authorizer."""
    authorizer = ctx.broker.authorizer
    bits = 0
    for operation in SUPPORTED_OPERATIONS[resource_type]:
        if authorizer is None or authorizer.authorize(
            ctx.principal, ctx.client_host, operation, resource_type, name
        ):
            bits |= 1 << operation
    return bits
