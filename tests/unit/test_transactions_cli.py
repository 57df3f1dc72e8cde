"""`raftlog transactions list|describe`: the options reach kafka-python's admin calls as
ListTransactions filters, and the answers are printed as tables. The admin client here is a
stand-in; against a real cluster in tests/e2e/test_transactions_admin.py."""

from __future__ import annotations

import io
import time
from typing import Any

import pytest
from kafka.admin._transactions import TransactionDescription, TransactionListing, TransactionState
from kafka.errors import TransactionalIdNotFoundError
from kafka.structs import TopicPartition

from raftlog_app import transactions_cli
from raftlog_app.cli import _parser, main


class Admin:
    def __init__(self) -> None:
        self.asked: list[tuple[str, Any]] = []
        self.described: dict[str, TransactionDescription] = {}

    def list_transactions(self, **filters: Any) -> dict[int, list[TransactionListing]]:
        self.asked.append(("list", filters))
        return {
            2: [TransactionListing("zeta", 1001, TransactionState.ONGOING)],
            1: [TransactionListing("alpha", 1000, TransactionState.EMPTY)],
        }

    def describe_transactions(self, ids: list[str]) -> dict[str, TransactionDescription]:
        self.asked.append(("describe", ids))
        if ids[0] not in self.described:
            raise TransactionalIdNotFoundError(ids[0])
        return {ids[0]: self.described[ids[0]]}

    def close(self) -> None:
        pass


@pytest.fixture
def admin(monkeypatch: pytest.MonkeyPatch) -> Admin:
    made = Admin()
    monkeypatch.setattr(transactions_cli, "admin_client", lambda bootstrap: made)
    return made


def rows(text: str) -> list[list[str]]:
    return [line.split() for line in text.splitlines() if line.strip()]


def test_list_passes_the_filters_and_prints_every_brokers_listing(admin: Admin) -> None:
    args = _parser().parse_args(
        ["transactions", "list", "--state", "Ongoing", "--producer-id", "7", "--duration-ms", "5"]
    )
    out = io.StringIO()
    assert transactions_cli.transactions_list("h:9092", args, out) == 0
    assert admin.asked == [
        (
            "list",
            {"state_filters": ["Ongoing"], "producer_id_filters": [7], "duration_filter_ms": 5},
        )
    ]
    assert rows(out.getvalue()) == [
        ["TRANSACTIONAL-ID", "STATE", "PRODUCER-ID", "COORDINATOR"],
        ["alpha", "Empty", "1000", "1"],
        ["zeta", "Ongoing", "1001", "2"],
    ]
    admin.asked.clear()
    transactions_cli.transactions_list(
        "h:9092", _parser().parse_args(["transactions", "list"]), io.StringIO()
    )
    assert admin.asked == [
        ("list", {"state_filters": None, "producer_id_filters": None, "duration_filter_ms": None})
    ]


def test_describe_prints_one_row_and_an_unknown_id_fails(
    admin: Admin, capsys: pytest.CaptureFixture[str]
) -> None:
    start = int(time.time() * 1000) - 5000
    admin.described["orders"] = TransactionDescription(
        coordinator_id=3,
        state=TransactionState.ONGOING,
        producer_id=1000,
        producer_epoch=2,
        transaction_timeout_ms=60000,
        transaction_start_time_ms=start,
        topic_partitions={TopicPartition("t", 1), TopicPartition("t", 0)},
    )
    out = io.StringIO()
    assert transactions_cli.transactions_describe("h:9092", "orders", out) == 0
    header, row = rows(out.getvalue())
    assert header[:6] == [
        "TRANSACTIONAL-ID",
        "COORDINATOR",
        "PRODUCER-ID",
        "EPOCH",
        "STATE",
        "TIMEOUT-MS",
    ]
    assert row[:6] == ["orders", "3", "1000", "2", "Ongoing", "60000"]
    assert row[6].endswith("Z") and 5000 <= int(row[7]) < 60_000
    assert row[8] == "t-0,t-1"
    assert main(["transactions", "describe", "nope", "--bootstrap", "h:9092"]) == 1
    assert "nope does not exist" in capsys.readouterr().err


def test_a_transaction_not_started_has_no_start_time_or_duration(admin: Admin) -> None:
    admin.described["idle"] = TransactionDescription(
        1, TransactionState.EMPTY, 5, 0, 60000, -1, set()
    )
    out = io.StringIO()
    assert transactions_cli.transactions_describe("h:9092", "idle", out) == 0
    assert rows(out.getvalue())[1][4:] == ["Empty", "60000", "-", "-", "-"]
