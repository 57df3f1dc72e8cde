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
from raftlog.heap import collection_paused

# The longest one slice of per-entry checks holds the loop (a tenth of the shortest election
# timeout, 0.5 s), and how many entries run between looks at the clock.
SLICE_S = 0.005
_CLOCK_EVERY = 64
# Entries past which a request's own work goes to a thread: a hand-off costs about 0.1 ms,
# what a small request's whole answer costs on the loop.
LARGE = 1000

T = TypeVar("T")
R = TypeVar("R")
P = ParamSpec("P")


async def sliced(items: Iterable[T]) -> AsyncIterator[T]:
    """The items, the loop handed back (a bare yield, no timer) each time the consumer's work
    on them has run for SLICE_S."""
    deadline = time.perf_counter() + SLICE_S
    for i, item in enumerate(items, 1):
        yield item
        if i % _CLOCK_EVERY == 0 and time.perf_counter() >= deadline:
            await asyncio.sleep(0)
            deadline = time.perf_counter() + SLICE_S


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
