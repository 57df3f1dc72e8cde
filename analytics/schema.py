"""Spark schemas derived from the dataclasses the nodes write with (epoch/history.py,
epoch/replica_state.py), so the writer and the audit cannot drift apart."""

from __future__ import annotations

import dataclasses
import typing

from pyspark.sql import types as T

from epoch.history import RECORD_TYPES, Record
from epoch.replica_state import ReplicaState

_ATOMS: dict[object, T.DataType] = {int: T.LongType(), str: T.StringType()}


def _spark_type(tp: object) -> T.DataType:
    if tp in _ATOMS:
        return _ATOMS[tp]
    if typing.get_origin(tp) is list:
        (item,) = typing.get_args(tp)
        return T.ArrayType(_spark_type(item))
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return dataclass_schema(tp)
    raise TypeError(f"no Spark type for {tp!r}")


def dataclass_schema(cls: type) -> T.StructType:
    hints = typing.get_type_hints(cls)
    return T.StructType(
        [T.StructField(f.name, _spark_type(hints[f.name])) for f in dataclasses.fields(cls)]
    )


def history_schema() -> T.StructType:
    """One struct holding every record type's fields (absent ones are null): `kind` tells which
    apply. A field two record types share must mean the same type in both."""
    merged: dict[str, T.DataType] = {"kind": T.StringType(), "v": T.LongType()}
    for cls in RECORD_TYPES.values():
        for field in dataclass_schema(cls).fields:
            known = merged.setdefault(field.name, field.dataType)
            if known != field.dataType:
                raise TypeError(
                    f"history field {field.name} has two types: {known}, {field.dataType}"
                )
    return T.StructType([T.StructField(name, tp) for name, tp in merged.items()])


COMMON_FIELDS = [f.name for f in dataclasses.fields(Record)]
HISTORY_KINDS = sorted(RECORD_TYPES)
REPLICA_SCHEMA = dataclass_schema(ReplicaState)
