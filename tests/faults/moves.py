"""The reassignment workload: partition moves and cancellations running through the faults.

A process of its own (`python -m tests.faults.moves ...`), like the producers, so its admin
calls (kafka-python's KafkaAdminClient: confluent-kafka's AdminClient has no reassignment
call) block nobody. Every partition of its topic (replication factor 2 on three nodes) moves
to another pair of nodes every `--interval` seconds or so; about one move in `--cancel-every`
is cancelled a moment after it starts. One JSON line per event: `start` (partition, from,
to), `finish` (the move is no longer listed by ListPartitionReassignments and Metadata shows
its target; seconds since its start), `gone` (unlisted, but Metadata has shown other
replicas for METADATA_LAG seconds), `cancel` (accepted), `error` (a call that failed: a fault). On SIGTERM it starts no
more moves and waits, up to `--settle` seconds, for those running to finish, then writes a
`done` line with the moves still listed: a move that never finishes once the faults healed
is an anomaly (the runner's `move_stuck`).
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import random
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

POLL = 0.5  # seconds between listings
# A move no longer listed whose replicas are not yet its target's may be read from a broker
# whose metadata lags the controller's (Kafka's brokers lag the same way): it counts as
# gone elsewhere only once the two have disagreed this long.
METADATA_LAG = 5.0


@dataclass
class Move:
    """A move this process started (or found listed after a call whose answer was lost)."""

    source: list[int]
    target: list[int]
    started: float
    cancel_at: float | None = None
    unlisted_at: float | None = None  # first seen unlisted with replicas not its target's


def run(args: argparse.Namespace) -> int:
    """Start, cancel and watch moves until SIGTERM; then drain (bounded) and say what is left."""
    from kafka import TopicPartition
    from kafka.admin import KafkaAdminClient

    stop = {"flag": False}

    def on_signal(signum: int, frame: object) -> None:
        stop["flag"] = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    rng = random.Random(args.seed)
    nodes = [int(n) for n in args.nodes.split(",")]
    pairs = [list(p) for p in itertools.combinations(nodes, 2)]
    tps = [TopicPartition(args.topic, p) for p in range(args.partitions)]
    out = open(args.out, "a", encoding="utf-8")  # noqa: SIM115 - closed below

    def write(**row: Any) -> None:
        out.write(json.dumps({"t": time.time(), **row}, separators=(",", ":")) + "\n")
        out.flush()

    admin: Any = None
    moving: dict[int, Move] = {}
    # The next time each partition may start a move: spread over the first interval.
    due = {p: time.time() + rng.uniform(0, args.interval) for p in range(args.partitions)}
    parent = os.getppid()
    write(kind="begin", pairs=pairs, interval=args.interval, cancel_every=args.cancel_every)
    drain_deadline: float | None = None
    listed: dict[int, dict[str, list[int]]] = {}
    while True:
        now = time.time()
        if (stop["flag"] or os.getppid() != parent) and drain_deadline is None:
            drain_deadline = now + args.settle
            write(kind="draining", running=sorted(moving))
        if drain_deadline is not None and (not moving or now > drain_deadline):
            break
        try:
            if admin is None:
                admin = KafkaAdminClient(bootstrap_servers=args.bootstrap, client_id="mover")
            found = admin.list_partition_reassignments(tps)
            listed = {tp.partition: v for tp, v in found.items()}
            replicas = _replicas(admin, args.topic)
        except Exception as exc:  # noqa: BLE001 - a fault: note it, try again
            write(kind="error", call="list", error=repr(exc)[:300])
            _close(admin)
            admin = None
            time.sleep(POLL)
            continue
        now = time.time()
        for p, m in list(moving.items()):
            if p in listed:
                m.unlisted_at = None
            elif p in replicas:
                sorted_now = sorted(replicas.get(p) or [])
                outcome = "finish" if sorted_now == sorted(m.target) else "gone"
                if outcome == "gone":
                    m.unlisted_at = m.unlisted_at or now
                    if now - m.unlisted_at < METADATA_LAG:
                        continue
                write(
                    kind=outcome,
                    partition=p,
                    source=m.source,
                    target=m.target,
                    replicas=replicas.get(p),
                    seconds=round(now - m.started, 3),
                )
                del moving[p]
                due[p] = now + rng.uniform(0.5, 1.5) * args.interval
        for p, v in listed.items():
            if p not in moving:  # started by a call whose answer was lost
                target = [r for r in v["replicas"] if r not in v["removing_replicas"]]
                moving[p] = Move(v["removing_replicas"], target, now)
                write(kind="adopt", partition=p, listing=v)
        calls: dict[Any, list[int] | None] = {}
        for p, m in moving.items():
            if m.cancel_at is not None and now >= m.cancel_at:
                calls[tps[p]] = None
        if drain_deadline is None:
            for p in range(args.partitions):
                if p in moving or now < due[p] or not replicas.get(p):
                    continue
                current = sorted(replicas[p])
                target = list(rng.choice([q for q in pairs if q != current]))
                rng.shuffle(target)  # the leader is preferred first: vary it
                calls[tps[p]] = target
        if calls:
            try:
                answer = admin.alter_partition_reassignments(calls)
            except Exception as exc:  # noqa: BLE001 - a fault: the listing will tell
                write(
                    kind="error",
                    call="alter",
                    error=repr(exc)[:300],
                    calls={tp.partition: t for tp, t in calls.items()},
                )
                _close(admin)
                admin = None
                time.sleep(POLL)
                continue
            for tp, want in calls.items():
                p, err = tp.partition, answer.get(tp, "no answer")
                if want is None:  # a cancellation
                    m = moving.pop(p)
                    if err is None:
                        write(
                            kind="cancel",
                            partition=p,
                            source=m.source,
                            target=m.target,
                            seconds=round(time.time() - m.started, 3),
                        )
                        due[p] = time.time() + rng.uniform(0.5, 1.5) * args.interval
                    else:  # NO_REASSIGNMENT_IN_PROGRESS: it finished first; the listing says
                        m.cancel_at = None
                        moving[p] = m
                        write(kind="cancel_refused", partition=p, error=str(err))
                    continue
                if err is not None:
                    write(kind="refused", partition=p, target=want, error=str(err))
                    due[p] = time.time() + args.interval
                    continue
                m = Move(sorted(replicas[p]), want, now)
                if rng.randrange(args.cancel_every) == 0:
                    m.cancel_at = now + rng.uniform(0.2, 2.0)
                moving[p] = m
                write(
                    kind="start",
                    partition=p,
                    source=m.source,
                    target=want,
                    cancel=m.cancel_at is not None,
                )
        time.sleep(POLL)
    write(
        kind="done",
        stuck={
            str(p): {
                "source": m.source,
                "target": m.target,
                "seconds": round(time.time() - m.started, 1),
                "listing": listed.get(p),
            }
            for p, m in moving.items()
        },
    )
    _close(admin)
    out.close()
    return 0


def _replicas(admin: Any, topic: str) -> dict[int, list[int]]:
    """{partition: replicas} as Metadata shows them (the full set while a partition moves)."""
    [desc] = admin.describe_topics([topic])
    return {
        int(p["partition_index"]): [int(r) for r in p["replica_nodes"]]
        for p in desc["partitions"]
        if p.get("replica_nodes")  # a partition without a leader still lists them
    }


def _close(admin: Any) -> None:
    if admin is not None:
        with contextlib.suppress(Exception):  # closing a client a fault broke
            admin.close()


def start_mover(
    bootstrap: str,
    topic: str,
    partitions: int,
    out: Path,
    interval: float,
    settle: float,
    seed: int,
) -> subprocess.Popen[bytes]:
    """The mover process on the moves' topic; its events go to `out/moves.jsonl`."""
    argv = [
        sys.executable,
        *("-m", "tests.faults.moves", "--bootstrap", bootstrap, "--topic", topic),
        *("--partitions", str(partitions), "--out", str(out / "moves.jsonl")),
        *("--interval", str(interval), "--settle", str(settle), "--seed", str(seed)),
    ]
    with open(out / "moves.stderr.log", "ab") as log:
        return subprocess.Popen(
            argv,
            cwd=Path(__file__).resolve().parents[2],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def summarize(path: Path) -> dict[str, Any]:
    """The run's figures from the mover's file: moves started, finished, cancelled, how long
    a finish took, and those left running when the mover gave up waiting."""
    rows = []
    if path.exists():
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                rows.append(json.loads(line))
    count = {
        k: sum(r["kind"] == k for r in rows)
        for k in (
            "start",
            "finish",
            "cancel",
            "adopt",
            "gone",
            "refused",
            "cancel_refused",
            "error",
        )
    }
    times = sorted(r["seconds"] for r in rows if r["kind"] == "finish")
    done = next((r for r in rows if r["kind"] == "done"), None)

    def q(f: float) -> float | None:
        return round(times[min(len(times) - 1, int(f * len(times)))], 2) if times else None

    return {
        "started": count["start"],
        "adopted": count["adopt"],
        "finished": count["finish"],
        "cancelled": count["cancel"],
        "gone_elsewhere": count["gone"],
        "refused": count["refused"],
        "cancel_refused": count["cancel_refused"],
        "call_errors": count["error"],
        "finish_s": {"p50": q(0.5), "p95": q(0.95), "max": times[-1] if times else None},
        "stuck": None if done is None else done["stuck"],
        "drained": done is not None,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--partitions", type=int, required=True)
    ap.add_argument("--nodes", default="1,2,3")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument(
        "--interval", type=float, default=5.0, help="seconds between a partition's moves"
    )
    ap.add_argument("--cancel-every", type=int, default=4, help="about one move in N is cancelled")
    ap.add_argument("--settle", type=float, default=180.0, help="bound on the final wait")
    ap.add_argument("--seed", type=int, default=0)
    return run(ap.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
