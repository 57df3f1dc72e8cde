"""A null (length -1, or 0 in a flexible version's compact form) in a request field the schema
does not let be null is refused by the bounds walk (kafka_api/bounds.py), as Kafka's parser
refuses it: kio decoded it to None, and handlers expecting a list or a string failed on it
(CreateTopics v2+ `topics`, CreateAcls `creations`: an ERROR logged, a response holding None
that would not encode). Every request schema kio has, every version: each array, string and
bytes field, and each string element of an array, set to null one at a time; a null where
the schema allows one still passes.

The null is put in place by encoding the request twice, the field empty and holding one
element (or character): the first byte that differs is the end of the field's length, which
then becomes the null marker. Tagged fields are left out (their value sits inside a size).
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from dataclasses import MISSING, dataclass, fields, replace
from datetime import timedelta
from typing import Any
from uuid import UUID

import pytest
from kio.schema.index import api_key_map, schema_name_map
from kio.serial import entity_writer
from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveField,
    PrimitiveTupleField,
    classify_field,
    get_field_tag,
    get_schema_field_type,
)
from kio.static.constants import EntityType
from kio.static.primitive import Records

from kafka_api import codec
from kafka_api.bounds import NullNotAllowed, _element_type, _nullable, check_body
from kafka_api.handlers import HANDLERS

SERVED = {
    (key, version)
    for key, handler in HANDLERS.items()
    for version in range(handler.MIN_VERSION, handler.MAX_VERSION + 1)
}
SCHEMAS = sorted(
    SERVED
    | {
        (key, version)
        for key, name in api_key_map.items()
        for version, entities in schema_name_map[name].items()
        if EntityType.request in entities
    }
)


@dataclass(frozen=True)
class Target:
    path: tuple[str, ...]  # entity fields, through the first element of each array
    kafka_type: str  # "array", or the string / bytes type
    element: bool  # a string element of a primitive array, not the field itself
    nullable: bool


def _targets(entity_type: type, path: tuple[str, ...] = ()) -> Iterator[Target]:
    for f in _fields(entity_type):
        if get_field_tag(f) is not None:
            continue
        kind = classify_field(f)
        at = (*path, f.name)
        primitive = isinstance(kind, PrimitiveField | PrimitiveTupleField)
        kafka_type = get_schema_field_type(f) if primitive else ""
        if isinstance(kind, EntityField):
            yield from _targets(kind.type_, at)
        elif isinstance(kind, EntityTupleField):
            yield Target(at, "array", False, _nullable(f.type))
            yield from _targets(kind.type_, at)
        elif isinstance(kind, PrimitiveTupleField):
            yield Target(at, "array", False, _nullable(f.type))
            if kafka_type in ("string", "bytes"):
                yield Target(at, kafka_type, True, _nullable(_element_type(f.type)))
        elif kafka_type in ("string", "bytes"):
            yield Target(at, kafka_type, False, _nullable(f.type))


def _fields(entity_type: type) -> tuple[Any, ...]:
    """Tagged fields with a default are left to it."""
    return tuple(f for f in fields(entity_type) if get_field_tag(f) is None or f.default is MISSING)


def _full(entity_type: type) -> Any:
    """Every struct present, every array holding one element, every string "x"."""
    values: dict[str, Any] = {}
    for f in _fields(entity_type):
        kind = classify_field(f)
        if isinstance(kind, EntityField):
            values[f.name] = _full(kind.type_)
        elif isinstance(kind, EntityTupleField):
            values[f.name] = (_full(kind.type_),)
        elif isinstance(kind, PrimitiveTupleField):
            values[f.name] = (_value(get_schema_field_type(f)),)
        else:
            values[f.name] = _value(get_schema_field_type(f))
    return entity_type(**values)


def _value(kafka_type: str) -> Any:
    return {
        "string": "x",
        "bytes": b"x",
        "records": Records(b""),
        "bool": False,
        "uuid": UUID(int=1),
        "float64": 0.0,
        "timedelta_i32": timedelta(0),
        "timedelta_i64": timedelta(0),
    }.get(kafka_type, 0)


def _set(entity: Any, path: tuple[str, ...], value: Any) -> Any:
    if len(path) == 1:
        return replace(entity, **{path[0]: value})
    inner = getattr(entity, path[0])
    if isinstance(inner, tuple):
        return replace(entity, **{path[0]: (_set(inner[0], path[1:], value),)})
    return replace(entity, **{path[0]: _set(inner, path[1:], value)})


def _get(entity: Any, path: tuple[str, ...]) -> Any:
    for name in path:
        entity = getattr(entity, name)
        if name != path[-1] and isinstance(entity, tuple):
            entity = entity[0]
    return entity


def _encoded(entity: Any) -> bytes:
    out = io.BytesIO()
    entity_writer(type(entity))(out, entity)
    return out.getvalue()


def _with_null(request_type: type, target: Target) -> tuple[bytes, bytes]:
    """The request with the target empty, and with it null."""
    full = _full(request_type)
    one = _get(full, target.path)
    empty: Any = ("",) if target.element else {"array": (), "string": "", "bytes": b""}
    if not target.element:
        empty = empty[target.kafka_type]
    elif target.kafka_type == "bytes":
        empty = (b"",)
    assert one != empty
    a = _encoded(_set(full, target.path, empty))
    b = _encoded(_set(full, target.path, one))
    differs = next(i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y)
    if request_type.__flexible__:
        width, zero, null = 1, b"\x01", b"\x00"
    else:
        width = 2 if target.kafka_type == "string" else 4
        zero, null = b"\x00" * width, b"\xff" * width
    start = differs - width + 1
    assert a[start : start + width] == zero, (target, a, b)
    return a, a[:start] + null + a[start + width :]


@pytest.mark.parametrize(("key", "version"), SCHEMAS)
def test_a_null_is_refused_where_the_schema_does_not_allow_one(key: int, version: int) -> None:
    request_type = codec.request_schema(key, version)
    header = codec.RequestHeader(key, version, 1, None, 0)
    prefix = b"\x00" * request_type.__flexible__  # a flexible header's tagged section
    for target in _targets(request_type):
        empty, null = _with_null(request_type, target)
        check_body(request_type, empty, 0, 1_000)
        if target.nullable:
            check_body(request_type, null, 0, 1_000)
            continue
        with pytest.raises(NullNotAllowed):
            check_body(request_type, null, 0, 1_000)
        if (key, version) in SERVED:
            with pytest.raises(codec.MalformedRequest, match="NullNotAllowed"):
                codec.decode_request(header, prefix + null)


def test_the_nulls_kafka_allows_are_found() -> None:
    """The test above reaches the fields it means to: Metadata's topics (null: every topic),
    CreateTopics' config values and Produce's transactional id are nullable, CreateTopics v2's
    topics and CreateAcls' creations are not."""
    found = {
        (key, version, target.path, target.nullable)
        for key, version in [(3, 12), (19, 2), (0, 9), (30, 3)]
        for target in _targets(codec.request_schema(key, version))
    }
    assert {
        (3, 12, ("topics",), True),
        (19, 2, ("topics", "configs", "value"), True),
        (0, 9, ("transactional_id",), True),
        (19, 2, ("topics",), False),
        (30, 3, ("creations",), False),
        (30, 3, ("creations", "principal"), False),
    } <= found
