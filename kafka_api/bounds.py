"""Every length in a request body checked against the bytes received, before kio sees it.

kio's decoder is native code: an array that claims 2^32-2 entries makes it reserve that much
memory, and a failed allocation aborts the whole process (no exception reaches Python). So
a request body is first walked here along kio's own schema for its (API, version): each
string, bytes, records and array length must fit in what is left of the frame (an array
element takes at least one byte), and each tagged field's size too, and a null (length -1,
or 0 in a flexible version's compact form) is refused where the schema's field is not
nullable, as Kafka's parser refuses it: kio would hand it on as None, and a handler expecting
a list or a string would fail on it. Only then does kio decode it. The walk reads lengths and skips payloads, so its cost is one step per field
occurrence, not per byte.

The same walk counts the request's entries, every element of every array at every depth
(topics, partitions, ids, names, directories, filters, markers), against the API's bound
(kafka_api/entry_bounds.py), and stops at the first array that takes the count past it: a
request of a million names is refused after reading one length, never decoded.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, fields
from types import NoneType, UnionType
from typing import Any, Union, get_args, get_origin

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

from kafka_api.wire_writers import uvarint

_FIXED = {
    "bool": 1,
    "int8": 1,
    "int16": 2,
    "uint16": 2,
    "int32": 4,
    "timedelta_i32": 4,
    "int64": 8,
    "timedelta_i64": 8,
    "float64": 8,
    "uuid": 16,
}
_VARIABLE = frozenset({"string", "bytes", "records"})

# (frame, offset, the walk so far) -> offset after the field
Step = Callable[[memoryview, int, "_Walk"], int]


class OutOfBounds(Exception):
    """A length in the request does not fit in the bytes received."""


class NullNotAllowed(Exception):
    """A null where the request's schema allows none: malformed, as Kafka's parser finds."""


class TooManyEntries(Exception):
    """The request holds more entries than its API's bound: refused before it is decoded."""

    def __init__(self, field: str, entries: int, bound: int) -> None:
        super().__init__(f"{field}: {entries} entries or more in one request, at most {bound}")
        self.field = field
        self.bound = bound


@dataclass(frozen=True, slots=True)
class _Unknown:
    """A tagged section holding tags this version does not define."""

    count_start: int  # where the section's field count begins
    count_end: int
    kept: int  # fields kio knows
    spans: tuple[tuple[int, int], ...]  # the unknown fields, tag to end of data


class _Walk:
    """What one walk has found: unknown tagged sections, and the entries it may still meet."""

    __slots__ = ("unknown", "left", "bound")

    def __init__(self, bound: int) -> None:
        self.unknown: list[_Unknown] = []
        self.left = bound
        self.bound = bound

    def entries(self, count: int, name: str) -> None:
        self.left -= count
        if self.left < 0:
            raise TooManyEntries(name, self.bound - self.left, self.bound)


def check_body(
    entity_type: type, frame: bytes | memoryview, offset: int, max_entries: int
) -> bytes | None:
    """Walks `entity_type` over `frame` from `offset`, raising OutOfBounds at the first length
    that does not fit and TooManyEntries at the first array past `max_entries` in all. Kafka
    ignores tagged fields it does not know, kio refuses them: if there are any, returns a
    copy of `frame` without them (None if there are none)."""
    view = memoryview(frame)
    walk = _Walk(max_entries)
    _entity_step(entity_type)(view, offset, walk)
    return _without(view, walk.unknown) if walk.unknown else None


def _without(view: memoryview, unknown: list[_Unknown]) -> bytes:
    parts: list[bytes | memoryview] = []
    at = 0
    for u in sorted(unknown, key=lambda u: u.count_start):
        parts += [view[at : u.count_start], uvarint(u.kept)]
        at = u.count_end
        for start, end in u.spans:
            parts.append(view[at:start])
            at = end
    parts.append(view[at:])
    return b"".join(parts)


@functools.cache
def _entity_step(entity_type: type) -> Step:
    flexible = bool(getattr(entity_type, "__flexible__", False))
    steps: list[Step] = []
    fixed = 0  # consecutive fixed-size fields are checked as one run
    for f in fields(entity_type):
        if get_field_tag(f) is not None:
            continue
        size = _fixed_size(f)
        if size is not None:
            fixed += size
            continue
        if fixed:
            steps.append(_fixed_step(fixed))
            fixed = 0
        steps.append(_field_step(f, flexible))
    if fixed:
        steps.append(_fixed_step(fixed))
    tagged = {
        int(tag): _field_step(f, flexible, tagged=True)
        for f in fields(entity_type)
        if (tag := get_field_tag(f)) is not None
    }

    def step(view: memoryview, offset: int, walk: _Walk) -> int:
        for s in steps:
            offset = s(view, offset, walk)
        if flexible:
            offset = _tagged_section(view, offset, tagged, walk)
        return offset

    return step


def _fixed_size(f: Any) -> int | None:
    if not isinstance(classify_field(f), PrimitiveField):
        return None
    return _FIXED.get(get_schema_field_type(f))


def _fixed_step(size: int) -> Step:
    return lambda view, offset, _walk: _need(view, offset, size, "fixed fields")


def _field_step(f: Any, flexible: bool, tagged: bool = False) -> Step:
    kind = classify_field(f)
    if isinstance(kind, EntityField):
        inner = _entity_step(kind.type_)
        if tagged or not is_optional(f):
            return inner

        def nullable(view: memoryview, offset: int, walk: _Walk) -> int:
            """KIP-893: a nullable struct starts with an int8, -1 for null."""
            marker, offset = _int(view, offset, 1, f.name)
            return offset if marker < 0 else inner(view, offset, walk)

        return nullable
    nullable_array = _nullable(f.type)
    if isinstance(kind, EntityTupleField):
        element = _entity_step(kind.type_)

        def entities(view: memoryview, offset: int, walk: _Walk) -> int:
            count, offset = _array_length(view, offset, flexible, f.name, walk, nullable_array)
            for _ in range(count):
                offset = element(view, offset, walk)
            return offset

        return entities
    kafka_type = get_schema_field_type(f)
    if isinstance(kind, PrimitiveTupleField):
        size = _FIXED.get(kafka_type)
        nullable_element = _nullable(_element_type(f.type))

        def primitives(view: memoryview, offset: int, walk: _Walk) -> int:
            count, offset = _array_length(view, offset, flexible, f.name, walk, nullable_array)
            if size is not None:
                return _need(view, offset, count * size, f.name)
            for _ in range(count):
                offset = _variable(view, offset, flexible, kafka_type, f.name, nullable_element)
            return offset

        return primitives
    assert isinstance(kind, PrimitiveField)
    if kafka_type in _FIXED:
        size = _FIXED[kafka_type]
        return lambda view, offset, _walk: _need(view, offset, size, f.name)
    if kafka_type in _VARIABLE:
        may_be_null = _nullable(f.type)
        return lambda view, offset, _walk: _variable(
            view, offset, flexible, kafka_type, f.name, may_be_null
        )
    raise TypeError(f"unknown kafka_type {kafka_type!r} in field {f.name}")


def _nullable(annotation: Any) -> bool:
    """kio types a field Kafka lets be null as `X | None`; `tuple[X | None, ...]` is an array
    whose elements may be null, not a nullable array."""
    return get_origin(annotation) in (UnionType, Union) and NoneType in get_args(annotation)


def _element_type(annotation: Any) -> Any:
    """X of `tuple[X, ...]` or `tuple[X, ...] | None`."""
    if get_origin(annotation) in (UnionType, Union):
        (annotation,) = (a for a in get_args(annotation) if a is not NoneType)
    return get_args(annotation)[0]


def _need(view: memoryview, offset: int, size: int, name: str) -> int:
    end = offset + size
    if end > len(view):
        raise OutOfBounds(f"{name}: {size} bytes needed at {offset}, frame ends at {len(view)}")
    return end


def _int(view: memoryview, offset: int, size: int, name: str) -> tuple[int, int]:
    end = _need(view, offset, size, name)
    return int.from_bytes(view[offset:end], "big", signed=True), end


def _uvarint(view: memoryview, offset: int, name: str) -> tuple[int, int]:
    value = shift = 0
    while True:
        if offset >= len(view):
            raise OutOfBounds(f"{name}: varint runs past the end of the frame")
        byte = view[offset]
        offset += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, offset
        shift += 7
        if shift > 63:
            raise OutOfBounds(f"{name}: varint longer than 10 bytes")


def _length(
    view: memoryview, offset: int, flexible: bool, size: int, name: str, what: str, nullable: bool
) -> tuple[int, int]:
    """An array's count or a string's, bytes' or records' length: compact (an unsigned
    varint, one more than it) in a flexible version, else a signed int of `size` bytes.
    -1 is null, refused where the field is not nullable."""
    if flexible:
        raw, offset = _uvarint(view, offset, name)
        length = raw - 1
    else:
        length, offset = _int(view, offset, size, name)
    if length < -1:
        raise OutOfBounds(f"{name}: {what} length {length}")
    if length == -1 and not nullable:
        raise NullNotAllowed(f"{name}: null {what}, not nullable in this version")
    return length, offset


def _array_length(
    view: memoryview, offset: int, flexible: bool, name: str, walk: _Walk, nullable: bool
) -> tuple[int, int]:
    """Elements claimed (0 for null, where null is allowed); each takes at least one byte of
    what is left, and one of the entries the request may hold."""
    count, offset = _length(view, offset, flexible, 4, name, "array", nullable)
    count = max(count, 0)
    if count > len(view) - offset:
        raise OutOfBounds(f"{name}: {count} elements claimed, {len(view) - offset} bytes left")
    walk.entries(count, name)
    return count, offset


def _variable(
    view: memoryview, offset: int, flexible: bool, kafka_type: str, name: str, nullable: bool
) -> int:
    size = 2 if kafka_type == "string" else 4
    length, offset = _length(view, offset, flexible, size, name, kafka_type, nullable)
    return offset if length == -1 else _need(view, offset, length, name)


def _tagged_section(view: memoryview, offset: int, known: dict[int, Step], walk: _Walk) -> int:
    """A known tagged field is walked inside its own declared size: kio decodes it."""
    count_start = offset
    count, offset = _uvarint(view, offset, "tagged fields")
    count_end = offset
    if count > len(view) - offset:
        raise OutOfBounds(f"{count} tagged fields claimed, {len(view) - offset} bytes left")
    spans = []
    for _ in range(count):
        field_start = offset
        tag, offset = _uvarint(view, offset, "tag")
        size, offset = _uvarint(view, offset, "tagged field size")
        end = _need(view, offset, size, "tagged field")
        inner = known.get(tag)
        if inner is None:
            spans.append((field_start, end))
        else:
            inner(view[:end], offset, walk)
        offset = end
    if spans:
        walk.unknown.append(_Unknown(count_start, count_end, count - len(spans), tuple(spans)))
    return offset
