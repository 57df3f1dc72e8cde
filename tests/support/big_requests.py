"""The largest request an API's entry bound admits, and one entry past it, built from the
request schema (kio's, or raftlog's where kio has none), so an API is covered the day it is
served.

The entries all go to the request's first array (found depth first through struct fields),
each element with every array of its own empty and its strings unique and as long as a
Kafka name may be (249 characters): one flat list of names, topics, ids or filters, which
is the shape a hostile client sends and a handler's per-entry work meets. The rest of the
request holds zeros, empty strings and empty arrays; codes (int8) are 1, the ANY of the ACL
enums, since Kafka closes the connection of an ACL request with an UNKNOWN (0) code.
"""

from __future__ import annotations

import functools
import io
from collections.abc import Callable
from dataclasses import MISSING, dataclass, fields
from datetime import timedelta
from typing import Any
from uuid import UUID

from kio.serial import entity_writer
from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveField,
    PrimitiveTupleField,
    classify_field,
    get_field_tag,
    get_schema_field_type,
    is_optional,
)
from kio.static.primitive import Records

from kafka_api.codec import request_schema
from kafka_api.entry_bounds import max_entries

NAME_LENGTH = 249  # Kafka's longest topic name


@dataclass(frozen=True)
class BigRequest:
    api_key: int
    version: int
    entries: int  # in the request's first array
    body: bytes
    flexible_header: bool
    path: tuple[str, ...]  # the fields down to the array filled; () if there is none

    @property
    def array(self) -> str | None:
        return self.path[-1] if self.path else None


def largest(
    api_key: int, version: int, bound: int | None = None
) -> tuple[BigRequest, BigRequest | None]:
    """The request holding its API's bound of entries (or `bound`) in its first array, and
    the same with one entry more (None if the request has no array)."""
    request_type = request_schema(api_key, version)
    bound = max_entries(api_key) if bound is None else bound
    serial = [0]
    found = _first_array(request_type)
    if found is None:
        return _framed(api_key, version, _entity(request_type, None, (), serial), (), 0), None
    path, element = found
    elements = [element(serial) for _ in range(bound + 1)]
    return tuple(  # type: ignore[return-value]
        _framed(
            api_key,
            version,
            _entity(request_type, path, tuple(elements[:count]), serial),
            path,
            count,
        )
        for count in (bound, bound + 1)
    )


def _framed(
    api_key: int, version: int, entity: Any, path: tuple[str, ...], count: int
) -> BigRequest:
    body = io.BytesIO()
    entity_writer(type(entity))(body, entity)
    return BigRequest(
        api_key, version, count, body.getvalue(), bool(type(entity).__flexible__), path
    )


Element = Callable[[list[int]], Any]


def _first_array(entity_type: type) -> tuple[tuple[str, ...], Element] | None:
    """The path to the first array (depth first through struct fields) and a maker of its
    elements."""
    for f in _fields(entity_type):
        kind = classify_field(f)
        if isinstance(kind, EntityTupleField):
            return (f.name,), functools.partial(_entity, kind.type_, None, ())
        if isinstance(kind, PrimitiveTupleField):
            return (f.name,), functools.partial(_value, f)
        if isinstance(kind, EntityField) and not is_optional(f):
            inner = _first_array(kind.type_)
            if inner is not None:
                return (f.name, *inner[0]), inner[1]
    return None


def _entity(
    entity_type: type, path: tuple[str, ...] | None, elements: tuple[Any, ...], serial: list[int]
) -> Any:
    """An entity with `elements` in the array at `path`, everything else empty or zero."""
    values: dict[str, Any] = {}
    for f in _fields(entity_type):
        kind = classify_field(f)
        if path and f.name == path[0]:
            values[f.name] = (
                elements if len(path) == 1 else _entity(kind.type_, path[1:], elements, serial)
            )
        elif isinstance(kind, EntityTupleField | PrimitiveTupleField):
            values[f.name] = None if is_optional(f) else ()
        elif isinstance(kind, EntityField):
            values[f.name] = None if is_optional(f) else _entity(kind.type_, None, (), serial)
        else:
            values[f.name] = _value(f, serial)
    return entity_type(**values)


@functools.cache
def _fields(entity_type: type) -> tuple[Any, ...]:
    """The fields to set: tagged ones with a default are left to it."""
    return tuple(f for f in fields(entity_type) if get_field_tag(f) is None or f.default is MISSING)


def _value(f: Any, serial: list[int]) -> Any:
    """A unique full-length string, or zero of the field's type (a code 1)."""
    kafka_type = get_schema_field_type(f)
    if kafka_type == "string":
        serial[0] += 1
        return f"{serial[0]:08d}".ljust(NAME_LENGTH, "x")
    if kafka_type == "bytes":
        return b""
    if kafka_type == "records":
        return None if is_optional(f) else Records(b"")
    if kafka_type.startswith("timedelta"):
        return timedelta(0)
    if kafka_type == "bool":
        return False
    if kafka_type == "uuid":
        return None if is_optional(f) else UUID(int=0)
    assert isinstance(classify_field(f), PrimitiveField | PrimitiveTupleField), f
    return 1 if kafka_type == "int8" else 0
