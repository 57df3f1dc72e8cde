"""Where a handler's work on a request of many entries runs, so that no request holds the
event loop for long, however many entries it names (issue 42: one DescribeTopicPartitions of
100,000 names held a node for 533 s).

Two kinds of work, two places:
- Checks of each entry that read what the loop owns (the authorizer's ACLs and its cache, the
  cluster's topics, a coordinator's state) are not safe in a thread, where the loop may change
  that state under them: they stay on the loop, but `sliced` hands the loop back whenever one
  slice of them has run for SLICE_S.
- Work on the request's own data and on what those checks found (sorting, counting repeats,
  building and encoding the answer) touches nothing the loop changes: for a request of more
  than LARGE entries it runs in a thread (`off_loop`, `answer`), with the collector's full
  passes paused as for a large request's decoding.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Iterable
from typing import Any, ParamSpec, TypeVar

from kafka_api.codec import encode_off_loop
from raftlog.common.heap import collection_paused

# The longest one slice of per-entry checks holds the loop (a hundredth of the shortest
# election timeout, 0.5 s).
SLICE_S = 0.005
# Entries past which a request's own work goes to a thread: a hand-off costs about 0.1 ms,
# what a small request's whole answer costs on the loop.
LARGE = 1000

T = TypeVar("T")
R = TypeVar("R")
J = TypeVar("J")
P = ParamSpec("P")


class Slices:
    """One slice clock for per-entry work on the loop, however many tasks share it (ElectLeaders'
    workers): once a slice is spent every one of them hands the loop back at its next entry,
    and the next slice starts when the first comes back."""

    def __init__(self) -> None:
        self._deadline = time.perf_counter() + SLICE_S
        self._slice = 0

    async def step(self) -> None:
        """After each entry: the loop handed back (a bare yield, no timer) once the slice is
        spent. A clock read costs about 50 ns, far less than any entry's checks."""
        if time.perf_counter() < self._deadline:
            return
        spent = self._slice
        await asyncio.sleep(0)
        if self._slice == spent:  # the first back after the loop's turn
            self._slice += 1
            self._deadline = time.perf_counter() + SLICE_S


async def sliced(items: Iterable[T]) -> AsyncIterator[T]:
    """The items, the loop handed back each time the consumer's work on them has run for
    SLICE_S."""
    slices = Slices()
    for item in items:
        yield item
        await slices.step()


async def by_topic(
    topics: Iterable[Any], judge: Callable[[Any], J]
) -> AsyncIterator[tuple[Any, Any, J]]:
    """(topic entry, partition entry, judge(topic entry)) for each partition a request names,
    sliced as `sliced` is; judge (its ACLs and lookups are the loop's) asked once per topic."""
    slices = Slices()
    for topic in topics:
        if not topic.partitions:
            continue
        judged = judge(topic)
        for partition in topic.partitions:
            yield topic, partition, judged
            await slices.step()


async def off_loop(count: int, work: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
    """work(*args, **kwargs), on the request's own data only: in a thread when the request has
    more than LARGE entries (`count`), else here."""
    if count <= LARGE:
        return work(*args, **kwargs)

    def paused() -> R:
        with collection_paused():
            return work(*args, **kwargs)

    return await asyncio.to_thread(paused)


async def answer(count: int, build: Callable[P, Any], *args: P.args, **kwargs: P.kwargs) -> Any:
    """The response build(*args, **kwargs) makes: built and encoded in a thread when the request
    has more than LARGE entries (`count`), else built here and encoded by the server. Whatever
    `build` reads must not change on the loop meanwhile (the request, values found for it)."""
    if count <= LARGE:
        return build(*args, **kwargs)
    return await encode_off_loop(build, *args, **kwargs)
