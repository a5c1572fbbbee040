"""A PUT's document before anything is written: its bytes checked, converted, chunked and embedded.

DocumentService (services/documents/service.py) claims and commits what this prepares. Nothing here writes
to the store, so a cancellation or a refusal (413, 422) at this stage leaves no trace.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import hashlib
from collections.abc import Callable
from typing import Literal

from kbsearch.aio.runtime import in_thread, store_call
from kbsearch.commands import DocumentWrite
from kbsearch.convert import Anchor, ConversionError, Converted, Format, check_bytes, resolve_format
from kbsearch.convert.base import decode_utf8
from kbsearch.embedders.base import EmbeddingProvider
from kbsearch.errors import DocumentTooLargeError, InvalidRequestError
from kbsearch.metrics import Metrics
from kbsearch.models import ChunkPoint, ParsedDocument
from kbsearch.services.access.scope import Caller, SourceCatalog, source_partition
from kbsearch.services.documents.batching import EmbeddingBatcher
from kbsearch.services.documents.budget import DocumentWork
from kbsearch.services.documents.versions import detect_version
from kbsearch.services.serving import Serving

__all__ = ["DocumentPreparer", "Prepared", "Source", "VectorReuse", "sha256_hex"]

# Where a write looks for a stored vector of a chunk text (SEARCHSVC_VECTOR_REUSE).
VectorReuse = Literal["readable", "source", "off"]


def sha256_hex(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class DocumentPreparer:
    """The request's bytes checked before any work, then the chunks and vectors a write stores."""

    def __init__(
        self,
        *,
        serving: Serving,
        metrics: Metrics,
        work: DocumentWork,
        max_document_bytes: int,
        max_source_bytes: int,
        batcher_for: Callable[[EmbeddingProvider], EmbeddingBatcher],
        catalog: SourceCatalog | None = None,
        vector_reuse: VectorReuse = "readable",
    ) -> None:
        self.serving = serving  # the store, embedder, encoder and chunker a write uses now
        self.catalog = catalog  # resolves a glob scope for "readable" reuse; without it, own source only
        self.vector_reuse = vector_reuse
        self.metrics = metrics
        self.work = work
        self.max_document_bytes = max_document_bytes
        self.max_source_bytes = max_source_bytes
        self._batcher_for = batcher_for  # the factory's: a new batcher for the embedder a swap brings
        self._batcher: EmbeddingBatcher | None = None

    def _batcher_of(self, embedder: EmbeddingProvider) -> EmbeddingBatcher:
        """The batcher of the serving embedder: a new one after a swap (writes are paused for it)."""
        if self._batcher is None or self._batcher.embedder is not embedder:
            self._batcher = self._batcher_for(embedder)
        return self._batcher

    def source(self, request: DocumentWrite) -> Source:
        """The request's bytes and format, checked before any work: size, encoding, type (413/422)."""
        fmt = resolve_format(request.content_type, request.uri)
        converter = fmt.converter
        if request.content_encoding == "base64":
            try:
                raw = base64.b64decode(request.content, validate=True)
            except (binascii.Error, ValueError):
                raise ConversionError(
                    "content is not valid base64 (contentEncoding is base64)", code="INVALID_BASE64"
                ) from None
        elif fmt.binary:
            raise InvalidRequestError(
                f"{fmt.name} documents are binary: send their bytes base64-encoded with contentEncoding: base64",
                code="BASE64_REQUIRED",
            )
        else:
            raw = request.content.encode("utf-8")
        limit = self.max_document_bytes if converter is None else self.max_source_bytes
        if len(raw) > limit:
            raise DocumentTooLargeError(
                f"content is {len(raw)} bytes; the limit is {limit} bytes",
                details={"bytes": len(raw), "limit": limit},
            )
        if request.content_encoding == "base64":
            check_bytes(fmt, raw)
        text: str | None = None
        if converter is None:  # markdown and plain text go to the chunker as they are
            text = request.content if request.content_encoding == "utf-8" else decode_utf8(raw, "content")
        fingerprint = self.serving.chunker.fingerprint
        if converter is not None:  # a new converter version re-converts the format's documents
            fingerprint += f";format={fmt.name}-v{converter.version}"
        return Source(fmt, raw, text, "sha256:" + hashlib.sha256(raw).hexdigest(), fingerprint)

    async def _convert(self, source: Source, writer: str) -> tuple[str, Converted | None]:
        """The text the chunker reads, with the conversion's anchors when there was one."""
        if source.text is not None:
            return source.text, None
        try:
            converted = await self.work.convert(writer, source.format.name, source.raw)
        except ConversionError as exc:
            self.metrics.documents_converted.labels(source.format.name, exc.code).inc()
            raise
        size = len(converted.text.encode("utf-8"))
        if size > self.max_document_bytes:
            raise DocumentTooLargeError(
                f"the {source.format.name} file converts to {size} bytes of text; the limit is "
                f"{self.max_document_bytes} bytes",
                details={"bytes": size, "limit": self.max_document_bytes},
            )
        self.metrics.documents_converted.labels(source.format.name, "ok").inc()
        return converted.text, converted

    async def prepare(self, request: DocumentWrite, source: Source, writer: str, caller: Caller) -> Prepared:
        """Chunks and vectors, before anything is written: a cancellation or a refusal here leaves no trace."""
        text, converted = await self._convert(source, writer)
        located = detect_version(request.uri, request.metadata)
        path = request.metadata.get("path")
        parsed = await self.work.chunk(writer, text, path if isinstance(path, str) else request.uri)
        # Chunk offsets count from the body (after any front matter); anchors from the whole text.
        shift = len(text) - len(parsed.body)
        hashes = [sha256_hex(chunk.embed_text) for chunk in parsed.chunks]
        dense, embedded = await self._dense_vectors(parsed, hashes, request.source_identifier, writer, caller)
        sparse = await in_thread(self.serving.sparse.encode_chunks, [c.embed_text for c in parsed.chunks])
        total = len(parsed.chunks)
        points = [
            ChunkPoint(
                uri=request.uri,
                source_identifier=request.source_identifier,
                chunk_index=chunk.index,
                total_chunks=total,
                text=chunk.text,
                text_hash=hashes[i],
                title=parsed.title,
                tags=parsed.tags,
                headings=chunk.headings,
                dense=dense[i],
                sparse=sparse[i],
                start=chunk.start,
                end=chunk.end,
                doc_version=located.version,
                page_key=located.page,
                page=_located(converted, chunk.start, shift).page,
                cell=_located(converted, chunk.start, shift).cell,
            )
            for i, chunk in enumerate(parsed.chunks)
        ]
        return Prepared(
            checksum=source.checksum,
            title=parsed.title,
            points=points,
            embedded=embedded,
            chunker=source.fingerprint,
            body=parsed.body,
        )

    async def _dense_vectors(
        self, parsed: ParsedDocument, hashes: list[str], source_identifier: str | None, writer: str, caller: Caller
    ) -> tuple[list[list[float]], int]:
        """Vectors for every chunk: a stored vector of the same embedded text, else embedded in the
        writer's turns (services/documents/batching.py).

        The key is the text embedded (its SHA-256), never the chunk's position or document, so
        versioned copies of a page, a page moved or re-chunked, and a page two sources share are
        embedded once. Looked up first in the writer's own source, then (`readable`) in the
        other sources of the writer's team (`_reuse_sources`): whether a vector was found
        (`chunksEmbedded`, the write's duration) tells a writer only of texts it could search
        for anyway, never of another tenant's. One model made every vector of a collection (the
        collection signature), and a stored vector is the very one the model gave
        (tests/searchsvc/services/documents/test_vector_reuse.py).
        """
        unique = list(dict.fromkeys(hashes))
        by_hash: dict[str, list[float]] = {}
        if self.vector_reuse != "off":
            by_hash = await store_call(self.serving.store.vectors_by_text_hash, unique, source_identifier)
            missing = [h for h in unique if h not in by_hash]
            if missing and self.vector_reuse == "readable" and self.catalog is not None:
                others = await _reuse_sources(caller, source_identifier, self.catalog)
                if others:
                    found = await store_call(self.serving.store.readable_vectors_by_text_hash, missing, others)
                    by_hash.update(found)
        missing = [h for h in unique if h not in by_hash]
        if missing:
            text_of = {hashes[i]: chunk.embed_text for i, chunk in enumerate(parsed.chunks)}
            partition = self._partition(caller, source_identifier)
            batcher = self._batcher_of(self.serving.embedder)
            vectors = await batcher.embed([text_of[h] for h in missing], partition, writer)
            by_hash.update(zip(missing, vectors, strict=True))
        return [by_hash[h] for h in hashes], len(missing)

    def _partition(self, caller: Caller, source_identifier: str | None) -> str:
        """Where texts being embedded and the embed cache are shared: the reach of the stored lookup."""
        if self.vector_reuse != "readable":
            return source_partition(source_identifier)
        if not caller.scope.unrestricted:
            return "writer\0" + caller.name + "\0" + ",".join(caller.scope.patterns)
        if source_identifier is not None and "/" in source_identifier:
            return "team\0" + source_identifier.split("/", 1)[0]
        return source_partition(source_identifier)


@dataclasses.dataclass(slots=True)
class Prepared:
    checksum: str
    title: str | None
    points: list[ChunkPoint]
    embedded: int
    body: str  # the chunker's body: the content with its front matter aside
    chunker: str  # the record's fingerprint: the chunker's, plus the format's converter version


@dataclasses.dataclass(frozen=True, slots=True)
class Source:
    """A PUT's document as bytes: its format, and its text when it needs no conversion."""

    format: Format
    raw: bytes
    text: str | None
    checksum: str  # SHA-256 of the exact bytes: what a syncer computes from the file
    fingerprint: str


async def _reuse_sources(caller: Caller, source_identifier: str | None, catalog: SourceCatalog) -> list[str]:
    """The other sources whose stored vectors a write may reuse: what the writer may read, within its team.

    A scoped token's readable sources are its own to search. An all-sources token (the operator's)
    writes for many teams and copies what a write tells it into the team's status, so its bound is
    the team the write is for (the sourceIdentifier's part before `/`, as services/documents/budget.py
    takes turns), never every source it could read.
    """
    if not caller.scope.unrestricted:
        return [s for s in await caller.scope.resolve(catalog) or [] if s != source_identifier]
    if source_identifier is None or "/" not in source_identifier:
        return []
    team = source_identifier.split("/", 1)[0] + "/"
    return sorted(s for s in await catalog.known() if s.startswith(team) and s != source_identifier)


_NOWHERE = Anchor(0)


def _located(converted: Converted | None, start: int | None, shift: int) -> Anchor:
    """The page or cell a chunk starts in (an anchor without either when the format has none)."""
    if converted is None or start is None:
        return _NOWHERE
    return converted.locate(start + shift) or _NOWHERE
