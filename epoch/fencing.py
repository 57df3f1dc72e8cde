"""The one leader-epoch check every API that carries an epoch goes through (KIP-320)."""

from kio.schema.errors import ErrorCode

from epoch import NO_EPOCH


def check_leader_epoch(client_epoch: int, current_epoch: int) -> ErrorCode:
    """Kafka checks the epoch before leadership: an older client epoch is fenced (74), a newer
    one means this replica has not caught up with the election the client already saw (75)."""
    if client_epoch == NO_EPOCH:
        return ErrorCode.none
    if client_epoch < current_epoch:
        return ErrorCode.fenced_leader_epoch
    if client_epoch > current_epoch:
        return ErrorCode.unknown_leader_epoch
    return ErrorCode.none
