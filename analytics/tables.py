"""The audit's inputs as DataFrames, and the metrics derived from them (DataFrame API only:
nothing here brings a table to the driver)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from analytics.schema import HISTORY_KINDS, REPLICA_SCHEMA, history_schema

TP = ["topic", "partition"]
NODE_TP = ["node", "topic", "partition"]
# Records a leader writes while it leads: its last one bounds when it was last seen leading.
LEADER_ACTIVITY = ["election", "ack", "hw", "offset_for_leader_epoch"]


@dataclass
class Inputs:
    events: DataFrame  # every readable history record, `seq` = order within its node's journal
    unreadable: DataFrame  # lines that are not a known record (value, file)
    replicas: DataFrame  # one row per (node, partition) replica, term/hw filled from history
    spans: DataFrame  # one row per epoch cache entry: node, topic, partition, pos, epoch, ...


def load(spark: SparkSession, collected: Path) -> Inputs:
    """Reads nodes/*/history.jsonl and nodes/*/replicas.jsonl under `collected`.

    Journal order matters (a node's terms and high watermark must never go back), so each line
    keeps its position: files are read whole (the job sets a split size larger than any
    journal) and monotonically_increasing_id() grows along a file within its task."""
    lines = spark.read.text(str(collected / "nodes" / "*" / "history.jsonl")).select(
        F.monotonically_increasing_id().alias("seq"),
        F.input_file_name().alias("file"),
        "value",
    )
    parsed = lines.withColumn("r", F.from_json("value", history_schema()))
    readable = (
        F.col("r").isNotNull()
        & F.col("r.kind").isin(HISTORY_KINDS)
        & F.col("r.node").isNotNull()
        & F.col("r.topic").isNotNull()
        & F.col("r.partition").isNotNull()
        & F.col("r.term").isNotNull()
        & F.col("r.time_ms").isNotNull()
    )
    events = _incarnations(parsed.filter(readable).select("seq", "r.*").drop("v"))
    unreadable = parsed.filter(~readable & (F.trim("value") != "")).select("file", "value")

    raw = spark.read.schema(REPLICA_SCHEMA).json(str(collected / "nodes" / "*" / "replicas.jsonl"))
    known = (
        current(events)
        .groupBy(NODE_TP)
        .agg(
            F.max("term").alias("h_term"),
            F.max(F.when(F.col("kind").isin("hw", "election"), F.col("high_watermark"))).alias(
                "h_hw"
            ),
        )
    )
    replicas = (
        raw.join(known, NODE_TP, "left")
        .withColumn("term", F.when(F.col("term") >= 0, F.col("term")).otherwise(F.col("h_term")))
        .withColumn(
            "high_watermark",
            F.when(F.col("high_watermark") >= 0, F.col("high_watermark")).otherwise(
                F.coalesce("h_hw", F.lit(0))
            ),
        )
        .drop("h_term", "h_hw")
    )
    spans = replicas.select(*NODE_TP, F.posexplode("epochs").alias("pos", "e")).select(
        *NODE_TP, "pos", "e.epoch", "e.start_offset", "e.bytes"
    )
    return Inputs(events, unreadable, replicas.drop("epochs"), spans)


def _incarnations(events: DataFrame) -> DataFrame:
    """Numbers each node's replicas of a partition in its journal (`incarnation`): a replica
    the node dropped (moved off, its files deleted) and one it opened empty later are two
    replicas, the second starting again from nothing (term 0, high watermark 0, an empty
    log). A `replica_dropped` record ends one, a `replica_created` record starts the next;
    journals written before those records existed are one incarnation, 0."""
    order = Window.partitionBy(*NODE_TP).orderBy("seq")
    created = F.when(F.col("kind") == "replica_created", 1).otherwise(0)
    dropped = F.when(F.col("kind") == "replica_dropped", 1).otherwise(0)
    upto = order.rowsBetween(Window.unboundedPreceding, Window.currentRow)
    before = order.rowsBetween(Window.unboundedPreceding, -1)
    return events.withColumn(
        "incarnation",
        (F.sum(created).over(upto) + F.coalesce(F.sum(dropped).over(before), F.lit(0))).cast(
            "long"
        ),
    )


def current(events: DataFrame) -> DataFrame:
    """Each node's records of its last incarnation of each partition: the replica collected
    now, if the node holds one (what an earlier, dropped replica recorded says nothing
    about it)."""
    last = events.groupBy(*NODE_TP).agg(F.max("incarnation").alias("incarnation"))
    return events.join(last, [*NODE_TP, "incarnation"])


def elections(inputs: Inputs) -> DataFrame:
    """One row per election: who won which term, where it started, and how long the partition
    went without a leader. `leaderless_ms` runs from the first node that gave up on the old
    leader (started an election) to the win; `since_leader_seen_ms` from the old leader's last
    recorded act as leader, which includes the time it took to notice a dead leader."""
    ev = inputs.events
    won = (
        ev.filter(F.col("kind") == "election")
        .groupBy(*TP, "term")
        .agg(
            F.min("time_ms").alias("time_ms"),
            F.min("node").alias("leader"),
            F.min("log_end_offset").alias("log_end_offset"),
        )
    )
    order = Window.partitionBy(*TP).orderBy("term")
    won = won.withColumn("previous_term", F.lag("term").over(order)).withColumn(
        "previous_leader", F.lag("leader").over(order)
    )
    gave_up = ev.filter((F.col("kind") == "leader") & (F.col("leader") < 0)).select(
        *TP, F.col("term").alias("t"), F.col("time_ms").alias("gave_up_ms")
    )
    cond = [won.topic == gave_up.topic, won.partition == gave_up.partition]
    cond += [gave_up.t <= won.term, F.coalesce(won.previous_term, F.lit(-1)) < gave_up.t]
    noticed = (
        won.join(gave_up, cond, "left")
        .groupBy(won.topic, won.partition, won.term)
        .agg(F.min("gave_up_ms").alias("gave_up_ms"))
    )
    activity = (
        ev.filter(F.col("kind").isin(LEADER_ACTIVITY))
        .groupBy(*TP, F.col("term").alias("previous_term"), F.col("node").alias("previous_leader"))
        .agg(F.max("time_ms").alias("leader_seen_ms"))
    )
    return (
        won.join(noticed, [*TP, "term"], "left")
        .join(activity, [*TP, "previous_term", "previous_leader"], "left")
        .select(
            *TP,
            "term",
            "leader",
            "time_ms",
            "log_end_offset",
            "previous_term",
            "previous_leader",
            F.greatest(F.col("time_ms") - F.col("gave_up_ms"), F.lit(0)).alias("leaderless_ms"),
            F.greatest(F.col("time_ms") - F.col("leader_seen_ms"), F.lit(0)).alias(
                "since_leader_seen_ms"
            ),
        )
    )


def election_summary(inputs: Inputs, elected: DataFrame) -> DataFrame:
    """Per partition: how many elections, how often (per hour of recorded history), how long
    without a leader, and which nodes won how many."""
    span = inputs.events.groupBy(*TP).agg(
        ((F.max("time_ms") - F.min("time_ms")) / 3_600_000).alias("hours")
    )
    wins = (
        elected.groupBy(*TP, "leader")
        .count()
        .groupBy(*TP)
        .agg(
            F.concat_ws(
                ", ",
                F.sort_array(F.collect_list(F.format_string("node %d: %d", "leader", "count"))),
            ).alias("winners")
        )
    )
    return (
        elected.groupBy(*TP)
        .agg(
            F.count("*").alias("elections"),
            F.max("leaderless_ms").alias("max_leaderless_ms"),
            F.expr("percentile_approx(leaderless_ms, 0.5)").alias("median_leaderless_ms"),
            F.max("since_leader_seen_ms").alias("max_since_leader_seen_ms"),
        )
        .join(span, TP, "left")
        .join(wins, TP, "left")
        .withColumn(
            "per_hour",
            F.when(F.col("hours") > 0, F.round(F.col("elections") / F.col("hours"), 2)),
        )
        .drop("hours")
    )


def epoch_timeline(inputs: Inputs, elected: DataFrame) -> DataFrame:
    """Per (partition, epoch): leader, offsets (from the replicas' epoch caches), times (from
    the elections), records (offsets spanned) and bytes on disk. Epochs that were won but left
    nothing in any log (their entries were all truncated) are kept with `in_log` false."""
    cached = inputs.spans.groupBy(*TP, "epoch").agg(
        F.min("start_offset").alias("start_offset"), F.max("bytes").alias("bytes")
    )
    log_end = inputs.replicas.groupBy(*TP).agg(F.max("log_end_offset").alias("log_end"))
    in_log = Window.partitionBy(*TP).orderBy("epoch")
    cached = (
        cached.withColumn("next_start", F.lead("start_offset").over(in_log))
        .join(log_end, TP, "left")
        .withColumn("end_offset", F.coalesce("next_start", "log_end"))
        .drop("next_start", "log_end")
    )
    seen = inputs.events.filter((F.col("kind") == "leader") & (F.col("leader") >= 0))
    named = seen.groupBy(*TP, "term").agg(F.min("leader").alias("named_leader"))
    won = elected.select(*TP, F.col("term").alias("epoch"), "leader", "time_ms", "log_end_offset")
    last_event = inputs.events.groupBy(*TP).agg(F.max("time_ms").alias("last_ms"))
    every = Window.partitionBy(*TP).orderBy("epoch")
    return (
        cached.join(won, [*TP, "epoch"], "full")
        .join(named.withColumnRenamed("term", "epoch"), [*TP, "epoch"], "left")
        .join(last_event, TP, "left")
        .select(
            *TP,
            "epoch",
            F.coalesce("leader", "named_leader").alias("leader"),
            F.col("start_offset").isNotNull().alias("in_log"),
            F.coalesce("start_offset", "log_end_offset").alias("start_offset"),
            "end_offset",
            F.col("time_ms").alias("start_ms"),
            "last_ms",
            F.coalesce(F.col("end_offset") - F.col("start_offset"), F.lit(0)).alias("records"),
            F.coalesce("bytes", F.lit(0)).alias("bytes"),
        )
        .withColumn("end_ms", F.lead("start_ms").over(every))
        .withColumn("duration_ms", F.coalesce("end_ms", "last_ms") - F.col("start_ms"))
        .drop("last_ms")
    )


def truncations(inputs: Inputs, elected: DataFrame) -> DataFrame:
    """Every real truncation with what it cut, and whether any of it had been acknowledged: to
    an acks=1 producer (lost data, which acks=1 permits) or to an acks=all producer, or was
    committed (either is a broken promise).

    Committed means the cut entries themselves, not their offsets: the cutting node's own
    high watermark had passed them, or some replica's committed log holds the cut epoch at
    the cut offset (the same entries: one leader per term). Another node's high watermark
    above the cut offset says nothing: a new leader commits its own entries at offsets where
    a deposed leader still holds its uncommitted tail, and cutting that tail is Raft."""
    ev = inputs.events
    cuts = ev.filter(F.col("kind") == "truncation").select(
        "seq",
        *NODE_TP,
        "incarnation",
        "time_ms",
        "term",
        "reason",
        "from_offset",
        "to_offset",
        "entry_terms",
        "records",
        "batches",
        "bytes",
    )
    epoch_start = elected.select(*TP, F.col("term").alias("cut_epoch"), "log_end_offset")
    acks = ev.filter(F.col("kind") == "ack").select(
        *TP,
        F.col("term").alias("cut_epoch"),
        F.col("acks").alias("ack_level"),
        F.col("end_offset").alias("ack_end"),
        F.col("time_ms").alias("ack_ms"),
    )
    per_epoch = cuts.select(
        "seq",
        *TP,
        "time_ms",
        "from_offset",
        F.explode(F.array_distinct("entry_terms")).alias("cut_epoch"),
    )
    covered = (
        per_epoch.join(epoch_start, [*TP, "cut_epoch"], "left")
        .join(acks, [*TP, "cut_epoch"])
        .filter(F.col("ack_ms") <= F.col("time_ms"))
        .filter(
            F.col("ack_end")
            > F.greatest("from_offset", F.coalesce("log_end_offset", F.col("from_offset")))
        )
        .groupBy("seq")
        .agg(
            F.max(F.when(F.col("ack_level") == 1, F.col("ack_end"))).alias("acks1_end"),
            F.max(F.when(F.col("ack_level") == -1, F.col("ack_end"))).alias("acks_all_end"),
        )
    )
    # The cutting replica's own high watermark: an earlier replica of the node, dropped, says
    # nothing about what this one holds (a new replica may copy a deposed leader's tail first).
    hws = ev.filter(F.col("kind").isin("hw", "election")).select(
        *NODE_TP, "incarnation", F.col("seq").alias("hw_seq"), F.col("high_watermark").alias("hw")
    )
    own_hw = (
        cuts.select("seq", *NODE_TP, "incarnation")
        .join(hws, [*NODE_TP, "incarnation"])
        .filter(F.col("hw_seq") < F.col("seq"))
        .groupBy("seq")
        .agg(F.max("hw").alias("hw_before"))
    )
    along = Window.partitionBy(*NODE_TP).orderBy("pos")
    committed_spans = (
        inputs.spans.withColumn("next_start", F.lead("start_offset").over(along))
        .join(inputs.replicas.select(*NODE_TP, "log_end_offset", "high_watermark"), NODE_TP)
        .select(
            *TP,
            F.col("node").alias("holder"),
            F.col("epoch").alias("first_epoch"),
            "start_offset",
            F.least(F.coalesce("next_start", "log_end_offset"), F.col("high_watermark")).alias(
                "committed_end"
            ),
        )
    )
    in_committed_log = (
        cuts.select("seq", *TP, "from_offset", F.array_min("entry_terms").alias("first_epoch"))
        .join(committed_spans, [*TP, "first_epoch"])
        .filter(
            (F.col("start_offset") <= F.col("from_offset"))
            & (F.col("from_offset") < F.col("committed_end"))
        )
        .groupBy("seq")
        .agg(F.sort_array(F.collect_set("holder")).alias("committed_on"))
    )
    return (
        cuts.join(covered, "seq", "left")
        .join(own_hw, "seq", "left")
        .join(in_committed_log, "seq", "left")
        .withColumn("lost_acks1", F.col("acks1_end").isNotNull())
        .withColumn(
            "cut_committed",
            F.col("acks_all_end").isNotNull()
            | (F.coalesce("hw_before", F.lit(-1)) > F.col("from_offset"))
            | F.col("committed_on").isNotNull(),
        )
    )


def replica_agreement(inputs: Inputs) -> DataFrame:
    """Each pair of replicas compared on the epochs both logs must hold: those starting inside
    the committed prefix they share (below both high watermarks) and above both log starts
    (retention trims each replica on its own). One row per epoch where they differ."""
    r = inputs.replicas.select(*NODE_TP, "log_start_offset", "high_watermark")
    pairs = (
        r.alias("a")
        .join(
            r.alias("b"),
            (F.col("a.topic") == F.col("b.topic"))
            & (F.col("a.partition") == F.col("b.partition"))
            & (F.col("a.node") < F.col("b.node")),
        )
        .select(
            F.col("a.topic").alias("topic"),
            F.col("a.partition").alias("partition"),
            F.col("a.node").alias("node_a"),
            F.col("b.node").alias("node_b"),
            F.greatest("a.log_start_offset", "b.log_start_offset").alias("low"),
            F.least("a.high_watermark", "b.high_watermark").alias("high"),
        )
    )

    def side(name: str) -> DataFrame:
        s = inputs.spans.select(
            *TP,
            F.col("node").alias(f"node_{name}"),
            "epoch",
            F.col("start_offset").alias(f"start_{name}"),
        )
        return (
            pairs.join(s, [*TP, f"node_{name}"])
            .filter(
                (F.col(f"start_{name}") > F.col("low")) & (F.col(f"start_{name}") < F.col("high"))
            )
            .select(*TP, "node_a", "node_b", "epoch", f"start_{name}")
        )

    keys = [*TP, "node_a", "node_b", "epoch"]
    return (
        side("a")
        .join(side("b"), keys, "full")
        .filter(~F.col("start_a").eqNullSafe(F.col("start_b")))
    )


def partition_summary(timeline: DataFrame, summary: DataFrame, cut: DataFrame) -> DataFrame:
    per_cut = cut.groupBy(*TP).agg(
        F.count("*").alias("truncations"),
        F.sum("records").alias("truncated_records"),
        F.sum("bytes").alias("truncated_bytes"),
        F.sum(F.col("lost_acks1").cast("int")).alias("truncations_losing_acks1"),
    )
    epochs = timeline.groupBy(*TP).agg(
        F.count("*").alias("epochs"),
        F.max("epoch").alias("latest_epoch"),
        F.max("end_offset").alias("log_end_offset"),
    )
    zero: dict[str, bool | float | int | str] = {  # what fillna takes
        "truncations": 0,
        "truncated_records": 0,
        "truncated_bytes": 0,
        "truncations_losing_acks1": 0,
        "elections": 0,
    }
    return (
        epochs.join(summary.select(*TP, "elections", "winners", "max_leaderless_ms"), TP, "left")
        .join(per_cut, TP, "left")
        .fillna(zero)
        .orderBy(*TP)
    )


def time_bucket(column: str, seconds: int) -> Column:
    return (F.floor(F.col(column) / (seconds * 1000)) * seconds * 1000).alias("bucket_ms")
