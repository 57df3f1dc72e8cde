"""admin_call, which the acl, groups and transactions commands make their Kafka calls
through: the client is closed whatever the call does, and a call Kafka refuses is one line on
stderr and None (the command exits 1), not a traceback."""

from __future__ import annotations

import io

import pytest
from kafka.errors import KafkaTimeoutError

from raftlog_app import acl_cli
from raftlog_app.cli import _parser
from raftlog_app.kafka_command import admin_call, table


class Admin:
    def __init__(self) -> None:
        self.closed = 0

    def close(self) -> None:
        self.closed += 1


def test_the_client_is_closed_and_a_refusal_is_one_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    admin = Admin()
    assert admin_call(lambda: admin, lambda a: ("answer", a is admin), "cannot x") == (
        "answer",
        True,
    )
    assert admin.closed == 1

    def refused(_: Admin) -> None:
        raise KafkaTimeoutError("no broker")

    assert admin_call(lambda: admin, refused, "cannot list ACLs") is None
    assert admin.closed == 2
    assert capsys.readouterr().err == "raftlog: cannot list ACLs: KafkaTimeoutError('no broker')\n"

    def broken(_: Admin) -> None:
        raise ValueError("a bug")

    with pytest.raises(ValueError, match="a bug"):  # not Kafka's: a traceback, as before
        admin_call(lambda: admin, broken, "cannot x")
    assert admin.closed == 3


def test_a_command_whose_client_cannot_be_made_exits_1(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def unreachable(bootstrap: str) -> Admin:
        raise KafkaTimeoutError(f"Unable to bootstrap from {bootstrap}")

    monkeypatch.setattr(acl_cli, "admin_client", unreachable)
    args = _parser().parse_args(["acl", "list"])
    assert acl_cli.acl_list("h:1", args, io.StringIO()) == 1
    assert capsys.readouterr().err == (
        "raftlog: cannot list ACLs: KafkaTimeoutError('Unable to bootstrap from h:1')\n"
    )


def test_a_table_is_left_aligned_columns_two_spaces_apart() -> None:
    out = io.StringIO()
    table([["A", "LONGER"], ["wide-cell", "x"]], out)
    assert out.getvalue() == "A          LONGER\nwide-cell  x\n"
