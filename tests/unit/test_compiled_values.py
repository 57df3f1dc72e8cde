"""The dataclasses a node builds per request in compiled modules have an __init__ of their own
(docs/architecture.md, "Compiled modules"): mypyc compiles it, while the one `dataclasses`
generates stays interpreted and cost up to 0.7 µs a value, ~4 % of a node's loop under small
writes. Written by hand, they must still be what the dataclass made: same fields and
defaults, equality, repr, and for the frozen ones immutability and hash."""

from __future__ import annotations

import dataclasses

import pytest

from kafka_api.codec import Encoded, RequestHeader
from kafka_api.context import ConnectionScope, RequestContext
from raftlog.api.values import ProduceResult
from raftlog.common.errors import ErrorCode, RecordErrors
from raftlog.raft import window_file
from raftlog.raft.core.values import (
    NONE,
    Entry,
    HardState,
    Message,
    MsgType,
    Ready,
    Role,
    SoftState,
)
from raftlog.storage.log import AppendResult
from raftlog.storage.log_reads import Location

OWN_INIT = [
    Location,
    RequestHeader,
    Encoded,
    RequestContext,
    AppendResult,
    window_file.Entry,
    Entry,
    Message,
    HardState,
    SoftState,
    Ready,
    ProduceResult,
]


@pytest.mark.parametrize("cls", OWN_INIT, ids=lambda cls: f"{cls.__module__}.{cls.__name__}")
def test_init_is_not_the_generated_one(cls: type) -> None:
    code = getattr(cls.__init__, "__code__", None)  # compiled: a slot wrapper, no code
    assert code is None or code.co_filename != "<string>"


def test_frozen_values_stay_frozen_and_hashable() -> None:
    location = Location(0, 1, 2, 3)
    values = [
        location,
        RequestHeader(0, 9, 7, "client", 10),
        Encoded(b"body", True, 0),
        AppendResult(0, 5, location, 1234),
        RequestContext(None, 3, "client", "10.0.0.1", "User:alice", None, ConnectionScope()),
        ProduceResult(ErrorCode.none, 7, -1, 0, None, ()),
    ]
    for value in values:
        field = dataclasses.fields(value)[0].name
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(value, field, 1)
        copy = dataclasses.replace(value)
        assert copy == value and hash(copy) == hash(value) and copy is not value
    assert repr(location) == "Location(segment_base=0, term=1, position=2, size=3)"
    assert Location(0, 1, 2, 4) != location
    context = RequestContext(None, 3, "client", "10.0.0.1")
    assert (context.principal, context.sasl, context.connection) == ("User:ANONYMOUS", None, None)


def test_defaults_equality_and_repr_are_the_dataclasses() -> None:
    assert ProduceResult() == ProduceResult(ErrorCode.none, -1, -1, -1, None, ())
    assert ProduceResult(base_offset=5) != ProduceResult(base_offset=6)
    refused = ProduceResult.refused(RecordErrors(ErrorCode.invalid_record, "no", ((0, "key"),)))
    assert (refused.error, refused.message, refused.record_errors) == (
        ErrorCode.invalid_record,
        "no",
        ((0, "key"),),
    )
    assert repr(ProduceResult(base_offset=3)) == (
        "ProduceResult(error=<ErrorCode.none: 0>, base_offset=3, log_append_time=-1, "
        "log_start_offset=-1, message=None, record_errors=())"
    )
    assert HardState() == HardState(0, NONE, 0)
    assert Entry(2, 5) == Entry(term=2, index=5, data=b"", conf=None)
    assert Entry(2, 5) != Entry(2, 6)
    message = Message(MsgType.APP, 1, 2, 3, commit=4)
    assert (message.index, message.entries, message.reject, message.conf) == (0, (), False, None)
    assert message == dataclasses.replace(message)
    soft = SoftState(1, Role.LEADER)
    ready = Ready(None, None, (), (message,), (), soft)
    assert ready.install is None and ready == Ready(None, None, (), (message,), (), soft)
    assert repr(soft) == "SoftState(leader=1, role=<Role.LEADER: 'leader'>)"
    entry = window_file.Entry(1, 2, 3, 4)
    assert (entry.location, entry.inline, entry.file_pos) == (None, None, 0)
    entry = window_file.Entry(1, 2, 3, 4, Location(0, 2, 8, 9), file_pos=40)
    assert window_file.Entry.unpack(entry.pack()) == window_file.Entry(1, 2, 3, 4, entry.location)
