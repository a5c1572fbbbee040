"""What every format module offers: bytes in, markdown-like text and its page or cell anchors out."""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import Protocol

from kbsearch.errors import ConversionError

__all__ = [
    "Anchor",
    "ConversionError",
    "Converted",
    "Converter",
    "decode_utf8",
]


@dataclass(frozen=True, slots=True)
class Anchor:
    """From `offset` on, the converted text comes from this page (PDF) or cell (notebook), 1-based."""

    offset: int
    page: int | None = None
    cell: int | None = None


@dataclass(frozen=True, slots=True)
class Converted:
    """Markdown-like text (headings, paragraphs, lists, fences, tables) the chunker reads as markdown."""

    text: str
    anchors: tuple[Anchor, ...] = field(default=())

    def locate(self, offset: int) -> Anchor | None:
        """The anchor in force at `offset` of `text`, if the format has any."""
        i = bisect.bisect_right([a.offset for a in self.anchors], offset) - 1
        return self.anchors[i] if i >= 0 else None


class Converter(Protocol):
    """One format. `convert` runs inside the conversion worker, under its memory and CPU limits."""

    name: str  # the format's name in requests and errors: "pdf", "docx", ...
    version: int  # bump when the output changes: stored documents of the format are re-converted
    binary: bool  # sent base64-encoded; otherwise UTF-8 text

    def convert(self, data: bytes) -> Converted: ...


def decode_utf8(data: bytes, what: str) -> str:
    """Strict UTF-8 (a BOM dropped, line ends made \\n); an error names the first bad byte."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConversionError(
            f"{what} is not valid UTF-8 text (invalid byte at offset {exc.start})",
            code="INVALID_UTF8",
            details={"offset": exc.start},
        ) from None
    if "\x00" in text:
        raise ConversionError(f"{what} contains NUL characters; it is not text", code="INVALID_UTF8")
    return text.removeprefix("\ufeff").replace("\r\n", "\n").replace("\r", "\n")
