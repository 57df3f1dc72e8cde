"""`python -m tests.faults.run --cycles N [--seed S] [--out DIR] [--rate R]`: the network
fault suite.

Three raftlog nodes, each in its own network namespace behind a bridge; two acks=all
producers (idempotent and not) in the root namespace; N cycles of fault, heal, recovery;
then everything healed, the producers flushed, the replicas caught up, every partition read
back, each node's epoch caches fetched, the nodes stopped and the epoch audit run; the
checker compares it all with what the producers were told. Prints one line per cycle and
the summary table; keeps the run directory (node data and logs, producers' delivery
reports, cycles, read-back, audit, summary.json/.md). Exit 0: no anomaly; 1: anomalies;
2: the suite could not run (not root, no namespaces or iptables: the reason is printed).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from support.cluster import raftlog_argv, wait_for

from raftlog_app.local_nodes import become_subreaper

from . import checker, faults, moves, netns, report
from .checker import Anomaly, ProducerInfo
from .moves import start_mover
from .nodes import Nodes, Statuses, agreed_leaders, caught_up, caught_up_hosted, max_terms
from .readback import read_back
from .workload import AckTimeline, ProducerProc, start_producer, stop_producers

TOPIC = "faults"
PRODUCERS = [("idem", True), ("plain", False)]
# The transactional producer has a topic of its own: its markers and aborted records leave
# offsets a read_committed readback does not return, which the checks of TOPIC count as gaps.
TXN_TOPIC, TXN_PRODUCER, TXN_PARTITIONS, TXN_RATE = "faults-txn", "txn", 6, 100.0
# The reassignment workload (--moves N): a topic of replication factor 2 whose partitions the
# mover (tests/faults/moves.py) moves between node pairs throughout, an idempotent producer
# writing to it, checked as TOPIC's producers are.
MOVES_TOPIC, MOVES_PRODUCER, MOVES_RATE = "faults-moves", "moves", 100.0
POLL = 0.25  # seconds between status polls during a cycle

Leaders = dict[int, tuple[int, int]]  # partition -> (leader, term) confirmed by a majority
Sample = tuple[float, Leaders]


@dataclass
class Options:
    cycles: int
    seed: int
    out: Path
    rate: float
    partitions: int
    fault_seconds: tuple[float, float]
    recovery_timeout: float
    flush_timeout: float
    audit: bool
    kinds: list[str] | None
    moves: int = 0
    move_interval: float = 5.0
    move_settle: float = 180.0
    recheck: Path | None = None


def parse_args(argv: list[str] | None) -> Options:
    ap = argparse.ArgumentParser(
        prog="python -m tests.faults.run", description=__doc__.split("\n\n")[0]
    )
    ap.add_argument("--cycles", type=int, default=300)
    ap.add_argument("--seed", type=int, default=None, help="default: random (printed)")
    ap.add_argument("--out", type=Path, default=None, help="run directory (default under /tmp)")
    ap.add_argument("--rate", type=float, default=250.0, help="records/s per producer")
    ap.add_argument("--partitions", type=int, default=3)
    ap.add_argument(
        "--fault-seconds",
        default="3,6",
        help="how long each fault lasts: MIN,MAX seconds (seeded random in between)",
    )
    ap.add_argument("--recovery-timeout", type=float, default=60.0)
    ap.add_argument(
        "--flush-timeout",
        type=float,
        default=330.0,
        help="bound on the producers' final flush (librdkafka's message timeout is 300 s)",
    )
    ap.add_argument(
        "--moves",
        type=int,
        default=0,
        metavar="N",
        help=f"reassignment workload: {MOVES_TOPIC}, N partitions of RF 2 moved between node "
        "pairs throughout, some moves cancelled, with a producer of its own (0: off)",
    )
    ap.add_argument(
        "--move-interval", type=float, default=5.0, help="seconds between a partition's moves"
    )
    ap.add_argument(
        "--move-settle",
        type=float,
        default=180.0,
        help="bound on the wait, after the faults healed, for the running moves to finish",
    )
    ap.add_argument("--no-audit", action="store_true", help="skip `raftlog audit` (debugging)")
    ap.add_argument("--kinds", default=None, help="comma-separated subset of the fault kinds")
    ap.add_argument(
        "--recheck",
        type=Path,
        default=None,
        metavar="DIR",
        help="only run the checker again over a kept run directory (no cluster)",
    )
    a = ap.parse_args(argv)
    seed = a.seed if a.seed is not None else int.from_bytes(os.urandom(4), "big")
    lo, _, hi = a.fault_seconds.partition(",")
    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    out = a.out or Path("/tmp/raftlog-faults") / f"{stamp}-{os.getpid()}"
    return Options(
        cycles=a.cycles,
        seed=seed,
        out=out.resolve(),
        rate=a.rate,
        partitions=a.partitions,
        fault_seconds=(float(lo), float(hi or lo)),
        recovery_timeout=a.recovery_timeout,
        flush_timeout=a.flush_timeout,
        audit=not a.no_audit,
        kinds=a.kinds.split(",") if a.kinds else None,
        moves=a.moves,
        move_interval=a.move_interval,
        move_settle=a.move_settle,
        recheck=a.recheck,
    )


class Interrupted(BaseException):
    """SIGTERM: unwind like Ctrl-C, so the finally blocks clean up."""


def _on_sigterm(signum: int, frame: object) -> None:
    raise Interrupted(f"signal {signum}")


class Runner:
    """One fault run: setup, workload, cycles, the final check; teardown() always."""

    def __init__(self, opts: Options) -> None:
        self.o = opts
        self.rng = random.Random(opts.seed)
        self.net: netns.Net | None = None
        self.nodes: Nodes | None = None
        self.producers: list[ProducerProc] = []
        self.mover: subprocess.Popen | None = None
        self.timeline: AckTimeline | None = None
        self.cycles: list[dict[str, Any]] = []
        self.liveness: list[Anomaly] = []
        self.netem = False
        self.t0 = time.time()

    # ----------------------------------------------------------------- setup

    def setup(self) -> None:
        o = self.o
        o.out.mkdir(parents=True, exist_ok=True)
        (o.out / "producers").mkdir(exist_ok=True)
        removed = netns.cleanup_leftovers()
        if removed:
            print(f"removed leftovers of earlier runs: {', '.join(removed)}", flush=True)
        self.netem = netns.netem_available()
        pid = os.getpid()
        self.net = netns.Net(pid, netns.pick_subnet(pid))
        self.net.create()
        self.net.check_connectivity()
        self.nodes = Nodes(self.net, o.out / "cluster")
        self.nodes.write_configs()
        for i in self.nodes.ids:
            self.nodes.start(i)
        self.nodes.wait_ready(timeout=90)
        self.nodes.create_topic(TOPIC, o.partitions)
        self.nodes.create_topic(TXN_TOPIC, TXN_PARTITIONS)
        if o.moves:
            self.nodes.create_topic(MOVES_TOPIC, o.moves, replication_factor=2)
        self.wait_healthy(90)
        print(
            f"cluster up in {time.time() - self.t0:.1f}s: {self.nodes.bootstrap} "
            f"(namespaces {self.net.prefix}n1-3, bridge {self.net.bridge} {self.net.bridge_ip})",
            flush=True,
        )

    def start_workload(self) -> None:
        o = self.o
        # a bound the runner never reaches: it stops the producers itself
        budget = o.cycles * (o.fault_seconds[1] + o.recovery_timeout + 120) + 600
        for name, idem in PRODUCERS:
            self.producers.append(
                start_producer(
                    name,
                    idem,
                    self.nodes.bootstrap,
                    TOPIC,
                    o.partitions,
                    o.out / "producers",
                    o.rate,
                    max_seconds=budget,
                    flush_timeout=o.flush_timeout,
                )
            )
        self.producers.append(
            start_producer(
                TXN_PRODUCER,
                True,
                self.nodes.bootstrap,
                TXN_TOPIC,
                TXN_PARTITIONS,
                o.out / "producers",
                TXN_RATE,
                max_seconds=budget,
                flush_timeout=o.flush_timeout,
                transactional=True,
            )
        )
        # The cycles' recovery is measured on TOPIC's partitions: the moves' producer is not
        # in the timeline (its partition numbers would stand for TOPIC's).
        self.timeline = AckTimeline(list(self.producers))
        wait_for(self._acked_everywhere(0.0), 60, what="first acks on every partition")
        if o.moves:
            self.producers.append(
                start_producer(
                    MOVES_PRODUCER,
                    True,
                    self.nodes.bootstrap,
                    MOVES_TOPIC,
                    o.moves,
                    o.out / "producers",
                    MOVES_RATE,
                    max_seconds=budget,
                    flush_timeout=o.flush_timeout,
                )
            )
            self.mover = start_mover(
                self.nodes.bootstrap,
                MOVES_TOPIC,
                o.moves,
                o.out,
                o.move_interval,
                o.move_settle,
                o.seed,
            )

    # ----------------------------------------------------------------- observation

    def _statuses(self) -> Statuses:
        return self.nodes.statuses(timeout=0.5)

    def _acked_everywhere(self, since: float) -> Callable[[], bool]:
        """A predicate: every partition had an ack after `since`."""

        def check() -> bool:
            self.timeline.update()
            return all(
                self.timeline.first_after(p, since) is not None for p in range(self.o.partitions)
            )

        return check

    def wait_healthy(self, timeout: float) -> Statuses:
        """Every node alive, ready and answering, every partition with an agreed leader."""
        self.nodes.wait_ready(timeout=timeout)

        def healthy() -> Statuses | None:
            st = self._statuses()
            ok = len(st) == len(self.nodes.ids) and (
                len(agreed_leaders(st, TOPIC, self.o.partitions)) == self.o.partitions
            )
            return st if ok else None

        return wait_for(healthy, timeout, interval=POLL, what="every partition led")

    def observe(
        self,
        until: float,
        samples: list[Sample],
        done: Callable[[Leaders], bool] | None = None,
    ) -> bool:
        """Poll leadership until `until` (or `done(leaders)`), appending (time, leaders)
        samples; True if `done` said so."""
        while time.time() < until:
            st = self._statuses()
            samples.append((time.time(), agreed_leaders(st, TOPIC, self.o.partitions)))
            self.timeline.update()
            if done is not None and done(samples[-1][1]):
                return True
            time.sleep(POLL)
        return False

    # ----------------------------------------------------------------- one cycle

    def cycle(self, number: int, kind: str, injector: faults.Injector) -> dict[str, Any]:
        o, P = self.o, self.o.partitions
        st = self.wait_healthy(90)
        leaders = agreed_leaders(st, TOPIC, P)
        terms_before = max_terms(st, TOPIC)
        partition = number % P
        leader, term = leaders[partition]
        duration = round(self.rng.uniform(*o.fault_seconds), 2)
        samples: list[Sample] = [(time.time(), leaders)]
        start = time.time()
        applied = injector.apply(kind, leader)
        self.observe(start + duration, samples)
        injector.heal()
        heal = time.time()

        def recovered(led: Leaders) -> bool:
            return len(led) == P and self._acked_everywhere(heal)()

        ok = self.observe(heal + o.recovery_timeout, samples, recovered)
        end = time.time()
        terms_after = max_terms(self._statuses(), TOPIC) or {}
        firsts = [self.timeline.first_after(p, heal) for p in range(P)]
        lost = next(
            (t for t, led in samples if led.get(partition) != (leader, term)),
            None,
        )
        first_after_loss = self.timeline.first_after(partition, lost) if lost else None
        c = {
            "cycle": number,
            "kind": kind,
            "targets": applied.targets,
            "description": applied.description,
            "partition": partition,
            "leader_before": [leader, term],
            "fault_s": duration,
            "start": start,
            "heal": heal,
            "end": end,
            "recovered": ok,
            "leaderless_s": _round(max(_leaderless(samples, p, end) for p in range(P))),
            "leaderless_target_s": _round(_leaderless(samples, partition, end)),
            "ack_gap_s": _round(max(self.timeline.longest_gap(p, start, end) for p in range(P))),
            "heal_to_ack_s": _round(max(f - heal for f in firsts) if all(firsts) else None),
            "loss_to_ack_s": _round(first_after_loss - lost if first_after_loss else None),
            "terms_before": {str(p): t for p, t in sorted(terms_before.items())},
            "terms_after": {str(p): t for p, t in sorted(terms_after.items())},
            "term_growth": max(
                (terms_after.get(p, t) - t for p, t in terms_before.items()), default=0
            ),
        }
        if not ok:
            self.liveness.append(
                Anomaly(
                    "no_recovery",
                    f"cycle {number} {kind} ({applied.description}): no leader and ack on "
                    f"every partition within {o.recovery_timeout:.0f}s of the heal",
                    heal,
                    {
                        "cycle": number,
                        "last_leaders": {str(k): v for k, v in samples[-1][1].items()},
                    },
                )
            )
        return c

    def run_cycles(self) -> None:
        kinds = self.o.kinds or faults.kinds(self.netem)
        order = faults.schedule(self.o.cycles, kinds, self.o.seed)
        injector = faults.Injector(self.net, self.nodes)
        with open(self.o.out / "history.jsonl", "a", encoding="utf-8") as history:
            for number, kind in enumerate(order, 1):
                try:
                    c = self.cycle(number, kind, injector)
                except (TimeoutError, RuntimeError) as exc:
                    injector.heal()
                    self.liveness.append(
                        Anomaly(
                            "not_healthy",
                            f"before/while cycle {number} {kind}: {exc}",
                            time.time(),
                            {"cycle": number},
                        )
                    )
                    print(f"cycle {number}: cluster not healthy, stopping the faults: {exc}")
                    break
                self.cycles.append(c)
                history.write(json.dumps(c) + "\n")
                history.flush()
                print(report.progress_line(c, self.o.cycles), flush=True)

    # ----------------------------------------------------------------- the end

    def finish(self) -> dict[str, Any]:
        o, out = self.o, self.o.out
        faults.Injector(self.net, self.nodes).heal()
        try:
            self.wait_healthy(120)
        except (TimeoutError, RuntimeError) as exc:
            self.liveness.append(Anomaly("not_healthy", f"after healing everything: {exc}"))
        if self.mover is not None:
            print(
                f"faults over; waiting for the running moves (<= {o.move_settle:.0f}s)", flush=True
            )
            self.mover.send_signal(signal.SIGTERM)
            try:
                self.mover.wait(o.move_settle + 120)
            except subprocess.TimeoutExpired:
                self.mover.kill()
                self.mover.wait(10)
                self.liveness.append(Anomaly("mover_hung", "the mover had to be killed"))
        print("faults over; stopping the producers (flush)", flush=True)
        killed = stop_producers(self.producers, o.flush_timeout + 60)
        for name in killed:
            self.liveness.append(Anomaly("producer_hung", f"producer {name} had to be killed"))
        try:
            st = wait_for(
                lambda: (
                    (s := self._statuses())
                    and caught_up(s, TOPIC, o.partitions, 3)
                    and caught_up(s, TXN_TOPIC, TXN_PARTITIONS, 3)
                    and caught_up_hosted(s, MOVES_TOPIC, o.moves)
                    and s
                ),
                120,
                interval=0.5,
                what="every replica caught up",
            )
        except TimeoutError as exc:
            st = self._statuses()
            self.liveness.append(
                Anomaly("not_caught_up", str(exc), None, {"status": _partition_view(st)})
            )
        (out / "final_status.json").write_text(json.dumps(st, indent=2) + "\n")
        leaders = agreed_leaders(st, TOPIC, o.partitions)
        ends, starts = _ends(st, leaders)
        (out / "ends.json").write_text(json.dumps({"ends": ends, "starts": starts}) + "\n")
        print(f"reading back {sum(ends.values())} records", flush=True)
        log, err = read_back(self.nodes.bootstrap, TOPIC, ends)
        if err:
            self.liveness.append(Anomaly("readback_incomplete", err))
        with open(out / "readback.jsonl", "w", encoding="utf-8") as f:
            for r in log:
                f.write(json.dumps([r.partition, r.offset, r.value, r.leader_epoch]) + "\n")
        if o.moves:
            move_ends, move_starts = _ends(
                st, agreed_leaders(st, MOVES_TOPIC, o.moves), MOVES_TOPIC
            )
            (out / "ends-moves.json").write_text(
                json.dumps({"ends": move_ends, "starts": move_starts}) + "\n"
            )
            for p in sorted(set(range(o.moves)) - set(move_ends)):
                # its acknowledged records then count as missing: say why they were not read
                self.liveness.append(
                    Anomaly(
                        "leaderless_at_end",
                        f"{MOVES_TOPIC}-{p}: no leader its replicas agree on at the end, "
                        "so it was not read back",
                        None,
                        {"status": _partition_view(st, MOVES_TOPIC, p)},
                    )
                )
            move_log, err = read_back(self.nodes.bootstrap, MOVES_TOPIC, move_ends)
            if err:
                self.liveness.append(Anomaly("readback_incomplete", f"{MOVES_TOPIC}: {err}"))
            with open(out / "readback-moves.jsonl", "w", encoding="utf-8") as f:
                for r in move_log:
                    f.write(json.dumps([r.partition, r.offset, r.value, r.leader_epoch]) + "\n")
        txn_ends, _ = _ends(st, agreed_leaders(st, TXN_TOPIC, TXN_PARTITIONS), TXN_TOPIC)
        txn_log, err = read_back(self.nodes.bootstrap, TXN_TOPIC, txn_ends)
        if err:
            self.liveness.append(Anomaly("readback_incomplete", f"{TXN_TOPIC}: {err}"))
        with open(out / "readback-txn.jsonl", "w", encoding="utf-8") as f:
            for r in txn_log:
                f.write(json.dumps([r.partition, r.offset, r.value, r.leader_epoch]) + "\n")
        epochs = {}
        for i in self.nodes.ids:
            try:
                epochs[i] = self.nodes.epochs(i)
            except Exception as exc:  # noqa: BLE001 - a node that does not answer is a finding
                self.liveness.append(Anomaly("epochs_unavailable", f"node {i}: {exc!r}"))
        (out / "epochs.json").write_text(json.dumps(epochs, indent=2) + "\n")
        self.nodes.stop_all(graceful=True)
        audit_code, audit_summary, audit_out = self.audit()

        data, producer_stats = check_files(out, self.o.audit)
        anomalies = [*self.liveness, *data]
        return self.summarize(anomalies, producer_stats, audit_code, audit_summary)

    def audit(self) -> tuple[int | None, dict[str, Any] | None, str]:
        if not self.o.audit:
            return None, None, ""
        out = self.o.out / "audit"
        print("running the epoch audit (raftlog audit)", flush=True)
        argv = [*raftlog_argv(), "audit", "--data", str(self.nodes.root), "--out", str(out)]
        try:
            proc = subprocess.run(
                argv, capture_output=True, text=True, timeout=900, stdin=subprocess.DEVNULL
            )
        except subprocess.TimeoutExpired:
            return None, None, "raftlog audit did not finish within 900s"
        text = proc.stdout + proc.stderr
        (self.o.out / "audit.log").write_text(text)
        (self.o.out / "audit.json").write_text(json.dumps({"exit_code": proc.returncode}) + "\n")
        summary = None
        with contextlib.suppress(OSError, ValueError):
            summary = json.loads((out / "summary.json").read_text())
        return proc.returncode, summary, text

    def summarize(
        self,
        anomalies: list[Anomaly],
        producer_stats: dict[str, Any],
        audit_code: int | None,
        audit_summary: dict[str, Any] | None,
    ) -> dict[str, Any]:
        o = self.o
        by_cycle = report.attribute(anomalies, self.cycles)
        for c in self.cycles:
            c["anomalies"] = len(by_cycle.get(c["cycle"], []))
        failing = {
            name: {"violations": v.get("violations"), "rows": (v.get("rows") or [])[:5]}
            for name, v in ((audit_summary or {}).get("invariants") or {}).items()
            if not v.get("held", True)
        }
        summary = {
            "passed": not anomalies,
            "run": {
                "out": str(o.out),
                "cycles": o.cycles,
                "cycles_done": len(self.cycles),
                "seed": o.seed,
                "rate": o.rate,
                "topic": TOPIC,
                "partitions": o.partitions,
                "move_partitions": o.moves,
                "fault_seconds": list(o.fault_seconds),
                "subnet": f"{self.net.ip(0)}/24" if self.net else None,
                "netem": self.netem,
                "duration_s": time.time() - self.t0,
            },
            "producers": producer_stats,
            "moves": moves.summarize(o.out / "moves.jsonl") if o.moves else None,
            "per_kind": report.per_kind(self.cycles, by_cycle),
            "anomalies": {
                "counts": checker.summarize(anomalies),
                "unattributed": len(by_cycle.get(-1, [])),
                "list": [a.to_dict() for a in anomalies[:500]],
            },
            "audit": {"exit_code": audit_code, "failing": failing, "ran": o.audit},
            "cycles": self.cycles,
        }
        (o.out / "summary.json").write_text(json.dumps(summary, indent=2, default=str) + "\n")
        with open(o.out / "anomalies.jsonl", "w", encoding="utf-8") as f:
            for a in anomalies:
                f.write(json.dumps(a.to_dict(), default=str) + "\n")
        (o.out / "summary.md").write_text(report.markdown(summary, anomalies))
        return summary

    # ----------------------------------------------------------------- teardown

    def teardown(self) -> None:
        """Kill and reap everything started, remove the network. Never raises."""
        for p in self.producers:
            with contextlib.suppress(Exception):
                if p.popen.poll() is None:
                    p.popen.kill()
                p.popen.wait(10)
        if self.mover is not None:
            with contextlib.suppress(Exception):
                if self.mover.poll() is None:
                    self.mover.kill()
                self.mover.wait(10)
        if self.nodes is not None:
            with contextlib.suppress(Exception):
                self.nodes.stop_all(graceful=False)
        if self.net is not None:
            left = self.net.teardown()
            if left:
                print(f"WARNING: could not remove {left}", file=sys.stderr)


def producer_figures(
    ds: list[Any], meta: dict[str, Any], implicit: set[str], idempotent: bool, sent: Any
) -> dict[str, Any]:
    """One producer's figures in the summary, from its deliveries and its run's record."""
    acked = [d for d in ds if d.acked]
    return {
        "idempotent": idempotent,
        "sent": sent,
        "acked": len(acked),
        "failed": len(ds) - len(acked),
        "acked_without_offset": sum(d.offset is None for d in acked),
        "implicitly_acked": sum(d.value in implicit for d in acked),
        "unresolved": (meta.get("done") or {}).get("unresolved"),
        "max_ack_latency_s": round(max((d.t - d.sent for d in acked), default=0.0), 2),
        "client_errors": len(meta["errors"]),
        "fatal_restarts": meta["restarts"],
    }


def check_files(out: Path, audited: bool) -> tuple[list[Anomaly], dict[str, Any]]:
    """The checker over a run directory's files (producers/, readback.jsonl, ends.json,
    epochs.json, audit.json, audit/summary.json, the nodes' logs): what finish() wrote, or a kept run's
    (`--recheck DIR`). Returns the anomalies and per-producer figures."""
    deliveries, producers, stats = [], {}, {}
    implicit: set[str] = set()
    for name, idempotent in PRODUCERS:
        path = out / "producers" / f"{name}.jsonl"
        if not path.exists():
            continue
        ds, meta = checker.load_deliveries(path)
        deliveries += ds
        sent = (meta.get("done") or meta.get("stopping") or {}).get("sent")
        producers[name] = ProducerInfo(name, idempotent, sent)
        stderr_log = out / "producers" / f"{name}.stderr.log"
        with (
            contextlib.suppress(OSError),
            open(stderr_log, encoding="utf-8", errors="replace") as f,
        ):
            implicit |= checker.implicitly_acked(ds, name, checker.implicit_ack_ranges(f))
        stats[name] = {
            **producer_figures(ds, meta, implicit, idempotent, sent),
            "epoch_bumps": epoch_bumps(stderr_log),
        }
    log = []
    with open(out / "readback.jsonl", encoding="utf-8") as f:
        for line in f:
            p, offset, value, epoch = json.loads(line)
            log.append(checker.ReadRecord(p, offset, value, epoch))
    bounds = json.loads((out / "ends.json").read_text())
    ends = {int(p): e for p, e in bounds["ends"].items()}
    starts = {int(p): s for p, s in bounds["starts"].items()}
    epochs = {int(i): e for i, e in json.loads((out / "epochs.json").read_text()).items()}
    sent_times = {d.value: d.sent for d in deliveries}
    txn_path = out / "producers" / f"{TXN_PRODUCER}.jsonl"
    txn_log_path = out / "readback-txn.jsonl"
    txn_log: list[checker.ReadRecord] = []
    if txn_path.exists() and txn_log_path.exists():
        txns, meta = checker.load_transactions(txn_path)
        with open(txn_log_path, encoding="utf-8") as f:
            txn_log = [checker.ReadRecord(*json.loads(line)) for line in f]
        txn_anomalies = checker.check_transactions(txns, txn_log)
        stats[TXN_PRODUCER] = {
            "transactional": True,
            "sent": (meta.get("done") or {}).get("sent"),
            "transactions": len(txns),
            **{o: sum(t.outcome == o for t in txns) for o in ("committed", "aborted", "unknown")},
            "records_read": len(txn_log),
            "client_errors": len(meta["errors"]),
            "fatal_restarts": meta["restarts"],
        }
    else:
        txn_anomalies = []
    move_anomalies, move_log = check_moves(out, stats)
    anomalies = [
        *txn_anomalies,
        *checker.check_deliveries(deliveries, producers, log, implicit),
        *checker.check_log(log, ends, starts, sent_times),
        *move_anomalies,
        *checker.check_epoch_caches(
            epochs, {TOPIC: log, TXN_TOPIC: txn_log, MOVES_TOPIC: move_log}
        ),
    ]
    anomalies += check_node_logs(out / "cluster")
    if audited:
        code, summary, text = None, None, ""
        with contextlib.suppress(OSError, ValueError):
            code = json.loads((out / "audit.json").read_text())["exit_code"]
        with contextlib.suppress(OSError, ValueError):
            summary = json.loads((out / "audit" / "summary.json").read_text())
        with contextlib.suppress(OSError):
            text = (out / "audit.log").read_text()
        anomalies += checker.check_audit(code, summary, text)
    return anomalies, stats


def check_moves(out: Path, stats: dict[str, Any]) -> tuple[list[Anomaly], list[checker.ReadRecord]]:
    """The reassignment workload's checks (when the run had one): its producer's records as
    TOPIC's idempotent producer's (no acknowledged record lost, none twice, each at its
    offset, no gap), each message naming MOVES_TOPIC; and move_stuck, a move still running
    when the mover stopped waiting after the faults healed (or a mover that never said)."""
    path = out / "producers" / f"{MOVES_PRODUCER}.jsonl"
    if not path.exists():
        return [], []
    ds, meta = checker.load_deliveries(path)
    log = []
    with contextlib.suppress(OSError), open(out / "readback-moves.jsonl", encoding="utf-8") as f:
        log = [checker.ReadRecord(*json.loads(line)) for line in f]
    bounds: dict[str, Any] = {"ends": {}, "starts": {}}
    with contextlib.suppress(OSError, ValueError):
        bounds = json.loads((out / "ends-moves.json").read_text())
    ends = {int(p): e for p, e in bounds["ends"].items()}
    starts = {int(p): s for p, s in bounds["starts"].items()}
    implicit: set[str] = set()
    with (
        contextlib.suppress(OSError),
        open(
            out / "producers" / f"{MOVES_PRODUCER}.stderr.log", encoding="utf-8", errors="replace"
        ) as f,
    ):
        implicit = checker.implicitly_acked(ds, MOVES_PRODUCER, checker.implicit_ack_ranges(f))
    sent = (meta.get("done") or meta.get("stopping") or {}).get("sent")
    info = {MOVES_PRODUCER: ProducerInfo(MOVES_PRODUCER, True, sent)}
    stats[MOVES_PRODUCER] = {
        **producer_figures(ds, meta, implicit, True, sent),
        "topic": MOVES_TOPIC,
    }
    found = [
        *checker.check_deliveries(ds, info, log, implicit),
        *checker.check_log(log, ends, starts, {d.value: d.sent for d in ds}),
    ]
    for a in found:
        a.message = f"{MOVES_TOPIC}: {a.message}"
    figures = moves.summarize(out / "moves.jsonl")
    if not figures["drained"]:
        found.append(Anomaly("move_stuck", "the mover ended without its final report"))
    for p, m in (figures["stuck"] or {}).items():
        found.append(
            Anomaly(
                "move_stuck",
                f"{MOVES_TOPIC}-{p}: the move {m['source']} -> {m['target']} still running "
                f"{m['seconds']}s after it started, the faults healed (listed: {m['listing']})",
                None,
                {"partition": int(p), **m},
            )
        )
    return found, log


def check_node_logs(root: Path) -> list[Anomaly]:
    """Every node's log (`console.log`: `raftlog serve` logs to stderr, and a crash's bare
    traceback lands there too; `raftlog.log`, in case a node is given --log-file)."""
    found: list[Anomaly] = []
    for directory in sorted(root.glob("node-*")):
        node = int(directory.name.rpartition("-")[2])
        for name in ("console.log", "raftlog.log"):
            path = directory / name
            with contextlib.suppress(OSError), open(path, encoding="utf-8", errors="replace") as f:
                found += checker.check_node_log(node, f, str(path))
    return found


def epoch_bumps(stderr_log: Path) -> dict[str, int]:
    """Producer-epoch bumps librdkafka began (its `debug=eos` log), counted by reason."""
    reasons: dict[str, int] = defaultdict(int)
    with contextlib.suppress(OSError), open(stderr_log, encoding="utf-8", errors="replace") as f:
        for line in f:
            if "epoch bump for" in line:
                reasons[line.rstrip().rpartition(": ")[2]] += 1
    return dict(sorted(reasons.items(), key=lambda kv: -kv[1]))


def _round(v: float | None) -> float | None:
    return None if v is None else round(v, 2)


def _leaderless(samples: list[Sample], partition: int, end: float) -> float:
    """Seconds, between the samples, in which `partition` had no agreed leader."""
    total = 0.0
    for (t, led), (t_next, _) in zip(samples, [*samples[1:], (end, None)], strict=True):
        if partition not in led:
            total += max(0.0, t_next - t)
    return total


def _ends(
    st: Statuses, leaders: Leaders, topic: str = TOPIC
) -> tuple[dict[int, int], dict[int, int]]:
    """{partition: leader's high watermark}, {partition: leader's log start}."""
    ends, starts = {}, {}
    for p, (leader, _) in leaders.items():
        for e in st.get(leader, {}).get("partitions") or []:
            if e.get("topic") == topic and e.get("partition") == p:
                ends[p], starts[p] = int(e["high_watermark"]), int(e["log_start_offset"])
    return ends, starts


def _partition_view(st: Statuses, topic: str = TOPIC, only: int | None = None) -> dict[str, Any]:
    return {
        str(i): [
            {
                k: e.get(k)
                for k in (
                    "partition",
                    "leader",
                    "term",
                    "high_watermark",
                    "log_end_offset",
                    "replicas",
                )
            }
            for e in s.get("partitions") or []
            if e.get("topic") == topic and only in (None, e.get("partition"))
        ]
        for i, s in st.items()
    }


def recheck(out: Path) -> int:
    """The checker again over a kept run (e.g. after changing it); the run's own liveness
    findings (no recovery, not caught up, ...) are taken from its anomalies.jsonl. The
    summary is rewritten with the new verdict and says it was rechecked, and when."""
    data, stats = check_files(out, (out / "audit.json").exists())
    kinds = {a.kind for a in data} | checker.DATA_KINDS | {"move_stuck"}
    old = []
    with contextlib.suppress(OSError):
        for line in (out / "anomalies.jsonl").read_text().splitlines():
            row = json.loads(line)
            if row["kind"] not in kinds:
                old.append(Anomaly(**row))
    anomalies = [*old, *data]
    with open(out / "recheck.jsonl", "w", encoding="utf-8") as f:
        for a in anomalies:
            f.write(json.dumps(a.to_dict(), default=str) + "\n")
    with contextlib.suppress(OSError, ValueError):
        summary = json.loads((out / "summary.json").read_text())
        cycles = summary["cycles"]
        by_cycle = report.attribute(anomalies, cycles)
        for c in cycles:
            c["anomalies"] = len(by_cycle.get(c["cycle"], []))
        summary |= {
            "passed": not anomalies,
            "rechecked": datetime.now(UTC).isoformat(timespec="seconds"),
            "producers": stats,
            "per_kind": report.per_kind(cycles, by_cycle),
            "anomalies": {
                "counts": checker.summarize(anomalies),
                "unattributed": len(by_cycle.get(-1, [])),
                "list": [a.to_dict() for a in anomalies[:500]],
            },
        }
        (out / "summary.json").write_text(json.dumps(summary, indent=2, default=str) + "\n")
        (out / "summary.md").write_text(report.markdown(summary, anomalies))
    print(f"anomalies: {checker.summarize(anomalies) or 'none'} (written to recheck.jsonl)")
    for a in anomalies[:20]:
        print(f"  {a.kind}: {a.message}")
    return 0 if not anomalies else 1


def main(argv: list[str] | None = None) -> int:
    opts = parse_args(argv)
    if opts.recheck:
        return recheck(opts.recheck)
    if any((opts.out / name).exists() for name in ("cluster", "producers")):
        # A run appends to its producers' logs and restarts the nodes on the data it finds:
        # an earlier run's records then read back as duplicates of this one's.
        print(f"{opts.out} holds an earlier run; give --out a new directory", file=sys.stderr)
        return 2
    reason = netns.unavailable_reason()
    if reason:
        print(f"raftlog fault suite cannot run here: {reason}", file=sys.stderr)
        return 2
    become_subreaper()
    signal.signal(signal.SIGTERM, _on_sigterm)
    # Ctrl-C cleans up even when started in the background of a script (SIGINT ignored).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    runner = Runner(opts)
    print(f"run directory {opts.out} (seed {opts.seed})", flush=True)
    summary = None
    try:
        runner.setup()
        runner.start_workload()
        runner.run_cycles()
        summary = runner.finish()
    except (KeyboardInterrupt, Interrupted):
        print("interrupted: cleaning up", file=sys.stderr, flush=True)
        return 130
    finally:
        runner.teardown()
        print(f"run directory kept: {opts.out}", flush=True)
    print()
    print("\n".join(report.kind_table(summary["per_kind"])))
    if summary.get("moves"):
        print(report.moves_line(summary["moves"]))
    counts = summary["anomalies"]["counts"]
    print(f"\nanomalies: {counts or 'none'}")
    for a in summary["anomalies"]["list"][:10]:
        print(f"  {a['kind']}: {a['message']}")
    print(f"summary: {opts.out / 'summary.md'}")
    return 0 if summary["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
