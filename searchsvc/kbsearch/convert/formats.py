"""Which format a document is: from the request's content type, else from its URI's extension.

Also the byte sniffing that catches a file claiming one type and being another (a PDF named
.docx, a zip named .md), before any parser sees it.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass
from urllib.parse import urlsplit

from kbsearch.convert.asciidoc import AsciiDocConverter
from kbsearch.convert.base import ConversionError, Converter
from kbsearch.convert.docx import DocxConverter
from kbsearch.convert.htmltext import HtmlConverter
from kbsearch.convert.mdx import MdxConverter
from kbsearch.convert.notebook import NotebookConverter
from kbsearch.convert.pdf import PdfConverter
from kbsearch.convert.rst import RstConverter

__all__ = [
    "CONVERTERS",
    "FORMATS",
    "MARKDOWN",
    "TEXT",
    "Format",
    "check_bytes",
    "resolve_format",
]

MARKDOWN = "markdown"  # read by the chunker as it is: no conversion
TEXT = "text"  # plain text, also read as it is (what the service always did with it)

CONVERTERS: dict[str, Converter] = {
    c.name: c
    for c in (
        MdxConverter(),
        RstConverter(),
        AsciiDocConverter(),
        HtmlConverter(),
        NotebookConverter(),
        PdfConverter(),
        DocxConverter(),
    )
}


@dataclass(frozen=True, slots=True)
class Format:
    name: str
    media_types: tuple[str, ...]
    extensions: tuple[str, ...]
    binary: bool = False

    @property
    def converter(self) -> Converter | None:
        return CONVERTERS.get(self.name)


FORMATS: tuple[Format, ...] = (
    Format(MARKDOWN, ("text/markdown", "text/x-markdown"), (".md", ".markdown")),
    Format(TEXT, ("text/plain",), (".txt", ".text")),
    Format("mdx", ("text/mdx", "text/x-mdx"), (".mdx",)),
    Format("rst", ("text/x-rst", "text/prs.fallenstein.rst"), (".rst", ".rest")),
    Format("adoc", ("text/asciidoc", "text/x-asciidoc"), (".adoc", ".asciidoc", ".asc")),
    Format("html", ("text/html", "application/xhtml+xml"), (".html", ".htm", ".xhtml")),
    Format("ipynb", ("application/x-ipynb+json",), (".ipynb",)),
    Format("pdf", ("application/pdf",), (".pdf",), binary=True),
    Format(
        "docx",
        ("application/vnd.openxmlformats-officedocument.wordprocessingml.document",),
        (".docx",),
        binary=True,
    ),
)
_BY_NAME = {f.name: f for f in FORMATS}
_BY_MEDIA_TYPE = {t: f for f in FORMATS for t in f.media_types}
_BY_EXTENSION = {e: f for f in FORMATS for e in f.extensions}


def resolve_format(content_type: str | None, uri: str) -> Format:
    """The request's `contentType` (a media type or a format name), else the URI's extension.

    A URI without a known extension is markdown, as every document was before formats existed.
    """
    if content_type:
        wanted = content_type.split(";")[0].strip().lower()
        found = _BY_MEDIA_TYPE.get(wanted) or _BY_NAME.get(wanted) or _BY_EXTENSION.get("." + wanted)
        if found is None:
            names = ", ".join(f.name for f in FORMATS)
            raise ConversionError(
                f"content type {content_type!r} is not supported; use one of {names} or their media types",
                code="UNSUPPORTED_CONTENT_TYPE",
            )
        return found
    extension = posixpath.splitext(urlsplit(uri).path)[1].lower()
    return _BY_EXTENSION.get(extension, _BY_NAME[MARKDOWN])


# Leading bytes of the binary kinds a misnamed file usually is.
_SIGNATURES = (
    (b"%PDF-", "pdf", "a PDF"),
    (b"PK\x03\x04", "docx", "a zip archive"),
    (b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1", "ole", "an OLE compound file (a legacy .doc, or an encrypted Office file)"),
    (b"\x89PNG\r\n\x1a\n", "png", "a PNG image"),
    (b"\xff\xd8\xff", "jpeg", "a JPEG image"),
    (b"GIF8", "gif", "a GIF image"),
    (b"\x1f\x8b", "gzip", "a gzip archive"),
)  # fmt: skip


def _sniff(data: bytes, *, lenient: bool) -> tuple[str, str] | None:
    # PDF readers accept the header anywhere in the first KiB; so do we, for a file sent as a PDF.
    if lenient and b"%PDF-" in data[:1024]:
        return "pdf", "a PDF"
    for signature, kind, described in _SIGNATURES:
        if data.startswith(signature):
            return kind, described
    return None


def check_bytes(fmt: Format, data: bytes) -> None:
    """Refuse bytes that are plainly another kind of file than `fmt` (CONTENT_TYPE_MISMATCH).

    Only bytes sent base64-encoded are checked: text sent as a JSON string is text whatever it says.
    """
    found = _sniff(data, lenient=fmt.binary)
    if fmt.binary:
        if found is not None and found[0] == fmt.name:
            return
        if fmt.name == "docx" and found is not None and found[0] == "ole":
            raise ConversionError(
                "the .docx is an OLE compound file: a password-protected Word file or a legacy .doc; "
                "save it as an unprotected .docx",
                code="ENCRYPTED_DOCUMENT",
            )
        what = found[1] if found is not None else "not " + ("a PDF" if fmt.name == "pdf" else "a zip archive")
        raise ConversionError(
            f"the document claims to be {fmt.name} but is {what}",
            code="CONTENT_TYPE_MISMATCH",
            details={"claimed": fmt.name, "found": found[0] if found else "unknown"},
        )
    if found is not None:
        raise ConversionError(
            f"the document claims to be {fmt.name} text but is {found[1]}; send it with its own content type",
            code="CONTENT_TYPE_MISMATCH",
            details={"claimed": fmt.name, "found": found[0]},
        )
