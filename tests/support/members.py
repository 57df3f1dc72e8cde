"""Share-group membership as a partition leader asks for it (ShareManager's is_member), for
unit tests whose subject is not membership: the coordinator knows every member."""

from __future__ import annotations

from raftlog.common.errors import ErrorCode


async def every_member(_group: str, _member: str) -> ErrorCode:
    return ErrorCode.none
