"""kio decode/encode of request headers and bodies, and response framing.

Request headers are parsed here with struct rather than with kio: the header says which body
type follows, and Kafka ignores unknown tagged fields in a header where kio would raise. Readers
and writers are cached per type because kio builds them by walking the dataclass schema.
"""

from __future__ import annotations

import asyncio
import functools
import io
import struct
from collections.abc import Callable
from dataclasses import dataclass, fields
from types import ModuleType
from typing import Any, ParamSpec, cast

from kio.index import load_payload_module, load_request_schema, load_response_schema
from kio.serial import entity_reader, entity_writer
from kio.serial.readers import Reader, read_unsigned_varint
from kio.static.constants import EntityType
from kio.static.protocol import RequestPayload, ResponsePayload

from kafka_api.bounds import TooManyEntries, check_body
from kafka_api.entry_bounds import max_entries
from kafka_api.fetch_encoding import FETCH_API_KEY, encode_fetch_response
from kafka_api.legacy import MODULES as _NOT_IN_KIO
from kafka_api.metadata_encoding import METADATA_API_KEY, encode_metadata_response
from kafka_api.wire_writers import uvarint
from raftlog.common.heap import collection_paused
from raftlog.node.listener_metrics import response_error

_HEADER = struct.Struct(">hhih")  # api key, api version, correlation id, client id length
_INT32 = struct.Struct(">i")
_SIZE_PLACEHOLDER = b"\x00\x00\x00\x00"

Frame = bytes | memoryview  # read-only: kio refuses writable buffers


class MalformedRequest(Exception):
    """The frame cannot be understood; the connection that sent it is closed."""


@dataclass(frozen=True, slots=True, init=False)
class RequestHeader:
    """(Frozen, with an __init__ of its own: see docs/architecture.md, "Compiled modules".)"""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    size: int  # bytes of the fixed part; a flexible header's tagged fields follow

    def __init__(
        self, api_key: int, api_version: int, correlation_id: int, client_id: str | None, size: int
    ) -> None:
        object.__setattr__(self, "api_key", api_key)
        object.__setattr__(self, "api_version", api_version)
        object.__setattr__(self, "correlation_id", correlation_id)
        object.__setattr__(self, "client_id", client_id)
        object.__setattr__(self, "size", size)


def decode_header(frame: Frame) -> RequestHeader:
    """The fixed part of request headers v1 and v2, which is all a server needs before it knows
    whether it supports the API version (an unsupported ApiVersions still gets an answer)."""
    view = memoryview(frame)
    if len(view) < _HEADER.size:
        raise MalformedRequest(f"frame of {len(view)} bytes is shorter than a request header")
    api_key, api_version, correlation_id, client_id_length = _HEADER.unpack_from(view)
    size = _HEADER.size
    client_id = None
    if client_id_length >= 0:
        end = size + client_id_length
        if end > len(view):
            raise MalformedRequest("client id runs past the end of the frame")
        try:
            client_id = str(view[size:end], "utf-8")
        except UnicodeDecodeError as exc:
            raise MalformedRequest(f"client id is not UTF-8: {exc}") from None
        size = end
    return RequestHeader(api_key, api_version, correlation_id, client_id, size)


def request_schema(api_key: int, api_version: int) -> type[RequestPayload]:
    """The request model of one API version: kio's, or ours where kio has none."""
    module = _NOT_IN_KIO.get((api_key, api_version))
    if module is not None:
        return cast(type[RequestPayload], module.REQUEST)
    return load_request_schema(api_key, api_version)


def response_schema(api_key: int, api_version: int) -> type[ResponsePayload]:
    """The response model of one API version: kio's, or ours where kio has none."""
    module = _NOT_IN_KIO.get((api_key, api_version))
    if module is not None:
        return cast(type[ResponsePayload], module.RESPONSE)
    return load_response_schema(api_key, api_version)


@functools.cache
def _request_reader(
    api_key: int, api_version: int
) -> tuple[type[RequestPayload], Reader[RequestPayload]]:
    request_type = request_schema(api_key, api_version)
    return request_type, entity_reader(request_type)


def decode_request(header: RequestHeader, frame: Frame) -> Any:
    """The kio request entity that follows `header` in `frame` (bytes or a read-only view: kio
    refuses writable buffers). A length that does not fit in the frame is a malformed request,
    found before kio's native decoder could try to allocate it, and tagged fields the version
    does not define are dropped first, as Kafka ignores them (kafka_api/bounds.py); anything
    else kio cannot decode is malformed too. A request holding more entries than its API's
    bound raises TooManyEntries, undecoded (kafka_api/entry_bounds.py)."""
    request_type, read = _request_reader(header.api_key, header.api_version)
    bound = max_entries(header.api_key)
    try:
        offset = (
            _skip_tagged_fields(frame, header.size) if request_type.__flexible__ else header.size
        )
        request, _ = read(check_body(request_type, frame, offset, bound) or frame, offset)
    except TooManyEntries:
        raise
    except Exception as exc:  # kio raises KeyError, ValueError, BufferUnderflow, UnicodeError...
        raise MalformedRequest(
            f"cannot decode api {header.api_key} v{header.api_version} body: {exc!r}"
        ) from None
    return request


def _skip_tagged_fields(frame: Frame, offset: int) -> int:
    """Kafka ignores header tagged fields it does not know (none are defined for requests)."""
    count, size = read_unsigned_varint(frame, offset)
    offset += size
    for _ in range(count):
        _, size = read_unsigned_varint(frame, offset)
        offset += size
        length, size = read_unsigned_varint(frame, offset)
        offset += size + length
    if offset > len(memoryview(frame)):
        raise MalformedRequest("header tagged fields run past the end of the frame")
    return offset


@functools.cache
def response_module(api_key: int, api_version: int) -> ModuleType:
    """The kio module holding every response model of one API version (ours where kio has
    none)."""
    module = _NOT_IN_KIO.get((api_key, api_version))
    if module is not None:
        return module
    return load_payload_module(api_key, api_version, EntityType.response)


@functools.cache
def _field_names(entity_type: type) -> frozenset[str]:
    return frozenset(field.name for field in fields(entity_type))


def build(entity_type: type, /, **values: Any) -> Any:
    """A kio entity from the values this version of it has: fields come and go across versions,
    so handlers pass everything they know and the version picks what it carries."""
    names = _field_names(entity_type)
    return entity_type(**{name: value for name, value in values.items() if name in names})


@functools.cache
def _writer(entity_type: type) -> Any:
    return entity_writer(entity_type)


@dataclass(frozen=True, slots=True, init=False)
class Encoded:
    """A response a handler encoded itself: off the loop (`encode_off_loop`), because building
    and encoding it costs in proportion to what the cluster holds, or straight from its
    results (Produce: produce_encoding.py, one per answer, hence the __init__ of its own:
    docs/architecture.md, "Compiled modules"); encode_response only puts the header before
    it. error_code: the response's (raftlog.node.listener_metrics.response_error), for the
    request metrics."""

    body: bytes
    flexible_header: bool
    error_code: int

    def __init__(self, body: bytes, flexible_header: bool, error_code: int) -> None:
        object.__setattr__(self, "body", body)
        object.__setattr__(self, "flexible_header", flexible_header)
        object.__setattr__(self, "error_code", error_code)


P = ParamSpec("P")


async def encode_off_loop(
    build: Callable[P, ResponsePayload], *args: P.args, **kwargs: P.kwargs
) -> Encoded:
    """build(*args, **kwargs), and its encoding, in a thread (kio's writers keep no state)."""

    def work() -> Encoded:
        with collection_paused():
            response = build(*args, **kwargs)
            buffer = io.BytesIO()
            _writer(type(response))(buffer, response)
        return Encoded(
            buffer.getvalue(),
            type(response).__header_schema__.__flexible__,
            response_error(response),
        )

    return await asyncio.to_thread(work)


def encode_alike(
    response_type: type[ResponsePayload], first: Any, rest: Any, count: int
) -> Encoded:
    """A response of a throttle time and one list of results (CreateAcls, DeleteAcls) holding
    `first`, then `rest` count - 1 times, made of each one's bytes rather than of one entity
    per entry: the answer to a request refused for its size, a million-entry CreateAcls,
    costs the bytes it is and no step per entry."""
    throttle, results = (f.name for f in fields(response_type))
    assert throttle == "throttle_time", response_type
    flexible = bool(response_type.__flexible__)
    head, one, other = io.BytesIO(), io.BytesIO(), io.BytesIO()
    element: type = type(first)
    _writer(element)(one, first)
    _writer(element)(other, rest)
    head.write(_INT32.pack(0))  # no throttling
    head.write(uvarint(count + 1) if flexible else _INT32.pack(count))
    body = head.getvalue() + one.getvalue() + other.getvalue() * (count - 1)
    return Encoded(
        body + (b"\x00" if flexible else b""),  # no tagged fields
        response_type.__header_schema__.__flexible__,
        int(first.error_code),
    )


def leading_count(header: RequestHeader, frame: Frame) -> int | None:
    """How many entries the list a request body starts with claims (CreateAcls' creations,
    DeleteAcls' filters), read before the body is decoded; None if it cannot be read, or if
    the frame cannot hold that many (an entry takes a byte at least): the answer is made per
    entry from this count, and 2^31 claimed in a few bytes asked for gigabytes. The decode's
    bounds walk refuses such a request."""
    request_type, _ = _request_reader(header.api_key, header.api_version)
    view = memoryview(frame)
    try:
        if not request_type.__flexible__:
            (count,) = _INT32.unpack_from(view, header.size)
            start = header.size + 4
        else:
            at = _skip_tagged_fields(frame, header.size)
            raw, size = read_unsigned_varint(view, at)
            count, start = raw - 1, at + size
    except Exception:  # struct.error, kio's BufferUnderflow: the decode will say what
        return None
    return None if count > len(view) - start else int(count)


# Responses written by hand, each byte for byte what kio's writer writes: the hot ones
# (Produce's handler writes its answer's body itself: produce_encoding.py).
_HAND_ENCODED: dict[int, Callable[[Any, bytearray], bytearray]] = {
    METADATA_API_KEY: encode_metadata_response,
}
# An encoded body up to this size goes out in one buffer with its size and header (one
# small copy); a larger one after them, uncopied.
_JOIN_BODY_BYTES = 4096


def encode_response(
    correlation_id: int, response: ResponsePayload | Encoded
) -> list[bytes | bytearray]:
    """One response frame (size, header, body) as buffers to write in order. The header version
    comes from the kio model: flexible responses carry an empty tagged-field section, except
    ApiVersions, which always uses header v0 so any client can read it."""
    if isinstance(response, Encoded):
        body = response.body
        head = _INT32.pack(correlation_id) + (b"\x00" if response.flexible_header else b"")
        head = _INT32.pack(len(head) + len(body)) + head
        return [head + body] if len(body) <= _JOIN_BODY_BYTES else [head, body]
    response_type = type(response)
    head = _SIZE_PLACEHOLDER + _INT32.pack(correlation_id)
    if response_type.__header_schema__.__flexible__:
        head += b"\x00"
    if response_type.__api_key__ == FETCH_API_KEY:
        parts = encode_fetch_response(response, bytearray(head))
        _INT32.pack_into(parts[0], 0, sum(map(len, parts)) - 4)
        return parts
    if response_type.__api_key__ in _HAND_ENCODED:
        out = _HAND_ENCODED[response_type.__api_key__](response, bytearray(head))
        _INT32.pack_into(out, 0, len(out) - 4)
        return [out]
    buffer = io.BytesIO()
    buffer.write(head)
    _writer(response_type)(buffer, response)
    with buffer.getbuffer() as view:
        _INT32.pack_into(view, 0, len(view) - 4)
    return [buffer.getvalue()]
