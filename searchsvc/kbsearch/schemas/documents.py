"""Documents: PUT, GET and DELETE of /api/v1/documents, a document's text, DELETE of a source's documents."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, StrictStr, field_validator

from kbsearch.commands import DocumentWrite
from kbsearch.schemas.fields import Body, Metadata, MetadataValue, Uri, check_metadata, encodable


class PutDocumentRequest(Body):
    uri: Uri
    content: StrictStr
    metadata: Metadata = Field(default_factory=dict)
    # The document's format: a media type ("application/pdf") or a format name ("pdf", "rst"); by
    # default the URI's extension decides, and a URI without a known one is markdown.
    content_type: Annotated[StrictStr, Field(min_length=1, max_length=255)] | None = None
    # "base64": `content` is the file's bytes, base64-encoded (required for pdf and docx; allowed for
    # every format, so a client need not decode text it cannot vouch for).
    content_encoding: Literal["utf-8", "base64"] = "utf-8"

    @field_validator("content")
    @classmethod
    def _no_nul(cls, content: str) -> str:
        if "\x00" in content:
            raise ValueError("content contains NUL characters; only text documents are accepted")
        if not encodable(content):
            raise ValueError("content contains lone surrogate escapes; it is not valid Unicode text")
        return content

    @field_validator("metadata", mode="before")
    @classmethod
    def _int64(cls, metadata: object) -> object:
        # Checked before validation: a float field would otherwise take a huge int silently.
        if isinstance(metadata, dict):
            for key, value in metadata.items():
                if isinstance(value, int) and not isinstance(value, bool) and not -(2**63) <= value < 2**63:
                    raise ValueError(f"metadata value of {key!r} does not fit in a 64-bit integer")
        return metadata

    @field_validator("metadata")
    @classmethod
    def _metadata(cls, metadata: dict[str, MetadataValue]) -> dict[str, MetadataValue]:
        check_metadata(metadata)
        source = metadata.get("sourceIdentifier")
        if source is not None and not isinstance(source, str):
            raise ValueError("metadata.sourceIdentifier must be a string")
        return metadata

    @property
    def source_identifier(self) -> str | None:
        value = self.metadata.get("sourceIdentifier")
        return value if isinstance(value, str) else None

    def to_command(self) -> DocumentWrite:
        """The one way a PUT body becomes a write: REST, MCP and dotai all come through here."""
        return DocumentWrite(
            uri=self.uri,
            content=self.content,
            metadata=self.metadata,
            content_type=self.content_type,
            content_encoding=self.content_encoding,
        )


class PutDocumentResponse(Body):
    uri: str
    status: Literal["created", "updated", "unchanged"]
    checksum: str
    chunks: int
    chunks_embedded: int


class DeleteDocumentResponse(Body):
    uri: str
    chunks_deleted: int


class DeleteSourceResponse(Body):
    source_identifier: str
    documents_deleted: int
    chunks_deleted: int


class DocumentInfo(Body):
    uri: str
    checksum: str
    chunks: int
    metadata: dict[str, MetadataValue]
    ingested_at: str


class DocumentText(Body):
    """One page of a document's body as written (front matter aside); `nextStart` is null on the last page."""

    uri: str
    title: str | None
    source_identifier: str | None
    checksum: str
    metadata: dict[str, MetadataValue]
    ingested_at: str
    total_chars: int = Field(description="Characters in the whole body (front matter excluded).")
    start: int = Field(description="Offset of this page's first character.")
    end: int = Field(description="Offset just past this page's last character.")
    next_start: int | None = Field(description="Pass as `start` to read on; null when this page reaches the end.")
    text: str


class DocumentList(Body):
    documents: list[DocumentInfo]
    next_cursor: str | None


class SourceDocumentInfo(Body):
    uri: str
    title: str | None
    ingested_at: str = Field(description="When the document was last written (RFC 3339, UTC).")
    version: str | None = Field(description="The documentation version it belongs to; null for the current copy.")


class SourceDocumentList(Body):
    """One page of a source's documents; pass `nextCursor` as `cursor` to read on, null on the last page."""

    source_identifier: str
    documents: list[SourceDocumentInfo]
    next_cursor: str | None
