"""Producer ids this node hands out (InitProducerId, with or without a transactional id),
from blocks the controller reserves for it: ids are unique in the cluster without a
controller round trip per producer."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

BLOCK = 1000


class ProducerIds:
    def __init__(self, reserve: Callable[[int], Awaitable[int]]) -> None:
        """reserve(n): the first of n ids the controller set aside for this node; it raises
        (ControllerUnavailable) when the controller cannot be reached."""
        self._reserve = reserve
        self._next, self._end = 0, 0

    async def allocate(self) -> int:
        if self._next >= self._end:
            first = await self._reserve(BLOCK)
            if self._next >= self._end:  # nobody refilled it meanwhile
                self._next, self._end = first, first + BLOCK
        pid = self._next
        self._next += 1
        return pid
