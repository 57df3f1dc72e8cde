"""The invariants the audit checks. Each returns the rows that break it, in one shape
(VIOLATION_COLUMNS), so they are reported, counted and stored the same way."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from analytics.tables import NODE_TP, TP, Inputs, current

VIOLATION_COLUMNS = ["invariant", "topic", "partition", "node", "term", "time_ms", "detail"]


@dataclass(frozen=True)
class Derived:
    """What the invariants read besides the inputs."""

    truncations: DataFrame
    agreement: DataFrame


def _rows(
    df: DataFrame, name: str, detail: Column, node: Column | str = "node", term: str = "term"
) -> DataFrame:
    return df.select(
        F.lit(name).alias("invariant"),
        "topic",
        "partition",
        F.col(node).cast("long").alias("node") if isinstance(node, str) else node.alias("node"),
        F.col(term).cast("long").alias("term"),
        (F.col("time_ms") if "time_ms" in df.columns else F.lit(None))
        .cast("long")
        .alias("time_ms"),
        detail.alias("detail"),
    )


def epochs_increase(i: Inputs, d: Derived) -> DataFrame:
    """Epochs strictly increase along every log (each replica's epoch cache), and a replica's
    term never goes back in its node's journal. An ack record's term is the epoch the
    acknowledged records were written in, not the node's term: a leader that stepped down
    answers for what it wrote and committed before, so acks are left out of the journal
    order, as are markers a transaction coordinator gave up (recorded in its own term, not
    the partition's) and a dropped replica's last term (in memory, maybe never durable: a
    node killed before deleting the files reopens them in the durable one). A replica the
    node opened empty after dropping one starts again at term 0: each incarnation is
    followed on its own."""
    along = Window.partitionBy(*NODE_TP).orderBy("pos")
    cache = i.spans.withColumn("prev", F.lag("epoch").over(along)).filter(
        F.col("epoch") <= F.col("prev")
    )
    journal_order = Window.partitionBy(*NODE_TP, "incarnation").orderBy("seq")
    journal = (
        i.events.filter(
            ~F.col("kind").isin("ack", "replica_dropped")
            & ~((F.col("kind") == "txn_marker") & (F.col("marker_offset") < 0))
        )
        .withColumn("prev", F.lag("term").over(journal_order))
        .withColumn("prev_kind", F.lag("kind").over(journal_order))
        .filter(F.col("term") < F.col("prev"))
    )
    return _rows(
        cache.withColumnRenamed("epoch", "term"),
        "epochs_increase",
        F.format_string(
            "epoch cache: epoch %d at offset %d follows epoch %d", "term", "start_offset", "prev"
        ),
    ).unionByName(
        _rows(
            journal,
            "epochs_increase",
            F.format_string(
                "journal: %s record in term %d after a %s record in term %d",
                "kind",
                "term",
                "prev_kind",
                "prev",
            ),
        )
    )


def epoch_starts_never_decrease(i: Inputs, d: Derived) -> DataFrame:
    """Along each replica's epoch cache, every epoch starts at or after the previous one."""
    along = Window.partitionBy(*NODE_TP).orderBy("pos")
    bad = (
        i.spans.withColumn("prev_start", F.lag("start_offset").over(along))
        .withColumn("prev", F.lag("epoch").over(along))
        .filter(F.col("start_offset") < F.col("prev_start"))
    )
    return _rows(
        bad.withColumnRenamed("epoch", "term"),
        "epoch_starts_never_decrease",
        F.format_string(
            "epoch %d starts at %d, before epoch %d's start %d",
            "term",
            "start_offset",
            "prev",
            "prev_start",
        ),
    )


def one_leader_per_term(i: Inputs, d: Derived) -> DataFrame:
    """No two nodes led, or were seen as leader of, the same (partition, term)."""
    claims = (
        i.events.filter(F.col("kind") == "election")
        .select(*TP, "term", "time_ms", F.col("node").alias("claimed"), "node")
        .unionByName(
            i.events.filter((F.col("kind") == "leader") & (F.col("leader") >= 0)).select(
                *TP, "term", "time_ms", F.col("leader").alias("claimed"), "node"
            )
        )
    )
    bad = (
        claims.groupBy(*TP, "term")
        .agg(
            F.countDistinct("claimed").alias("leaders"),
            F.min("time_ms").alias("time_ms"),
            F.sort_array(F.collect_set("claimed")).alias("claimed"),
        )
        .filter(F.col("leaders") > 1)
    )
    return _rows(
        bad,
        "one_leader_per_term",
        F.concat(
            F.lit("leaders recorded for this term: nodes "),
            F.concat_ws(", ", F.col("claimed").cast("array<string>")),
        ),
        node=F.lit(None).cast("long"),
    )


def high_watermark_never_decreases(i: Inputs, d: Derived) -> DataFrame:
    """On every node, each replica's high watermark only moves forward, restarts included. A
    replica the node dropped (moved off) and one it opened empty later are two replicas: the
    new one starts again from 0."""
    hw = i.events.filter(F.col("kind").isin("hw", "election"))
    order = Window.partitionBy(*NODE_TP, "incarnation").orderBy("seq")
    bad = hw.withColumn("prev", F.lag("high_watermark").over(order)).filter(
        F.col("high_watermark") < F.col("prev")
    )
    return _rows(
        bad,
        "high_watermark_never_decreases",
        F.format_string("high watermark went from %d back to %d", "prev", "high_watermark"),
    )


def prefix_deleted_not_lost(i: Inputs, d: Derived) -> DataFrame:
    """Records are missing from the front of a replica's log only where its node recorded why:
    a log start it moved to at or past them (DeleteRecords, retention, or a start learned with
    a snapshot install: `log_start` records), or a snapshot install that resumed there. What
    lies below a recorded log start was deleted; below none, it was lost. Only the records of
    the replica collected (its node's last incarnation) explain it: a dropped one's do not."""
    ev = current(i.events)
    explained = (
        ev.filter(F.col("kind") == "log_start")
        .select(*NODE_TP, F.col("log_start_offset").alias("explained"))
        .unionByName(
            ev.filter(F.col("kind") == "snapshot_install").select(
                *NODE_TP, F.col("resume_offset").alias("explained")
            )
        )
        .groupBy(*NODE_TP)
        .agg(F.max("explained").alias("explained"))
    )
    bad = (
        i.replicas.filter(F.col("log_start_offset") > 0)
        .join(explained, NODE_TP, "left")
        .filter(F.col("log_start_offset") > F.coalesce("explained", F.lit(0)))
    )
    return _rows(
        bad,
        "prefix_deleted_not_lost",
        F.format_string(
            "the log starts at %d, but this node recorded a log start of at most %s",
            "log_start_offset",
            F.coalesce(F.col("explained").cast("string"), F.lit("0 (none recorded)")),
        ),
    )


def no_committed_record_truncated(i: Inputs, d: Derived) -> DataFrame:
    """No truncation cut committed entries (below the cutting node's own high watermark, or
    held at that offset with that epoch in a replica's committed log), nor records an
    acks=all producer had been told were committed."""
    bad = d.truncations.filter("cut_committed")
    return _rows(
        bad,
        "no_committed_record_truncated",
        F.format_string(
            "cut offsets [%d, %d) (epochs %s); own high watermark already at %s; "
            "in the committed log of nodes %s; acks=all answered up to %s",
            "from_offset",
            "to_offset",
            F.concat_ws(",", F.col("entry_terms").cast("array<string>")),
            F.coalesce(F.col("hw_before").cast("string"), F.lit("-")),
            F.coalesce(F.concat_ws(",", F.col("committed_on").cast("array<string>")), F.lit("-")),
            F.coalesce(F.col("acks_all_end").cast("string"), F.lit("-")),
        ),
    )


def offset_for_leader_epoch_agrees(i: Inputs, d: Derived) -> DataFrame:
    """Each OffsetForLeaderEpoch answer a leader gave agrees with its own epoch cache: the
    largest epoch <= the one asked for, ending where the next epoch starts (or, for the
    leader's own term, no earlier than where that term started). Answers about epochs that
    retention has since removed cannot be checked and are skipped, as are answers an earlier
    replica of the node gave before it was dropped (its cache went with it)."""
    answers = current(i.events).filter(F.col("kind") == "offset_for_leader_epoch")
    cache = i.spans.select(*NODE_TP, "epoch", "start_offset")
    ordered = Window.partitionBy(*NODE_TP).orderBy("epoch")
    with_next = cache.withColumn("next_start", F.lead("start_offset").over(ordered))
    first = cache.groupBy(*NODE_TP).agg(F.min("epoch").alias("first_epoch"))
    own = with_next.select(
        *NODE_TP,
        F.col("epoch").alias("answer_epoch"),
        F.col("start_offset").alias("answer_start"),
        F.col("next_start").alias("answer_next"),
    )
    best = (
        answers.select("seq", *NODE_TP, "requested_epoch", "term")
        .join(cache, NODE_TP)
        .filter((F.col("epoch") <= F.col("requested_epoch")) & (F.col("epoch") <= F.col("term")))
        .groupBy("seq")
        .agg(F.max("epoch").alias("expected_epoch"))
    )
    a = (
        answers.join(own, [*NODE_TP, "answer_epoch"], "left")
        .join(first, NODE_TP, "left")
        .join(best, "seq", "left")
    )
    earlier = F.col("requested_epoch") < F.col("term")
    wrong_epoch = (
        earlier
        & F.col("expected_epoch").isNotNull()
        & ~F.col("answer_epoch").eqNullSafe(F.col("expected_epoch"))
    )
    missing = (
        (F.col("answer_epoch") >= F.coalesce("first_epoch", F.lit(0)))
        & (F.col("answer_epoch") < F.col("term"))
        & F.col("answer_start").isNull()
    )
    own_term = (
        (F.col("answer_epoch") == F.col("term"))
        & F.col("answer_start").isNotNull()
        & (F.col("end_offset") < F.col("answer_start"))
    )
    wrong_end = (
        (F.col("answer_epoch") < F.col("term"))
        & F.col("answer_start").isNotNull()
        & ~F.col("end_offset").eqNullSafe(F.col("answer_next"))
    )
    bad = a.filter(wrong_epoch | missing | own_term | wrong_end)
    return _rows(
        bad,
        "offset_for_leader_epoch_agrees",
        F.format_string(
            "asked epoch %d, answered epoch %d ending at %d; the cache says epoch %s ending at %s",
            "requested_epoch",
            "answer_epoch",
            "end_offset",
            F.coalesce(F.col("expected_epoch").cast("string"), F.lit("-1")),
            F.coalesce(F.col("answer_next").cast("string"), F.lit("the log end")),
        ),
    )


def replica_epoch_caches_agree(i: Inputs, d: Derived) -> DataFrame:
    """Every pair of replicas holds the same (epoch, start offset) entries in the committed
    prefix they share."""
    return _rows(
        d.agreement.withColumn("time_ms", F.lit(None)),
        "replica_epoch_caches_agree",
        F.format_string(
            "epoch %d starts at %s on node %d and at %s on node %d",
            "epoch",
            F.coalesce(F.col("start_a").cast("string"), F.lit("(absent)")),
            "node_a",
            F.coalesce(F.col("start_b").cast("string"), F.lit("(absent)")),
            "node_b",
        ),
        node="node_a",
        term="epoch",
    )


def transactions_whole(i: Inputs, d: Derived) -> DataFrame:
    """A transaction is read whole or not at all: every marker written for a coordinator's
    decision says what the decision said, on a partition the decision names; one decision
    is never recorded both ways; and a decision its coordinator completed has a marker on
    every partition it names (or one given up: the partition gone, or its producer fenced
    since). Decisions and markers are recorded once committed, so no truncation shows here."""
    ev = i.events
    key = ["decision_partition", "decision_offset"]
    decisions = ev.filter(F.col("kind") == "txn_decision").select(
        "topic",
        F.col("partition").alias("decision_partition"),
        "decision_offset",
        "node",
        "term",
        "time_ms",
        "transactional_id",
        F.col("commit").alias("decided"),
        "partitions",
    )
    twice = (
        decisions.groupBy(*key)
        .agg(
            F.countDistinct("decided").alias("ways"),
            F.first("topic").alias("topic"),
            F.first("node").alias("node"),
            F.first("term").alias("term"),
            F.first("transactional_id").alias("transactional_id"),
        )
        .filter(F.col("ways") > 1)
        .withColumn("partition", F.col("decision_partition"))
    )
    once = decisions.dropDuplicates(key)
    markers = ev.filter(F.col("kind") == "txn_marker").select(
        "topic",
        "partition",
        "node",
        "term",
        "time_ms",
        "commit",
        "marker_offset",
        *key,
        F.concat_ws(":", "topic", F.col("partition").cast("string")).alias("tp"),
    )
    contrary = (
        markers.filter(F.col("marker_offset") >= 0)
        .join(once.drop("topic", "node", "term", "time_ms"), key)
        .filter(
            (F.col("commit") != F.col("decided")) | ~F.array_contains("partitions", F.col("tp"))
        )
    )
    completed = ev.filter(F.col("kind") == "txn_complete").select(
        F.col("partition").alias("decision_partition"), "decision_offset"
    )
    expected = once.join(completed.distinct(), key).select(
        *key, "node", "term", "time_ms", "transactional_id", F.explode("partitions").alias("tp")
    )
    missing = (
        expected.join(markers.select(*key, "tp").distinct(), [*key, "tp"], "left_anti")
        .withColumn("topic", F.substring_index("tp", ":", 1))
        .withColumn("partition", F.substring_index("tp", ":", -1).cast("long"))
    )
    decision_name = F.format_string(
        "decision %d of __transaction_state-%d (%s)",
        "decision_offset",
        "decision_partition",
        "transactional_id",
    )
    return (
        _rows(
            contrary,
            "transactions_whole",
            F.format_string(
                "%s marker at offset %d for %s, which said %s for partitions %s",
                F.when(F.col("commit") == 1, "commit").otherwise("abort"),
                "marker_offset",
                decision_name,
                F.when(F.col("decided") == 1, "commit").otherwise("abort"),
                F.concat_ws(",", "partitions"),
            ),
        )
        .unionByName(
            _rows(
                twice,
                "transactions_whole",
                F.concat(decision_name, F.lit(" recorded as both commit and abort")),
            )
        )
        .unionByName(
            _rows(
                missing,
                "transactions_whole",
                F.concat(F.lit("completed "), decision_name, F.lit(" has no marker here")),
            )
        )
    )


def stale_markers_fenced(i: Inputs, d: Derived) -> DataFrame:
    """A partition takes no marker from a transaction coordinator older than one whose marker
    it already holds for the producer (Kafka's checkCoordinatorEpoch): along a partition's
    log, no marker of a producer comes from a lower coordinator epoch than an earlier one's,
    or carries out an earlier decision (its offset in the producer's `__transaction_state`
    partition: decisions are taken one after the other) than an earlier one did. Such a
    marker is a deposed coordinator's retry, and it ends whatever transaction the producer
    has open there by then (seed 2123: an aborted one read as committed). A decision's marker
    written again (its coordinator's retry, or a new coordinator finishing its predecessor's
    decision) holds; markers are recorded once committed, so one cut by Raft is not compared;
    an admin's abort writes no record. Histories written before markers recorded their
    coordinator epoch are checked by decision only."""
    key = ["decision_partition", "decision_offset"]
    decisions = (
        i.events.filter(F.col("kind") == "txn_decision")
        .groupBy(F.col("partition").alias("decision_partition"), "decision_offset")
        .agg(
            F.first("transactional_id").alias("transactional_id"),
            F.sort_array(F.collect_set("term")).alias("epochs"),
        )
    )
    earlier = (
        Window.partitionBy(*TP, "producer_id", "decision_partition")
        .orderBy("marker_offset")
        .rowsBetween(Window.unboundedPreceding, -1)
    )
    marker_columns = ["producer_id", "producer_epoch", "commit", "marker_offset"]
    older = F.coalesce(F.col("decision_offset") < F.col("latest.decision_offset"), F.lit(False))
    fenced = F.coalesce(
        F.col("coordinator_epoch") < F.col("newest.coordinator_epoch"), F.lit(False)
    )
    stale = (
        i.events.filter((F.col("kind") == "txn_marker") & (F.col("marker_offset") >= 0))
        .select(*TP, "node", "term", "time_ms", *marker_columns, *key, "coordinator_epoch")
        .withColumn("latest", F.max(F.struct("decision_offset", "marker_offset")).over(earlier))
        .withColumn("newest", F.max(F.struct("coordinator_epoch", "marker_offset")).over(earlier))
        .filter(older | fenced)
        .withColumn("older", older)
        .withColumn("fenced", fenced)
        .join(decisions, key, "left")
        .join(
            decisions.select(
                F.col("decision_partition").alias("latest_partition"),
                F.col("decision_offset").alias("latest_decision"),
                F.col("epochs").alias("latest_epochs"),
            ),
            (F.col("decision_partition") == F.col("latest_partition"))
            & (F.col("latest.decision_offset") == F.col("latest_decision")),
            "left",
        )
    )
    marker = F.format_string(
        "%s marker at offset %d (producer %d, epoch %d, coordinator epoch %s) for decision %d "
        "of __transaction_state-%d (%s, coordinator epochs %s)",
        F.when(F.col("commit") == 1, "commit").otherwise("abort"),
        "marker_offset",
        "producer_id",
        "producer_epoch",
        F.coalesce(F.col("coordinator_epoch").cast("string"), F.lit("not recorded")),
        "decision_offset",
        "decision_partition",
        F.coalesce("transactional_id", F.lit("not recorded")),
        _listed("epochs"),
    )
    after_decision = F.format_string(
        ", after the marker at offset %d for the later decision %d (coordinator epochs %s)",
        "latest.marker_offset",
        "latest.decision_offset",
        _listed("latest_epochs"),
    )
    after_epoch = F.format_string(
        ", after coordinator epoch %d's marker at offset %d",
        "newest.coordinator_epoch",
        "newest.marker_offset",
    )
    return _rows(
        stale,
        "stale_markers_fenced",
        F.concat(
            marker,
            F.when(F.col("older"), after_decision).otherwise(""),
            F.when(F.col("fenced"), after_epoch).otherwise(""),
        ),
    )


def _listed(values: str) -> Column:
    """An array column as `a,b,c`, `-` when absent (no such record)."""
    listed = F.concat_ws(",", F.col(values).cast("array<string>"))
    return F.when(F.col(values).isNull(), F.lit("-")).otherwise(listed)


def _configurations(ev: DataFrame) -> DataFrame:
    """Each committed configuration entry of a partition's Raft group once (every node that
    learned of its commit recorded it), with `until`: the offset of the next committed one
    (the log position where this one stopped being in force), null for the last."""
    committed = (
        ev.filter(F.col("kind") == "conf_committed")
        .groupBy(*TP, "index", "entry_term")
        .agg(
            F.first("offset").alias("offset"),
            F.first("voters").alias("voters"),
            F.first("outgoing").alias("outgoing"),
            F.min("time_ms").alias("time_ms"),
        )
    )
    return committed.withColumn(
        "until", F.lead("offset").over(Window.partitionBy(*TP).orderBy("index"))
    )


def _conf_name(voters: str, outgoing: str) -> Column:
    """{1,2,4} or, joint, {1,2,4 & 1,2,3}: as raft/membership.py prints a configuration."""
    new = F.concat_ws(",", F.sort_array(voters).cast("array<string>"))
    old = F.concat_ws(",", F.sort_array(outgoing).cast("array<string>"))
    return F.concat(
        F.lit("{"),
        new,
        F.when(F.size(outgoing) > 0, F.concat(F.lit(" & "), old)).otherwise(""),
        F.lit("}"),
    )


def _majority(holders: str, voters: str) -> Column:
    return F.size(F.array_intersect(holders, voters)) * 2 > F.size(voters)


def acknowledged_on_configuration_majorities(i: Inputs, d: Derived) -> DataFrame:
    """Every record acknowledged to an acks=all producer is held by a majority of each
    configuration of its partition's group in force when or after it was written: one whose
    entry lies after the record in the log, or the one the record was written under (during
    a joint configuration a majority of both halves; learners never count). Held: a replica
    collected now has the record's epoch at its offset, or has deleted it (below its log
    start); a copy now gone (moved off: no replica collected, or one the node dropped before
    opening the replica collected) recorded, in the record's epoch or later, a high
    watermark past it or a configuration entry past it that it appended and did not cut, or
    was dropped with its log ending past it and its last entry of that epoch or later. A
    configuration entry recorded committed is never cut later. Partitions whose
    configuration never changed have no configuration record and are checked by the other
    invariants only."""
    ev = i.events
    confs = _configurations(ev)
    cut = (
        ev.filter(F.col("kind") == "conf_truncated")
        .select(*NODE_TP, "index", "entry_term", "term", F.col("time_ms").alias("cut_ms"))
        .join(
            confs.select(*TP, "index", "entry_term", "voters", "outgoing"),
            [*TP, "index", "entry_term"],
        )
        .withColumn("time_ms", F.col("cut_ms"))
    )
    starts = (
        ev.filter(F.col("kind") == "election")
        .groupBy(*TP, F.col("term").alias("epoch"))
        .agg(F.min("log_end_offset").alias("epoch_start"))
    )
    acked = (
        ev.filter((F.col("kind") == "ack") & (F.col("acks") == -1))
        .select(*TP, F.col("term").alias("epoch"), (F.col("end_offset") - 1).alias("x"))
        .join(starts, [*TP, "epoch"], "left")
        .filter(F.col("x") >= F.coalesce("epoch_start", F.lit(0)))
        .groupBy(*TP, "epoch")
        .agg(F.collect_list("x").alias("xs"))
    )
    # Per configuration and epoch only the last acknowledged record it must hold: holding
    # it in that epoch (or past it, or below the log start) means holding those before it.
    # (Arrays per epoch, not a join of every ack with every configuration after it.)
    need = (
        confs.join(acked, TP)
        .withColumn(
            "x",
            F.array_max(F.filter("xs", lambda v: F.col("until").isNull() | (v < F.col("until")))),
        )
        .filter(F.col("x").isNotNull())
        .drop("xs")
    )
    key = [*TP, "index", "entry_term", "epoch"]
    members = need.select(*key, "x", F.explode(F.array_union("voters", "outgoing")).alias("node"))
    along = Window.partitionBy(*NODE_TP).orderBy("pos")
    spans = (
        i.spans.withColumn("next_start", F.lead("start_offset").over(along))
        .join(i.replicas.select(*NODE_TP, "log_start_offset", "log_end_offset"), NODE_TP)
        .select(
            *NODE_TP,
            "epoch",
            "start_offset",
            F.coalesce("next_start", "log_end_offset").alias("span_end"),
        )
    )
    on_replica = members.join(i.replicas.select(*NODE_TP, "log_start_offset"), NODE_TP)
    held_now = (
        on_replica.filter(F.col("x") < F.col("log_start_offset"))
        .select(*key, "node")
        .unionByName(
            on_replica.join(spans, [*NODE_TP, "epoch"])
            .filter((F.col("start_offset") <= F.col("x")) & (F.col("x") < F.col("span_end")))
            .select(*key, "node")
        )
    )
    copy = [*NODE_TP, "incarnation"]
    kept = ev.filter(F.col("kind") == "conf_appended").join(
        ev.filter(F.col("kind") == "conf_truncated").select(*copy, "index", "entry_term"),
        [*copy, "index", "entry_term"],
        "left_anti",
    )
    # The copies gone: every incarnation of a node's replica but the one collected now (a
    # voter moved off and back holds a new copy, maybe still catching up as a learner).
    now = i.replicas.select(*NODE_TP, F.lit(True).alias("collected")).join(
        ev.groupBy(*NODE_TP).agg(F.max("incarnation").alias("now_incarnation")), NODE_TP, "left"
    )
    reach = (
        ev.filter(F.col("kind").isin("hw", "election"))
        .select(*copy, "term", F.col("high_watermark").alias("reach"))
        .unionByName(
            kept.select(*copy, F.col("entry_term").alias("term"), F.col("offset").alias("reach"))
        )
        .unionByName(
            # What a dropped copy's log held: an ack answers only a record committed in its
            # own epoch, so a log whose last entry is of that epoch or later holds it there.
            ev.filter(F.col("kind") == "replica_dropped").select(
                *copy, F.col("last_epoch").alias("term"), F.col("log_end_offset").alias("reach")
            )
        )
        .join(now, NODE_TP, "left")
        .filter(F.col("collected").isNull() | (F.col("incarnation") < F.col("now_incarnation")))
        .groupBy(*NODE_TP, "term")
        .agg(F.max("reach").alias("reach"))
    )
    held_before = (
        members.join(reach, NODE_TP)
        .filter((F.col("term") >= F.col("epoch")) & (F.col("reach") > F.col("x")))
        .select(*key, "node")
    )
    holders = (
        held_now.unionByName(held_before)
        .groupBy(*key)
        .agg(F.sort_array(F.collect_set("node")).alias("holders"))
    )
    short = (
        need.join(holders, key, "left")
        .withColumn("holders", F.coalesce("holders", F.array().cast("array<bigint>")))
        .filter(
            ~_majority("holders", "voters")
            | ((F.size("outgoing") > 0) & ~_majority("holders", "outgoing"))
        )
    )
    return _rows(
        short,
        "acknowledged_on_configuration_majorities",
        F.format_string(
            "acknowledged offset %d (epoch %d) is held by nodes [%s] only, not a majority of "
            "configuration %s (entry %d of term %d)",
            "x",
            "epoch",
            F.concat_ws(",", F.col("holders").cast("array<string>")),
            _conf_name("voters", "outgoing"),
            "index",
            "entry_term",
        ),
        node=F.lit(None).cast("long"),
        term="epoch",
    ).unionByName(
        _rows(
            cut,
            "acknowledged_on_configuration_majorities",
            F.format_string(
                "committed configuration entry %d of term %d (%s) was cut from this log",
                "index",
                "entry_term",
                _conf_name("voters", "outgoing"),
            ),
        )
    )


Check = Callable[[Inputs, Derived], DataFrame]
INVARIANTS: dict[str, Check] = {
    check.__name__: check
    for check in (
        epochs_increase,
        epoch_starts_never_decrease,
        one_leader_per_term,
        high_watermark_never_decreases,
        no_committed_record_truncated,
        prefix_deleted_not_lost,
        offset_for_leader_epoch_agrees,
        replica_epoch_caches_agree,
        transactions_whole,
        stale_markers_fenced,
        acknowledged_on_configuration_majorities,
    )
}


def describe(name: str) -> str:
    doc = INVARIANTS[name].__doc__ or ""
    return " ".join(doc.split())
