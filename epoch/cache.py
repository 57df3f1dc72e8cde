"""The leader epoch cache: (epoch, start offset) pairs, one per term present in the log.

Segments are kept per term, so the cache is read off the segment list rather than maintained
beside it; it is also written as Kafka's `leader-epoch-checkpoint` so tools and people can
read it the way they read Kafka's.
"""

from __future__ import annotations

import bisect
import logging
import os
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from epoch import NO_EPOCH

log = logging.getLogger(__name__)

# Checkpoints are written by one thread, in the order asked: a thousand-partition election
# storm rewrote a thousand of them, 2 ms each of the event loop while the filesystem was busy
# (issue 12). Nothing reads them back but tools and people.
_WRITER = ThreadPoolExecutor(1, thread_name_prefix="epoch-checkpoint")


class EpochCache:
    def __init__(self, checkpoint: Path) -> None:
        self._checkpoint = checkpoint
        self._epochs: list[int] = []
        self._starts: list[int] = []
        self._written: Future[None] | None = None  # the latest checkpoint write asked for

    def refresh(self, epochs: list[tuple[int, int]]) -> None:
        """Adopts the log's epochs; rewrites the checkpoint only when they changed."""
        new_epochs = [e for e, _ in epochs]
        new_starts = [s for _, s in epochs]
        unchanged = new_epochs == self._epochs and new_starts == self._starts
        if unchanged and self._written is not None:
            return
        self._epochs, self._starts = new_epochs, new_starts
        self._written = _WRITER.submit(_write_quietly, self._checkpoint, list(epochs))

    def flush(self) -> None:
        """Waits until the checkpoint on disk is the latest (before the directory goes)."""
        if self._written is not None:
            self._written.result()

    def entries(self) -> list[tuple[int, int]]:
        return list(zip(self._epochs, self._starts, strict=True))

    @property
    def latest_epoch(self) -> int:
        return self._epochs[-1] if self._epochs else NO_EPOCH

    def start_offset(self, epoch: int) -> int | None:
        i = bisect.bisect_left(self._epochs, epoch)
        if i < len(self._epochs) and self._epochs[i] == epoch:
            return self._starts[i]
        return None

    def end_offset_for(self, epoch: int, log_end_offset: int) -> tuple[int, int]:
        """OffsetForLeaderEpoch (KIP-101/279): where `epoch` ends in this log, and the largest
        epoch <= it that this log holds. A follower truncates to that offset."""
        if epoch == NO_EPOCH or not self._epochs or epoch > self._epochs[-1]:
            return NO_EPOCH, NO_EPOCH
        if epoch == self._epochs[-1]:
            return epoch, log_end_offset
        if epoch < self._epochs[0]:
            return epoch, self._starts[0]
        i = bisect.bisect_right(self._epochs, epoch) - 1
        return self._epochs[i], self._starts[i + 1]

    def epoch_for_offset(self, offset: int) -> int:
        """The epoch whose span holds `offset` (the largest with start <= offset)."""
        i = bisect.bisect_right(self._starts, offset) - 1
        return self._epochs[i] if i >= 0 else NO_EPOCH


def _write_quietly(path: Path, epochs: list[tuple[int, int]]) -> None:
    try:
        write_checkpoint(path, epochs)
    except OSError as exc:  # the partition was removed meanwhile, or the disk failed
        log.warning("%s: leader epoch checkpoint not written: %s", path, exc)


def write_checkpoint(path: Path, epochs: list[tuple[int, int]]) -> None:
    """Kafka's format: version line, count line, then `epoch startOffset` lines; written to a
    temporary file and renamed so a reader sees the old or the new one. Not fsynced: every
    open rewrites it from the segment list, which it only mirrors (an fsync per election cost
    a thousand-partition node seconds of its event loop, issue 12)."""
    lines = ["0", str(len(epochs))] + [f"{e} {s}" for e, s in epochs]
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("\n".join(lines) + "\n")
    os.replace(tmp, path)


def read_checkpoint(path: Path) -> list[tuple[int, int]]:
    lines = path.read_text().split("\n")
    if lines[0].strip() != "0":
        raise ValueError(f"{path}: unknown leader-epoch-checkpoint version {lines[0]!r}")
    count = int(lines[1])
    pairs = [line.split() for line in lines[2 : 2 + count]]
    return [(int(e), int(s)) for e, s in pairs]
