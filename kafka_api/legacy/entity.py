"""The class attributes kio reads from every model it generates, set once for ours."""

from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from typing import TypeVar, dataclass_transform

from kio.schema.request_header.v1.header import RequestHeader
from kio.schema.response_header.v0.header import ResponseHeader
from kio.static.constants import EntityType
from kio.static.primitive import i16

T = TypeVar("T")


class Part(Enum):
    """Which side of the exchange a model is, and whether it is the whole payload."""

    REQUEST = (EntityType.request, RequestHeader)
    REQUEST_PART = (EntityType.nested, RequestHeader)
    RESPONSE = (EntityType.response, ResponseHeader)
    RESPONSE_PART = (EntityType.nested, ResponseHeader)


@dataclass_transform(frozen_default=True, kw_only_default=True, field_specifiers=(field,))
def entity(api_key: int, version: int, part: Part) -> Callable[[type[T]], type[T]]:
    """A model in kio's form (a frozen, slotted, keyword-only dataclass), of a version with no
    flexible fields: every version here predates them."""

    def make(cls: type[T]) -> type[T]:
        model = dataclass(frozen=True, slots=True, kw_only=True)(cls)
        kind, header = part.value
        for name, value in (
            ("__type__", kind),
            ("__version__", i16(version)),
            ("__flexible__", False),
            ("__api_key__", i16(api_key)),
            ("__header_schema__", header),
        ):
            setattr(model, name, value)
        return model

    return make
