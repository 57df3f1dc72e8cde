"""What writing new page cache costs this machine: every byte a broker writes to its log
lands in the page cache first, so that cost is part of every produce figure.

On a VM whose balloon device reports free memory to the host (virtio-balloon free page
reporting), a guest page the host has taken back costs a host-side fault the first time it is
touched again: on the 2-core bench VM of issue 45, a new 1 GiB file cost 5.1 ms of CPU per MB
while one written into just-freed pages cost 0.17. raftlog3 writes every byte three times
(one copy per replica), Tansu's memory engine once, so such a machine moves the raftlog3/Tansu
ratio by itself. The figure goes into the report's header so a reader can tell."""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

CHUNK = 1 << 20
# A full bench writes GBs, past any memory just freed; --quick (and the smoke test in CI)
# only checks the figure is there.
FULL_MB, QUICK_MB = 1024, 64


def write_cost_ms_per_mb(directory: Path | None, megabytes: int) -> float:
    """CPU milliseconds (user + system) per MB of writing `megabytes` to a new file in 1 MiB
    writes, no fsync: the page-cache side of a broker's log append."""
    chunk = os.urandom(CHUNK)
    fd, name = tempfile.mkstemp(prefix="bench-page-cache-", dir=directory)
    try:
        # process_time, not os.times: 64 MiB into just-freed pages take ~10 ms, one tick of
        # os.times, which then measured 0 (the smoke test's failure in a CI-like run)
        before = time.process_time()
        for _ in range(megabytes):
            os.write(fd, chunk)
        spent = time.process_time() - before
    finally:
        os.close(fd)
        os.unlink(name)
    return 1000 * spent / (megabytes * CHUNK / 1e6)
