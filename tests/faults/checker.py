"""The checker: what the producers were told against what the log holds at the end.

Pure functions over plain data (delivery reports, the records read back, each node's
`/v1/epochs`, the epoch audit's verdict), so tests/faults/test_checker.py can feed them
hand-made histories. Each rule flags only what Kafka's contract forbids:

- acked_missing: an acknowledged (acks=all) record is not in the log. For the non-idempotent
  producer this is the at-least-once rule; a record whose send failed may be missing.
- acked_wrong_offset: an acknowledged record is not at the offset (and partition) it was
  acknowledged at.
- acked_invalid_offset: an acks=all write acknowledged without a valid offset. raftlog, as
  Kafka, answers a producer's retried duplicate with the offset of the copy in the log, so
  no answer of the broker is ever without one. The idempotent producer's own exception:
  librdkafka reports a batch whose request failed with an unknown outcome as delivered,
  offset unknown, when a later batch's success shows it was persisted ("implicitly acked",
  its debug=eos log names the message ids); such records must still be in the log, once.
- duplicate: a record of the idempotent producer is in the log more than once. The
  non-idempotent producer's retries may legally duplicate.
- unexpected_record: a record no producer sent.
- gap / offset_conflict: the offsets read are not contiguous from the log start to the end,
  or one offset was read with two values.
- epoch_decrease: a record's leader epoch is lower than the one before it in the log.
- epoch_cache_disagreement: two replicas' epoch caches differ on the epochs that start in
  the committed prefix both hold; epoch_cache_vs_log: a replica's cache names another epoch
  for a committed offset than the record read there carries.
- audit: `raftlog audit` did not exit 0.
- node_error / node_traceback / node_warning: a node logged an ERROR or CRITICAL line, a
  traceback (on a line of any level, or printed bare as a crash is), or a WARNING that is not
  one of the LEGAL_WARNINGS a fault run may cause (a kill -9's torn tails, a pause's loop
  stalls, a cut-off peer). A fault like issue 43's "ready failed" could pass a run with no
  data anomaly; none can now.

The transactional producer's own topic, read back read_committed, against what its client
was told of each transaction:

- txn_partial: a committed transaction is not all there, or one whose outcome was left open
  is partly there (a transaction is read whole or not at all).
- txn_aborted_visible: a record of an aborted transaction was read.
- and duplicate / unexpected_record as above (the transactional producer is idempotent).
"""

from __future__ import annotations

import bisect
import json
import re
import time
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

# Every kind the checker itself reports (the runner adds liveness kinds of its own).
DATA_KINDS = {
    "acked_missing",
    "acked_wrong_offset",
    "acked_invalid_offset",
    "duplicate",
    "unexpected_record",
    "gap",
    "offset_conflict",
    "epoch_decrease",
    "epoch_cache_disagreement",
    "epoch_cache_vs_log",
    "audit",
    "txn_partial",
    "txn_aborted_visible",
    "node_error",
    "node_traceback",
    "node_warning",
}


@dataclass(frozen=True)
class Delivery:
    """One delivery report: error None means acknowledged at (partition, offset)."""

    producer: str
    seq: int
    value: str
    partition: int
    offset: int | None
    error: str | None
    sent: float
    t: float
    epoch: int | None = None

    @property
    def acked(self) -> bool:
        return self.error is None


@dataclass(frozen=True)
class ReadRecord:
    """A record read back by the consumer."""

    partition: int
    offset: int
    value: str | None
    leader_epoch: int | None


@dataclass(frozen=True)
class ProducerInfo:
    name: str
    idempotent: bool
    sent: int | None  # records handed to the client (seq 0..sent-1); None if unknown


@dataclass
class Anomaly:
    kind: str
    message: str
    at: float | None = None  # wall time it relates to (an ack or a send), for attribution
    details: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# --------------------------------------------------------------------------- deliveries


def check_deliveries(
    deliveries: Iterable[Delivery],
    producers: dict[str, ProducerInfo],
    log: Iterable[ReadRecord],
    implicit: frozenset[str] | set[str] = frozenset(),
) -> list[Anomaly]:
    """acked_missing, acked_wrong_offset, acked_invalid_offset, duplicate, unexpected_record.
    `implicit`: values librdkafka acknowledged implicitly (see implicitly_acked)."""
    deliveries = list(deliveries)
    invalid = invalid_base_runs([d for d in deliveries if d.value not in implicit])
    where: dict[str, list[tuple[int, int]]] = defaultdict(list)  # value -> [(partition, offset)]
    at: dict[tuple[int, int], str | None] = {}
    for r in log:
        at[(r.partition, r.offset)] = r.value
        if r.value is not None:
            where[r.value].append((r.partition, r.offset))
    out: list[Anomaly] = []
    by_value: dict[str, Delivery] = {}
    for d in deliveries:
        by_value.setdefault(d.value, d)
        if not d.acked:
            continue
        found = where.get(d.value, [])
        info = producers.get(d.producer)
        base = {
            "producer": d.producer,
            "idempotent": bool(info and info.idempotent),
            "value": d.value,
            "acked_partition": d.partition,
            "acked_offset": d.offset,
            "sent": d.sent,
            "acked_at": d.t,
            "found_at": found,
        }
        if not found:
            out.append(
                Anomaly(
                    "acked_missing",
                    f"{d.value} acknowledged at {d.partition}@{d.offset} "
                    f"({d.t - d.sent:.1f}s after send) is not in the log",
                    d.t,
                    base | {"log_value_at_acked_offset": at.get((d.partition, d.offset))},
                )
            )
        elif (
            d.offset is not None and d.value not in invalid and (d.partition, d.offset) not in found
        ):
            out.append(
                Anomaly(
                    "acked_wrong_offset",
                    f"{d.value} acknowledged at {d.partition}@{d.offset} is at {found}; "
                    f"{d.partition}@{d.offset} holds {at.get((d.partition, d.offset))!r}",
                    d.t,
                    base | {"log_value_at_acked_offset": at.get((d.partition, d.offset))},
                )
            )
    seen_runs = set()
    for start, run in invalid.values():
        if start in seen_runs:
            continue
        seen_runs.add(start)
        d = run[0]
        shown = ", ".join(
            f"{r.value} reported {r.offset}, in the log at {where.get(r.value, 'nowhere')}"
            for r in run[:4]
        )
        out.append(
            Anomaly(
                "acked_invalid_offset",
                f"{len(run)} acks of {d.producer} on partition {d.partition} without a valid "
                f"offset ({d.t - d.sent:.1f}s after send): {shown}",
                d.t,
                {
                    "producer": d.producer,
                    "partition": d.partition,
                    "values": [r.value for r in run],
                    "reported_offsets": [r.offset for r in run],
                    "found_at": [where.get(r.value, []) for r in run],
                },
            )
        )
    for value, places in sorted(where.items()):
        name, seq = _parse(value)
        info = producers.get(name) if name is not None else None
        if info is None or seq is None or (info.sent is not None and seq >= info.sent):
            out.append(
                Anomaly(
                    "unexpected_record",
                    f"{value!r} at {places} was never sent",
                    None,
                    {"value": value, "found_at": places},
                )
            )
            continue
        if info.idempotent and len(places) > 1:
            d = by_value.get(value)
            out.append(
                Anomaly(
                    "duplicate",
                    f"{value} of idempotent producer {name} is in the log {len(places)} times: "
                    f"{places}" + (f" (acknowledged at {d.partition}@{d.offset})" if d else ""),
                    d.sent if d else None,
                    {
                        "producer": name,
                        "value": value,
                        "found_at": places,
                        "acked": d.acked if d else None,
                        "acked_offset": d.offset if d else None,
                    },
                )
            )
    return out


_IMPLICIT_ACK = re.compile(
    r"\[(\d+)\] \d+ message\(s\) implicitly acked by subsequent batch success "
    r"\(msgids (\d+)\.\.(\d+),"
)


def implicit_ack_ranges(lines: Iterable[str]) -> dict[int, list[tuple[int, int]]]:
    """{partition: [(first msgid, last msgid)]} from librdkafka's IMPLICITACK lines."""
    ranges: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for line in lines:
        m = _IMPLICIT_ACK.search(line)
        if m:
            ranges[int(m[1])].append((int(m[2]), int(m[3])))
    return dict(ranges)


def implicitly_acked(
    deliveries: Iterable[Delivery], producer: str, ranges: dict[int, list[tuple[int, int]]]
) -> set[str]:
    """The values of `producer` in `ranges`. librdkafka numbers a partition's messages 1, 2,
    ... in the order they were produced to it, which is the order of our sequence numbers."""
    order: dict[int, list[Delivery]] = defaultdict(list)
    for d in deliveries:
        if d.producer == producer:
            order[d.partition].append(d)
    out = set()
    for partition, spans in ranges.items():
        sent = sorted(order.get(partition, []), key=lambda d: d.seq)
        for first, last in spans:
            out.update(d.value for d in sent[first - 1 : last] if d.acked and d.offset is None)
    return out


def invalid_base_runs(deliveries: list[Delivery]) -> dict[str, tuple[int, list[Delivery]]]:
    """{value: (run start, run)} for acks answered with an invalid (negative) base offset.

    librdkafka numbers a batch's messages base, base+1, ... and reports negative offsets as
    none, so such a batch shows, consecutively in one producer's reports for one partition,
    as offsets None..None, 0, 1, 2: the 0, 1, 2 are not offsets the broker gave."""
    out: dict[str, tuple[int, list[Delivery]]] = {}
    i, n = 0, len(deliveries)
    while i < n:
        d = deliveries[i]
        if not (d.acked and d.offset is None):
            i += 1
            continue
        j = i

        def same(k: int, d: Delivery = d) -> bool:
            e = deliveries[k]
            return e.acked and e.producer == d.producer and e.partition == d.partition

        while j < n and same(j) and deliveries[j].offset is None:
            j += 1
        expected = 0
        while j < n and same(j) and deliveries[j].offset == expected:
            j, expected = j + 1, expected + 1
        run = deliveries[i:j]
        for r in run:
            out[r.value] = (i, run)
        i = j
    return out


def _parse(value: str) -> tuple[str | None, int | None]:
    name, sep, seq = value.rpartition(":")
    if not sep or not seq.isdigit():
        return None, None
    return name, int(seq)


# --------------------------------------------------------------------------- the log


def check_log(
    log: Iterable[ReadRecord],
    ends: dict[int, int],
    starts: dict[int, int] | None = None,
    sent_times: dict[str, float] | None = None,
) -> list[Anomaly]:
    """gap, offset_conflict, epoch_decrease; `ends[p]` is the partition's high watermark
    (everything below it was read), `starts[p]` its log start (default 0)."""
    starts = starts or {}
    sent_times = sent_times or {}
    per: dict[int, dict[int, ReadRecord]] = defaultdict(dict)
    out: list[Anomaly] = []
    for r in log:
        seen = per[r.partition].get(r.offset)
        if seen is not None and seen.value != r.value:
            out.append(
                Anomaly(
                    "offset_conflict",
                    f"{r.partition}@{r.offset} read as {seen.value!r} and as {r.value!r}",
                    sent_times.get(r.value or ""),
                    {"partition": r.partition, "offset": r.offset, "values": [seen.value, r.value]},
                )
            )
        per[r.partition].setdefault(r.offset, r)
    for p in sorted(set(per) | set(ends)):
        records = per.get(p, {})
        expected = starts.get(p, 0)
        end = ends.get(p, max(records, default=-1) + 1)
        missing = _ranges(sorted(set(range(expected, end)) - set(records)))
        if missing:
            near = _value_near(records, missing[0][0])
            out.append(
                Anomaly(
                    "gap",
                    f"partition {p}: offsets {_fmt_ranges(missing)} missing from what was read "
                    f"(log {expected}..{end})",
                    sent_times.get(near or ""),
                    {"partition": p, "missing": missing, "start": expected, "end": end},
                )
            )
        previous: ReadRecord | None = None
        for offset in sorted(records):
            r = records[offset]
            if r.leader_epoch is None or r.leader_epoch < 0:
                continue
            if previous is not None and r.leader_epoch < (previous.leader_epoch or 0):
                out.append(
                    Anomaly(
                        "epoch_decrease",
                        f"partition {p}: epoch {previous.leader_epoch} at offset "
                        f"{previous.offset} then {r.leader_epoch} at {r.offset}",
                        sent_times.get(r.value or ""),
                        {
                            "partition": p,
                            "before": [previous.offset, previous.leader_epoch, previous.value],
                            "after": [r.offset, r.leader_epoch, r.value],
                        },
                    )
                )
            previous = r
    return out


def _ranges(offsets: list[int]) -> list[list[int]]:
    """[[first, last], ...] runs of consecutive offsets."""
    out: list[list[int]] = []
    for o in offsets:
        if out and out[-1][1] == o - 1:
            out[-1][1] = o
        else:
            out.append([o, o])
    return out


def _fmt_ranges(ranges: list[list[int]], limit: int = 5) -> str:
    text = ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in ranges[:limit])
    return text + (f" (+{len(ranges) - limit} more)" if len(ranges) > limit else "")


def _value_near(records: dict[int, ReadRecord], offset: int) -> str | None:
    before = [o for o in records if o < offset]
    return records[max(before)].value if before else None


# --------------------------------------------------------------------------- epoch caches


def _cache(state: dict[str, Any]) -> list[tuple[int, int]]:
    return [(int(e["epoch"]), int(e["start_offset"])) for e in state.get("epochs") or []]


def check_epoch_caches(
    epochs: dict[int, dict[str, Any]], logs: dict[str, Iterable[ReadRecord]] | None = None
) -> list[Anomaly]:
    """epoch_cache_disagreement between each pair of replicas of every partition, on the
    epochs starting in [highest log start, lowest high watermark) of the two;
    epoch_cache_vs_log for each record read back (`logs`: {topic: records}) below a
    replica's high watermark. `epochs`: {node: its /v1/epochs answer}."""
    states: dict[tuple[str, int], dict[int, dict[str, Any]]] = defaultdict(dict)
    for node, answer in epochs.items():
        for s in answer.get("partitions") or []:
            states[(s["topic"], int(s["partition"]))][int(node)] = s
    out: list[Anomaly] = []
    for (topic, p), replicas in sorted(states.items()):
        nodes = sorted(replicas)
        for i, a in enumerate(nodes):
            for b in nodes[i + 1 :]:
                sa, sb = replicas[a], replicas[b]
                low = max(int(sa["log_start_offset"]), int(sb["log_start_offset"]))
                high = min(int(sa["high_watermark"]), int(sb["high_watermark"]))
                ca = {e: s for e, s in _cache(sa) if low <= s < high}
                cb = {e: s for e, s in _cache(sb) if low <= s < high}
                if ca != cb:
                    out.append(
                        Anomaly(
                            "epoch_cache_disagreement",
                            f"{topic}-{p}: node {a} and node {b} disagree below offset {high}: "
                            f"{sorted(ca.items())} vs {sorted(cb.items())}",
                            None,
                            {
                                "topic": topic,
                                "partition": p,
                                "nodes": [a, b],
                                "shared": [low, high],
                                str(a): _cache(sa),
                                str(b): _cache(sb),
                            },
                        )
                    )
    per: dict[tuple[str, int], list[ReadRecord]] = defaultdict(list)
    for topic, log in (logs or {}).items():
        for r in log:
            if r.leader_epoch is not None and r.leader_epoch >= 0:
                per[(topic, r.partition)].append(r)
    for (topic, p), replicas in sorted(states.items()):
        for node, s in sorted(replicas.items()):
            cache = _cache(s)
            starts = [start for _, start in cache]
            hw, log_start = int(s["high_watermark"]), int(s["log_start_offset"])
            wrong = []
            for r in per.get((topic, p), []):
                if not log_start <= r.offset < hw:
                    continue
                i = bisect.bisect_right(starts, r.offset) - 1  # the last epoch starting <= it
                epoch = cache[i][0] if i >= 0 else None
                if epoch != r.leader_epoch:
                    wrong.append([r.offset, r.leader_epoch, epoch])
            if wrong:
                out.append(
                    Anomaly(
                        "epoch_cache_vs_log",
                        f"{topic}-{p}: node {node}'s epoch cache gives {len(wrong)} committed "
                        f"offsets another epoch than the log (offset, log epoch, cache epoch): "
                        f"{wrong[:3]}",
                        None,
                        {
                            "topic": topic,
                            "partition": p,
                            "node": node,
                            "cache": cache,
                            "first": wrong[:20],
                            "count": len(wrong),
                        },
                    )
                )
    return out


# --------------------------------------------------------------------------- the audit


def check_audit(
    code: int | None, summary: dict[str, Any] | None, output: str = ""
) -> list[Anomaly]:
    """audit: `raftlog audit` exited non-zero (1: an invariant broke; 2: nothing audited)."""
    if code == 0:
        return []
    failing = {
        name: {"violations": v.get("violations"), "rows": (v.get("rows") or [])[:5]}
        for name, v in ((summary or {}).get("invariants") or {}).items()
        if not v.get("held", True)
    }
    what = ", ".join(f"{n} ({v['violations']})" for n, v in failing.items()) or output[-300:]
    return [
        Anomaly(
            "audit",
            f"raftlog audit exited {code}: {what}",
            None,
            {"exit_code": code, "failing": failing},
        )
    ]


# --------------------------------------------------------------------------- node logs

# The warnings a node may log in a fault run, by name: what its faults legally cause. Any
# other WARNING is a finding (a new one is looked at, then listed here or fixed).
LEGAL_WARNINGS: dict[str, re.Pattern[str]] = {
    name: re.compile(pattern)
    for name, pattern in {
        # the suite runs without ACLs
        "no_authorizer": r"^no authorizer \(authorizer\.class\.name is empty\)",
        # pause_leader (SIGSTOP), kill_all's restart, a loaded node
        "event_loop_stall": r"^event loop stalled for [0-9.]+s",
        # isolate, split, one_way, lossy: a peer unheard for DEAD_AFTER, once per loss
        "peer_silent": r"^peer \d+ silent for [0-9.]+s; dropping$",
        # a handshake that a lossy or cut link did not let finish
        "raft_handshake_unfinished": r"^rejected Raft connection from \S+: no handshake within",
        # kill -9: a window record, a segment's tail, an offset file torn mid-write
        "window_torn_tail": r": dropping \d+ bytes of window past a torn or unlogged entry$",
        "window_cut_log": r": cut \d+ bytes the window does not know$",
        "segment_torn_tail": r": cut \d+ bytes of torn or invalid data$",
        "segment_indexes_rebuilt": r": indexes missing or inconsistent, (recovering|rebuilding)",
        "offset_file_torn": r": unreadable, ",
        "compaction_interrupted": r": (discarding an unfinished compaction rewrite|"
        r"completing an interrupted compaction swap)$",
        # the controller's pysyncobj journal after a kill -9
        "controller_commit_clamped": r"^raftCommitIndex \(\d+\) exceeds journal end",
        # a follower's install whose source was cut off or killed meanwhile
        "snapshot_install_given_up": r": snapshot install \d+ from node \d+: ",
    }.items()
}
# `time LEVEL [node N] logger: message` (raftlog_app/logs.py's text format; a traceback
# stays on its event's line, its newlines written as \n).
_LOG_LINE = re.compile(
    r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3}) "
    r"(DEBUG|INFO|WARNING|ERROR|CRITICAL) \[node (\d+)\] (\S+): (.*)$"
)
_TRACEBACK = "Traceback (most recent call last):"


def legal_warning(message: str) -> str | None:
    """The name of the LEGAL_WARNINGS entry `message` is, None if none."""
    return next((n for n, p in LEGAL_WARNINGS.items() if p.search(message)), None)


def check_node_log(node: int, lines: Iterable[str], source: str = "") -> list[Anomaly]:
    """node_error, node_traceback, node_warning over one node's log lines (text format);
    what is not a log line (the runner's markers, a crash's bare traceback) is read too."""
    found: list[Anomaly] = []
    at: float | None = None
    bare: list[str] | None = None  # a bare traceback being read
    for number, raw in enumerate(lines, 1):
        line = raw.rstrip("\n")
        m = _LOG_LINE.match(line)
        if bare is not None:
            if m is None and line.startswith((" ", "\t")):  # its frames
                bare.append(line)
                continue
            if m is None:  # the exception's own line ends it
                bare.append(line)
            found.append(
                Anomaly(
                    "node_traceback",
                    f"node {node}: {bare[-1][:300]}",
                    at,
                    {"node": node, "file": source, "line": number, "traceback": bare[-40:]},
                )
            )
            bare = None
            if m is None:
                continue
        if m is None:
            if line.startswith(_TRACEBACK):
                bare = []
            continue
        day, ms, level, _, logger, message = m.groups()
        at = time.mktime(time.strptime(day, "%Y-%m-%d %H:%M:%S")) + int(ms) / 1000
        details = {"node": node, "file": source, "line": number, "logger": logger}
        first = message.split("\\n", 1)[0][:300]
        if level in ("ERROR", "CRITICAL"):
            found.append(Anomaly("node_error", f"node {node} {logger}: {first}", at, details))
        elif _TRACEBACK in message:
            found.append(Anomaly("node_traceback", f"node {node} {logger}: {first}", at, details))
        elif level == "WARNING" and legal_warning(message) is None:
            found.append(Anomaly("node_warning", f"node {node} {logger}: {first}", at, details))
    if bare is not None:
        found.append(
            Anomaly(
                "node_traceback",
                f"node {node}: {(bare or [_TRACEBACK])[-1][:300]}",  # cut off at the end
                at,
                {"node": node, "file": source, "traceback": bare[-40:]},
            )
        )
    return found


@dataclass(frozen=True)
class Transaction:
    """One transaction of the transactional producer: sequences first..last, and what its
    client was told (committed, aborted, unknown)."""

    producer: str
    first: int
    last: int
    outcome: str
    t: float

    def values(self) -> list[str]:
        return [f"{self.producer}:{seq}" for seq in range(self.first, self.last + 1)]


def check_transactions(txns: Iterable[Transaction], log: Iterable[ReadRecord]) -> list[Anomaly]:
    """txn_partial, txn_aborted_visible, duplicate and unexpected_record over a transactional
    topic read back read_committed."""
    where: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for r in log:
        if r.value is not None:
            where[r.value].append((r.partition, r.offset))
    out: list[Anomaly] = []
    sent: set[str] = set()
    for txn in txns:
        values = txn.values()
        sent.update(values)
        there = [v for v in values if v in where]
        detail = {"producer": txn.producer, "first": txn.first, "last": txn.last}
        if txn.outcome == "aborted" and there:
            out.append(
                Anomaly(
                    "txn_aborted_visible",
                    f"{len(there)} of {len(values)} records of aborted transaction "
                    f"{txn.producer}:{txn.first}..{txn.last} were read",
                    txn.t,
                    detail | {"found": there[:10]},
                )
            )
        elif (there and len(there) < len(values)) or (txn.outcome == "committed" and not there):
            out.append(
                Anomaly(
                    "txn_partial",
                    f"{txn.outcome} transaction {txn.producer}:{txn.first}..{txn.last}: "
                    f"{len(there)} of {len(values)} records read",
                    txn.t,
                    detail | {"missing": [v for v in values if v not in where][:10]},
                )
            )
    for value, places in sorted(where.items()):
        if value not in sent:
            out.append(
                Anomaly(
                    "unexpected_record",
                    f"{value!r} at {places} is in no transaction",
                    None,
                    {"value": value, "found_at": places},
                )
            )
        elif len(places) > 1:
            out.append(
                Anomaly(
                    "duplicate",
                    f"{value} of a transaction is in the log {len(places)} times: {places}",
                    None,
                    {"value": value, "found_at": places},
                )
            )
    return out


def summarize(anomalies: list[Anomaly]) -> dict[str, int]:
    counts: dict[str, int] = defaultdict(int)
    for a in anomalies:
        counts[a.kind] += 1
    return dict(sorted(counts.items()))


def _load(path: Any) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """A producer's file -> its delivery (`dr`) and transaction (`txn`) rows, and its other
    rows (start, stopping, done; errors and restarts)."""
    rows, meta = [], {"errors": [], "restarts": 0}
    with open(path, encoding="utf-8") as f:
        for line in f:
            if not line.endswith("\n"):
                break  # a torn last line of a killed producer
            row = json.loads(line)
            kind = row.get("kind")
            if kind in ("dr", "txn"):
                rows.append(row)
            elif kind == "error":
                meta["errors"].append(row)
            elif kind == "restart":
                meta["restarts"] += 1
            elif kind in ("start", "stopping", "done"):
                meta[kind] = row
    return rows, meta


def load_deliveries(path: Any) -> tuple[list[Delivery], dict[str, Any]]:
    """A producer's file -> its delivery reports and its other rows (start, done, errors)."""
    rows, meta = _load(path)
    deliveries = [
        Delivery(
            producer=row["value"].rpartition(":")[0],
            seq=row["seq"],
            value=row["value"],
            partition=row["partition"],
            offset=row["offset"],
            error=row["error"],
            sent=row["sent"],
            t=row["t"],
            epoch=row.get("epoch"),
        )
        for row in rows
        if row["kind"] == "dr"
    ]
    return deliveries, meta


def load_transactions(path: Any) -> tuple[list[Transaction], dict[str, Any]]:
    """A transactional producer's file -> its transactions and its other rows."""
    rows, meta = _load(path)
    name = meta.get("start", {}).get("name", "")
    txns = [
        Transaction(name, row["first"], row["last"], row["outcome"], row["t"])
        for row in rows
        if row["kind"] == "txn"
    ]
    return txns, meta
