"""Fixtures the unit tests share."""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor

import pytest


@pytest.fixture(scope="session")
def workers() -> Iterator[ProcessPoolExecutor | None]:
    """Two processes for the Raft simulation's schedules on a machine with two cores or
    more: the suite runs one test at a time and leaves the other core idle."""
    if (os.cpu_count() or 1) < 2:
        yield None
        return
    pool = ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("spawn"))
    yield pool
    pool.shutdown(cancel_futures=True)
