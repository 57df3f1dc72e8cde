"""The Kafka APIs this listener serves, one module per API. Each module exports API_KEY,
MIN_VERSION, MAX_VERSION and `async def handle(ctx, request)`; ApiVersions advertises exactly
the ranges registered here, so a version is served if and only if it is listed."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from kafka_api.context import RequestContext
from kafka_api.handlers import (
    add_offsets_to_txn,
    add_partitions_to_txn,
    alter_configs,
    alter_partition_reassignments,
    alter_replica_log_dirs,
    alter_user_scram_credentials,
    api_versions,
    create_acls,
    create_partitions,
    create_topics,
    delete_acls,
    delete_groups,
    delete_records,
    delete_topics,
    describe_acls,
    describe_cluster,
    describe_configs,
    describe_groups,
    describe_log_dirs,
    describe_producers,
    describe_quorum,
    describe_topic_partitions,
    describe_transactions,
    describe_user_scram_credentials,
    elect_leaders,
    end_txn,
    fetch,
    find_coordinator,
    heartbeat,
    incremental_alter_configs,
    init_producer_id,
    join_group,
    leave_group,
    list_groups,
    list_offsets,
    list_partition_reassignments,
    list_transactions,
    metadata,
    offset_commit,
    offset_delete,
    offset_fetch,
    offset_for_leader_epoch,
    produce,
    sasl_authenticate,
    sasl_handshake,
    share_acknowledge,
    share_fetch,
    share_group_describe,
    share_group_heartbeat,
    sync_group,
    txn_offset_commit,
    write_txn_markers,
)


class ApiHandler(Protocol):
    API_KEY: int
    MIN_VERSION: int
    MAX_VERSION: int

    async def handle(self, ctx: RequestContext, request: Any) -> Any:
        """The kio response entity, or one the handler encoded off the loop (codec.Encoded),
        or None when the request gets no response."""


# A list typed ApiHandler, so mypy checks each module against the protocol (its constants
# and `handle`'s signature); a tuple or dict of modules would be taken as ModuleType, whose
# attributes are all Any, and pass unchecked.
_MODULES: list[ApiHandler] = [
    add_offsets_to_txn,
    add_partitions_to_txn,
    alter_partition_reassignments,
    alter_configs,
    alter_replica_log_dirs,
    alter_user_scram_credentials,
    api_versions,
    create_acls,
    create_partitions,
    create_topics,
    delete_acls,
    delete_groups,
    delete_records,
    delete_topics,
    describe_acls,
    describe_cluster,
    describe_configs,
    describe_groups,
    describe_log_dirs,
    describe_producers,
    describe_quorum,
    describe_topic_partitions,
    describe_transactions,
    describe_user_scram_credentials,
    elect_leaders,
    end_txn,
    fetch,
    find_coordinator,
    heartbeat,
    incremental_alter_configs,
    init_producer_id,
    join_group,
    leave_group,
    list_groups,
    list_offsets,
    list_partition_reassignments,
    list_transactions,
    metadata,
    offset_commit,
    offset_delete,
    offset_fetch,
    offset_for_leader_epoch,
    produce,
    sasl_authenticate,
    sasl_handshake,
    share_acknowledge,
    share_fetch,
    share_group_describe,
    share_group_heartbeat,
    sync_group,
    txn_offset_commit,
    write_txn_markers,
]

HANDLERS: dict[int, ApiHandler] = {module.API_KEY: module for module in _MODULES}

# APIs whose request starts with a list that a request may be refused for the length of,
# whole: the server asks these with that length before decoding the request, and answers
# with what they return instead (a million-entry CreateAcls is never decoded).
RefusalUnread = Callable[[RequestContext, int], Awaitable[Any] | None]
REFUSAL_UNREAD: dict[int, RefusalUnread] = {
    create_acls.API_KEY: create_acls.refusal_unread,
    delete_acls.API_KEY: delete_acls.refusal_unread,
}


def supported_versions() -> list[tuple[int, int, int]]:
    """(api key, min version, max version) for every served API, in api key order."""
    return sorted((key, h.MIN_VERSION, h.MAX_VERSION) for key, h in HANDLERS.items())


api_versions.advertise(supported_versions())


def expects_response(api_key: int, request: Any) -> bool:
    """Only Produce with acks=0 goes unanswered: the client does not read a response to it."""
    return api_key != produce.API_KEY or request.acks != 0
