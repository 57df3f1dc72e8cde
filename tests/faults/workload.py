"""The workload: acks=all producers (confluent-kafka) in their own processes, and the parent's
view of what they were told.

Each producer is a separate process (`python -m tests.faults.workload ...`) so poll() keeps
being called whatever the fault runner is doing. It sends unique values `<name>:<seq>` to
partition seq % partitions at a bounded rate, with librdkafka's default timeouts (late
acknowledgements must be able to show), and writes one JSON line per delivery report to its
file: value, partition, offset, error, send and report time, leader epoch. It stops by
itself (time or count bound, or SIGTERM), flushes (bounded), purges what is left and writes
a final `done` line.

A transactional producer (`--transactional`) sends its values in transactions of
`--txn-size` records over the partitions, aborts every `--abort-every`th on purpose (once its
records are written, so the broker has something to abort), and writes one `txn` line per
transaction: its sequences and its outcome as the client saw it
(committed, aborted, or unknown: the commit failed in a way that leaves the coordinator's
decision open, so the transaction must be read whole or not at all).
"""

from __future__ import annotations

import argparse
import bisect
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from support.cluster import tail

REPO = Path(__file__).resolve().parents[2]
# how long a transaction to be aborted waits for its records (librdkafka's default
# transaction.timeout.ms, what commit_transaction gives its own flush)
ABORT_FLUSH_S = 60.0


# --------------------------------------------------------------------------- the producer process


class _Writer:
    """JSON lines to a file, flushed at most every 0.2 s (the parent tails the file)."""

    def __init__(self, f: TextIO) -> None:
        self.f = f
        self.last = 0.0

    def __call__(self, **row: Any) -> None:
        self.f.write(json.dumps(row, separators=(",", ":")) + "\n")

    def tick(self, force: bool = False) -> None:
        now = time.monotonic()
        if force or now - self.last > 0.2:
            self.f.flush()
            self.last = now


def _process(args: argparse.Namespace) -> tuple[dict[str, bool], TextIO, _Writer]:
    """A producer process's start: SIGTERM and SIGINT set stop["flag"]; its file's writer."""
    stop = {"flag": False}

    def on_signal(signum: int, frame: object) -> None:
        stop["flag"] = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    out = open(args.out, "a", encoding="utf-8")  # noqa: SIM115 - the caller closes it
    return stop, out, _Writer(out)


def produce(args: argparse.Namespace) -> int:
    """Produce until stopped or bounded; one line per delivery report."""
    from confluent_kafka import KafkaError, Producer

    stop, out, write = _process(args)
    conf = {
        "bootstrap.servers": args.bootstrap,
        "acks": "all",
        "enable.idempotence": args.idempotent,
        "client.id": args.name,
    }
    # librdkafka logs why it bumps its producer epoch (a bump re-numbers what is in
    # flight: the path by which a broker's answer could turn into duplicates); more
    # contexts (e.g. broker,topic,metadata) come from RAFTLOG_FAULTS_CLIENT_DEBUG.
    debug = [c for c in os.environ.get("RAFTLOG_FAULTS_CLIENT_DEBUG", "").split(",") if c]
    if args.idempotent:
        debug.append("eos")
    if debug:
        conf["debug"] = ",".join(dict.fromkeys(debug))
    fatal: list[str] = []

    def on_error(err: KafkaError) -> None:
        write(kind="error", t=time.time(), error=str(err), fatal=err.fatal())
        if err.fatal():
            fatal.append(str(err))

    write(kind="start", t=time.time(), name=args.name, idempotent=args.idempotent, conf=conf)
    conf["error_cb"] = on_error
    producer = Producer(conf)
    counts = {"sent": 0, "acked": 0, "failed": 0}

    def report(seq: int, sent: float) -> Callable[[KafkaError | None, Any], None]:
        """The delivery callback of message `seq`, sent at `sent`."""

        def cb(err: KafkaError | None, msg: Any) -> None:
            counts["failed" if err is not None else "acked"] += 1
            epoch = None
            with contextlib.suppress(Exception):
                epoch = msg.leader_epoch()
            write(
                kind="dr",
                seq=seq,
                value=f"{args.name}:{seq}",
                partition=msg.partition(),
                offset=msg.offset() if err is None else None,
                error=str(err) if err is not None else None,
                sent=sent,
                t=time.time(),
                epoch=epoch,
            )

        return cb

    start = time.monotonic()
    parent = os.getppid()
    seq = 0
    while not stop["flag"]:
        now = time.monotonic()
        if now - start > args.max_seconds or seq >= args.max_records:
            break
        if os.getppid() != parent:  # the runner died without stopping us: do not linger
            args.flush_timeout = min(args.flush_timeout, 5.0)
            break
        due = min(int((now - start) * args.rate), args.max_records)
        due = max(due, seq)
        while seq < due and seq - counts["acked"] - counts["failed"] < args.max_in_flight:
            value = f"{args.name}:{seq}".encode()
            try:
                producer.produce(
                    args.topic,
                    value=value,
                    partition=seq % args.partitions,
                    on_delivery=report(seq, time.time()),
                )
            except BufferError:
                break
            seq += 1
            counts["sent"] = seq
        if fatal:  # the idempotent producer is unusable: report its messages, start over
            producer.purge()
            producer.flush(5)
            fatal.clear()
            write(kind="restart", t=time.time())
            producer = Producer(conf)
        producer.poll(0.02)
        write.tick()
    write(kind="stopping", t=time.time(), sent=seq)
    write.tick(force=True)
    left = producer.flush(args.flush_timeout)
    if left:
        producer.purge()  # their callbacks report them failed (purged)
        producer.flush(10)
    write(kind="done", t=time.time(), unresolved=left, **counts)
    write.tick(force=True)
    out.close()
    return 0


def produce_transactions(args: argparse.Namespace) -> int:
    """Transactions until stopped or bounded; one `txn` line each."""
    from confluent_kafka import KafkaException, Producer

    stop, out, write = _process(args)
    conf: dict[str, Any] = {
        "bootstrap.servers": args.bootstrap,
        "transactional.id": args.name,
        "client.id": args.name,
    }
    write(kind="start", t=time.time(), name=args.name, transactional=True, conf=conf)
    conf["error_cb"] = lambda err: write(kind="error", t=time.time(), error=str(err))

    def retried(call: Callable[[], None], seconds: float = 120.0) -> None:
        """A transactional call again while it fails retriably (the coordinator moving)."""
        deadline = time.monotonic() + seconds
        while True:
            try:
                call()
                return
            except KafkaException as exc:
                if not exc.args[0].retriable() or time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    def fresh() -> Any:
        producer = Producer(conf)
        retried(producer.init_transactions)
        return producer

    producer = fresh()
    start = time.monotonic()
    parent = os.getppid()
    seq = count = 0
    outcomes: dict[str, int] = defaultdict(int)
    while not stop["flag"] and os.getppid() == parent:
        now = time.monotonic()
        if now - start > args.max_seconds or seq >= args.max_records:
            break
        if seq + args.txn_size > (now - start) * args.rate:
            producer.poll(0.02)
            write.tick()
            continue
        first, abort = seq, count % args.abort_every == args.abort_every - 1
        outcome, error = "committed", None
        try:
            producer.begin_transaction()
            for _ in range(args.txn_size):
                value = f"{args.name}:{seq}".encode()
                producer.produce(args.topic, value=value, partition=seq % args.partitions)
                seq += 1
            if abort:
                # The records written first (their partitions added to the transaction), so
                # the abort is of a transaction the coordinator holds: librdkafka adds
                # partitions only as it sends, and an abort right after produce() purged the
                # records unsent (no EndTxn, nothing for the broker to abort: none of f300's
                # 3,246 aborts reached it) or, when an AddPartitionsToTxn had gone out and
                # failed retriably, sent EndTxn(abort) for a transaction its coordinator never
                # started, which Kafka answers INVALID_TXN_STATE (librdkafka issue #4849)
                producer.flush(ABORT_FLUSH_S)
                retried(producer.abort_transaction)
                outcome = "aborted"
            else:
                retried(producer.commit_transaction)
        except KafkaException as exc:
            error = str(exc.args[0])
            outcome = "unknown"
            if exc.args[0].txn_requires_abort():
                try:
                    retried(producer.abort_transaction)
                    outcome = "aborted"
                except KafkaException:
                    pass
            if outcome == "unknown":  # fatal: a new producer fences the old one's transaction
                write(kind="restart", t=time.time(), error=error)
                producer = fresh()
        outcomes[outcome] += 1
        write(kind="txn", first=first, last=seq - 1, outcome=outcome, error=error, t=time.time())
        count += 1
        write.tick()
    write(kind="stopping", t=time.time(), sent=seq)
    write(kind="done", t=time.time(), unresolved=0, sent=seq, **outcomes)
    write.tick(force=True)
    out.close()
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--name", required=True)
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--partitions", type=int, required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--idempotent", action="store_true")
    ap.add_argument("--rate", type=float, default=250.0, help="records per second")
    ap.add_argument("--max-seconds", type=float, default=3600.0)
    ap.add_argument("--max-records", type=int, default=10_000_000)
    ap.add_argument("--max-in-flight", type=int, default=200_000)
    ap.add_argument("--flush-timeout", type=float, default=330.0)
    ap.add_argument("--transactional", action="store_true")
    ap.add_argument("--txn-size", type=int, default=10, help="records per transaction")
    ap.add_argument("--abort-every", type=int, default=4, help="every Nth transaction aborts")
    args = ap.parse_args(argv)
    return produce_transactions(args) if args.transactional else produce(args)


# --------------------------------------------------------------------------- the parent's side


@dataclass
class ProducerProc:
    """A running producer process and what its file said so far."""

    name: str
    idempotent: bool
    path: Path
    popen: subprocess.Popen
    _pos: int = 0
    _rest: str = ""
    done: dict[str, Any] | None = None
    errors: list[dict[str, Any]] = field(default_factory=list)

    def check_running(self) -> None:
        """Raise with its output if the producer process died before it was stopped."""
        if self.popen.poll() is not None and self.done is None:
            log = self.path.with_name(f"{self.name}.stderr.log")
            raise RuntimeError(
                f"producer {self.name} exited {self.popen.returncode}:\n{tail(log, 20)}"
            )

    def read_new(self) -> list[dict[str, Any]]:
        """Rows written since the last call (whole lines only)."""
        try:
            with open(self.path, encoding="utf-8") as f:
                f.seek(self._pos)
                chunk = f.read()
                self._pos = f.tell()
        except FileNotFoundError:
            return []
        text = self._rest + chunk
        lines = text.split("\n")
        self._rest = lines.pop()
        rows = []
        for line in lines:
            if not line:
                continue
            row = json.loads(line)
            if row.get("kind") == "done":
                self.done = row
            elif row.get("kind") == "error":
                self.errors.append(row)
            rows.append(row)
        return rows


def start_producer(
    name: str,
    idempotent: bool,
    bootstrap: str,
    topic: str,
    partitions: int,
    out_dir: Path,
    rate: float,
    max_seconds: float,
    flush_timeout: float,
    transactional: bool = False,
) -> ProducerProc:
    path = out_dir / f"{name}.jsonl"
    argv = [
        sys.executable,
        "-m",
        "tests.faults.workload",
        *("--name", name, "--bootstrap", bootstrap, "--topic", topic),
        *("--partitions", str(partitions), "--out", str(path), "--rate", str(rate)),
        *("--max-seconds", str(max_seconds), "--flush-timeout", str(flush_timeout)),
        *(["--idempotent"] if idempotent else []),
        *(["--transactional"] if transactional else []),
    ]
    log = open(out_dir / f"{name}.stderr.log", "ab")  # noqa: SIM115 - handed to the child
    popen = subprocess.Popen(
        argv,
        cwd=REPO,
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # a terminal Ctrl-C reaches the runner only; it stops us
    )
    log.close()
    return ProducerProc(name, idempotent, path, popen)


def stop_producers(procs: list[ProducerProc], timeout: float) -> list[str]:
    """SIGTERM (they flush, bounded, and exit); SIGKILL what is still running after
    `timeout`. Returns the names of producers that had to be killed."""
    for p in procs:
        with contextlib.suppress(ProcessLookupError):
            p.popen.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + timeout
    killed = []
    for p in procs:
        try:
            p.popen.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.popen.kill()
            p.popen.wait(10)
            killed.append(p.name)
    return killed


class AckTimeline:
    """Acknowledgement times per partition, fed from the producers' files as they grow:
    what the fault runner measures recovery with."""

    def __init__(self, procs: list[ProducerProc]) -> None:
        self.procs = procs
        self.acks: dict[int, list[float]] = defaultdict(list)

    def update(self) -> None:
        for p in self.procs:
            p.check_running()
            for row in p.read_new():
                if row.get("kind") == "dr" and row.get("error") is None:
                    times = self.acks[int(row["partition"])]
                    if times and row["t"] < times[-1]:
                        bisect.insort(times, row["t"])
                    else:
                        times.append(row["t"])

    def first_after(self, partition: int, t: float) -> float | None:
        times = self.acks.get(partition, [])
        i = bisect.bisect_left(times, t)
        return times[i] if i < len(times) else None

    def longest_gap(self, partition: int, start: float, end: float) -> float:
        """The longest time in [start, end] without an ack on the partition."""
        times = self.acks.get(partition, [])
        lo, hi = bisect.bisect_left(times, start), bisect.bisect_right(times, end)
        points = [start, *times[lo:hi], end]
        return max((b - a for a, b in zip(points, points[1:], strict=False)), default=0.0)


if __name__ == "__main__":
    sys.exit(main())
