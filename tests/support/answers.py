"""A handler's answer as a client reads it: framed by the server's encoder (an answer encoded
off the loop too), then decoded with kio."""

from __future__ import annotations

import io
from typing import Any

from kio.serial import entity_reader, entity_writer

from kafka_api.codec import Encoded, encode_response, response_schema


def client_reads(response: Any, api_key: int, version: int) -> Any:
    response_type: Any = response_schema(api_key, version)  # kio's, or ours where kio has none
    frame = b"".join(encode_response(7, response))
    header_size = 4 + 4 + (1 if response_type.__header_schema__.__flexible__ else 0)
    decoded: Any
    decoded, size = entity_reader(response_type)(frame, header_size)
    assert header_size + size == len(frame)
    if not isinstance(response, Encoded):
        assert decoded == response
    return decoded


def kio_frame(correlation_id: int, response: Any) -> bytes:
    """The response frame kio's own writer makes: what a hand-written encoder must match."""
    body = io.BytesIO()
    entity_writer(type(response))(body, response)
    header = correlation_id.to_bytes(4, "big", signed=True)
    if type(response).__header_schema__.__flexible__:
        header += b"\x00"
    payload = header + body.getvalue()
    return len(payload).to_bytes(4, "big") + payload
