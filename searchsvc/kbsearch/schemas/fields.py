"""The field types and checks every resource's bodies share: identifiers, URIs, metadata, free text, times."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Annotated

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
)
from pydantic.alias_generators import to_camel

# Keys become Qdrant JSON paths (quoted), so keep them to a safe alphabet.
METADATA_KEY = re.compile(r"^[A-Za-z0-9_.\-/]{1,128}$")
MAX_METADATA_KEYS = 64
MAX_METADATA_STRING = 4096
# Metadata is stored once per document, but still bounded as a whole: its JSON size (UTF-8
# bytes, compact separators) and the items of all its lists together.
MAX_METADATA_BYTES = 16_384
MAX_METADATA_LIST_ITEMS = 256

# Numbers must survive a round trip through the store unchanged (see also PutDocumentRequest._int64).
FiniteFloat = Annotated[StrictFloat, Field(allow_inf_nan=False)]
Scalar = StrictStr | StrictBool | StrictInt | FiniteFloat


def at_most(limit: int, what: str) -> BeforeValidator:
    """Refuse a container of more than `limit` items before any item is validated.

    pydantic reports every bad item (a dict's once per union branch), so 8 MiB of `{"k1": {}, …}`
    would become millions of errors and gigabytes; a list's `max_length` stops at the first item
    too many, a dict's does not.
    """

    def check(value: object) -> object:
        if isinstance(value, list | dict) and len(value) > limit:
            raise ValueError(f"{what} holds {len(value)} items; at most {limit} are allowed")
        return value

    return BeforeValidator(check)


MetadataValue = Scalar | list[StrictStr]


def _metadata_shape(value: object) -> object:
    """Key and list-item counts before any item is validated (see at_most); check_metadata does the rest."""
    if isinstance(value, dict):
        if len(value) > MAX_METADATA_KEYS:
            raise ValueError(f"metadata holds {len(value)} keys; at most {MAX_METADATA_KEYS} are allowed")
        items = sum(len(v) for v in value.values() if isinstance(v, list))
        if items > MAX_METADATA_LIST_ITEMS:
            raise ValueError(
                f"metadata lists hold {items} items together; at most {MAX_METADATA_LIST_ITEMS} are allowed"
            )
    return value


Metadata = Annotated[dict[str, MetadataValue], BeforeValidator(_metadata_shape)]
"""A document's metadata as a body carries it; check_metadata checks its keys and sizes."""

# Room for the operator's "<namespace>/<name>" (63 + 1 + 253) and for hand-made identifiers.
MAX_SOURCE_IDENTIFIER = 512


def encodable(text: str) -> bool:
    """JSON may carry lone surrogates (\\ud800), which are not text and cannot be stored."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def has_control(text: str) -> bool:
    return any(ord(ch) < 0x20 or 0x7F <= ord(ch) <= 0x9F for ch in text)


def check_source_identifier(value: str) -> str:
    """The one rule for a sourceIdentifier, wherever it enters: body, query, path or filter.

    It must fit in a URL path segment and a log line and round-trip through every store, so it
    is non-empty, at most MAX_SOURCE_IDENTIFIER characters, free of control characters and of
    lone surrogates, and free of U+FFFD: the mark a URL decoder leaves for bytes that were not UTF-8.
    """
    if not value:
        raise ValueError("sourceIdentifier must not be empty")
    if len(value) > MAX_SOURCE_IDENTIFIER:
        raise ValueError(f"sourceIdentifier has {len(value)} characters; at most {MAX_SOURCE_IDENTIFIER} are allowed")
    if has_control(value):
        raise ValueError("sourceIdentifier must not contain control characters")
    if not encodable(value) or "\ufffd" in value:
        raise ValueError("sourceIdentifier must be valid UTF-8 text (no lone surrogates or U+FFFD)")
    return value


def _check_uri(uri: str) -> str:
    if has_control(uri) or not encodable(uri):
        raise ValueError("uri must not contain control characters or lone surrogates")
    return uri


SourceIdentifier = Annotated[StrictStr, AfterValidator(check_source_identifier)]
"""A sourceIdentifier, checked by check_source_identifier; use it for every parameter that carries one."""
Uri = Annotated[StrictStr, Field(min_length=1, max_length=2048), AfterValidator(_check_uri)]
"""A document URI, or a prefix of one: no control characters, no lone surrogates."""


class Body(BaseModel):
    """A wire body: snake_case attributes, camelCase keys on the wire (`alias_generator=to_camel`).

    FastAPI reads and writes the keys; anything else that writes a body's JSON dumps it `by_alias=True`.
    A request may spell a key either way (populate_by_name), never both: the second spelling is an
    unknown key, which `extra="forbid"` refuses like any other.
    """

    model_config = ConfigDict(alias_generator=to_camel, extra="forbid", populate_by_name=True)


def check_metadata(metadata: Mapping[str, object]) -> None:
    if len(metadata) > MAX_METADATA_KEYS:
        raise ValueError(f"metadata has {len(metadata)} keys; at most {MAX_METADATA_KEYS} are allowed")
    items = sum(len(value) for value in metadata.values() if isinstance(value, list))
    if items > MAX_METADATA_LIST_ITEMS:
        raise ValueError(f"metadata lists hold {items} items together; at most {MAX_METADATA_LIST_ITEMS} are allowed")
    for key, value in metadata.items():
        if not METADATA_KEY.match(key):
            raise ValueError(f"metadata key {key[:40]!r} must match {METADATA_KEY.pattern}")
        if key == "sourceIdentifier" and isinstance(value, str):
            check_source_identifier(value)
        strings = value if isinstance(value, list) else [value]
        for item in strings:
            if isinstance(item, str) and (len(item) > MAX_METADATA_STRING or "\x00" in item or not encodable(item)):
                raise ValueError(f"metadata value of {key!r} is too long, contains NUL or is not valid Unicode")
    size = len(json.dumps(metadata, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))
    if size > MAX_METADATA_BYTES:
        raise ValueError(f"metadata is {size} bytes as JSON; at most {MAX_METADATA_BYTES} are allowed")


# Counts fit the store's integers and a browser's numbers exactly.
Count = Annotated[StrictInt, Field(ge=0, le=2**53)]


def printable(text: str, *, lines: bool) -> str:
    """No control characters (newlines and tabs allowed where `lines`) and valid Unicode."""
    allowed = {"\n", "\t"} if lines else set()
    if any(has_control(ch) and ch not in allowed for ch in text) or not encodable(text):
        raise ValueError("must not contain control characters or lone surrogates")
    return text


def one_line(text: str) -> str:
    return printable(text, lines=False)


def text_lines(text: str) -> str:
    return printable(text, lines=True)


def usable_text(text: str, name: str) -> str:
    """The one rule for free text the service embeds: something to search for, and valid UTF-8."""
    if not text.strip():
        raise ValueError(f"{name} must contain a non-whitespace character")
    if "\x00" in text or not encodable(text):
        raise ValueError(f"{name} must not contain NUL characters or lone surrogates")
    return text
