"""`raftlog transactions list|describe`: Kafka transactions as kafka-transactions.sh shows
them, over the Kafka protocol (kafka-python's KafkaAdminClient: ListTransactions on every
broker, DescribeTransactions at the transactional id's coordinator).

`list` shows every transactional id the coordinators hold (state, producer id, coordinator),
optionally filtered as ListTransactions filters; `describe` shows one id's producer, epoch,
state, timeout, start time, how long it has been running and its partitions.
"""

from __future__ import annotations

import argparse
import sys
import time
from datetime import UTC, datetime
from typing import Any, TextIO

from raftlog_app import client_config
from raftlog_app.kafka_command import admin_call, table

CLIENT_ID = "raftlog-transactions"
STATES = (
    "Empty",
    "Ongoing",
    "PrepareCommit",
    "PrepareAbort",
    "CompleteCommit",
    "CompleteAbort",
    "PrepareEpochFence",
)


def admin_client(bootstrap: str) -> Any:
    """The one place the command's Kafka client is made (tests replace it)."""
    return client_config.admin(bootstrap, CLIENT_ID)


def add_parsers(sub: Any) -> list[argparse.ArgumentParser]:
    """`raftlog transactions ...`; returns the action parsers (the caller adds --bootstrap,
    --data and --command-config, and sets what runs them from `run_transactions`)."""
    txn = sub.add_parser("transactions", help="list and describe Kafka transactions")
    txn_sub = txn.add_subparsers(metavar="ACTION", required=True)
    listing = txn_sub.add_parser("list", help="every transactional id the coordinators hold")
    listing.add_argument(
        "--state",
        action="append",
        default=[],
        choices=STATES,
        help="only transactions in this state (repeatable)",
    )
    listing.add_argument(
        "--producer-id",
        action="append",
        default=[],
        type=int,
        metavar="ID",
        help="only this producer id's transactions (repeatable)",
    )
    listing.add_argument(
        "--duration-ms",
        type=int,
        metavar="MS",
        help="only transactions that started more than MS milliseconds ago",
    )
    listing.set_defaults(run_transactions=lambda bootstrap, a: transactions_list(bootstrap, a))
    describe = txn_sub.add_parser("describe", help="one transactional id's transaction")
    describe.add_argument("transactional_id")
    describe.set_defaults(
        run_transactions=lambda bootstrap, a: transactions_describe(bootstrap, a.transactional_id)
    )
    return [listing, describe]


def _state(value: Any) -> str:
    """kafka-python's TransactionState enum, or a plain string, as Kafka names it."""
    return str(getattr(value, "value", value))


def transactions_list(bootstrap: str, args: argparse.Namespace, out: TextIO = sys.stdout) -> int:
    """One row per transactional id: its state, producer id and coordinator (ListTransactions
    on every broker, as kafka-transactions.sh list)."""
    if args.duration_ms is not None and args.duration_ms < 0:
        print("raftlog: --duration-ms must be 0 or more", file=sys.stderr)
        return 2
    by_broker = admin_call(
        lambda: admin_client(bootstrap),
        lambda admin: admin.list_transactions(
            state_filters=args.state or None,
            producer_id_filters=args.producer_id or None,
            duration_filter_ms=args.duration_ms,
        ),
        "cannot list transactions",
    )
    if by_broker is None:
        return 1
    rows = [["TRANSACTIONAL-ID", "STATE", "PRODUCER-ID", "COORDINATOR"]]
    listed = sorted(
        (t.transactional_id, _state(t.state), t.producer_id, broker)
        for broker, listings in by_broker.items()
        for t in listings
    )
    for txn_id, state, producer_id, broker in listed:
        rows.append([txn_id, state, str(producer_id), str(broker)])
    table(rows, out)
    return 0


def transactions_describe(bootstrap: str, transactional_id: str, out: TextIO = sys.stdout) -> int:
    """The transactional id's transaction, as kafka-transactions.sh describe shows it, one
    row; 1 if its coordinator does not know it."""
    from kafka.errors import KafkaError, TransactionalIdNotFoundError

    try:
        admin = admin_client(bootstrap)
        try:
            described = admin.describe_transactions([transactional_id])
        finally:
            admin.close()
    except TransactionalIdNotFoundError:
        print(f"raftlog: transactional id {transactional_id} does not exist", file=sys.stderr)
        return 1
    except KafkaError as exc:
        print(f"raftlog: cannot describe {transactional_id}: {exc!r}", file=sys.stderr)
        return 1
    d = described.get(transactional_id)
    if d is None:
        print(f"raftlog: no answer for transactional id {transactional_id}", file=sys.stderr)
        return 1
    start = int(d.transaction_start_time_ms)
    partitions = sorted((tp.topic, tp.partition) for tp in d.topic_partitions)
    rows = [
        [
            "TRANSACTIONAL-ID",
            "COORDINATOR",
            "PRODUCER-ID",
            "EPOCH",
            "STATE",
            "TIMEOUT-MS",
            "START-TIME",
            "DURATION-MS",
            "PARTITIONS",
        ],
        [
            transactional_id,
            str(d.coordinator_id),
            str(d.producer_id),
            str(d.producer_epoch),
            _state(d.state),
            str(d.transaction_timeout_ms),
            _time(start),
            str(max(0, int(time.time() * 1000) - start)) if start >= 0 else "-",
            ",".join(f"{topic}-{index}" for topic, index in partitions) or "-",
        ],
    ]
    table(rows, out)
    return 0


def _time(ms: int) -> str:
    """Milliseconds since the epoch as UTC ISO 8601, "-" for none (-1)."""
    if ms < 0:
        return "-"
    try:
        when = datetime.fromtimestamp(ms / 1000, UTC)
    except (OverflowError, ValueError, OSError):
        return str(ms)
    return when.strftime("%Y-%m-%dT%H:%M:%S.") + f"{when.microsecond // 1000:03d}Z"
