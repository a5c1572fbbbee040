"""The reads both backends share, written once over a few engine primitives.

A backend (edge.py, qdrant_server.py) supplies the vendor calls: count, scroll one page,
retrieve by id, facet, read the newest point, and the ranked query itself. Everything built
from them (paging, source counts, listings, the metadata pre-filter of a search, the metadata
of its hits) lives here, so the two backends cannot drift apart.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Iterator
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any

from kbsearch.models import (
    CollectionSignature,
    DocumentChunk,
    DocumentRecord,
    Fusion,
    SearchFilter,
    SearchHit,
    SearchMode,
    SourceStats,
    SourceStatus,
    SparseVector,
    StoredBody,
    SyncStatus,
    body_point_id,
    chunk_point_id,
    document_point_id,
    sync_status_point_id,
)
from kbsearch.store import conditions as cd
from kbsearch.store import payloads as pl
from kbsearch.store import signature as sg
from kbsearch.store.base import (
    CHUNKER,
    CONTENT,
    DENSE_VECTOR,
    DOC_VERSION,
    INGESTED_AT,
    KIND,
    KIND_BODY,
    KIND_CHUNK,
    KIND_DOCUMENT,
    KIND_SYNC_STATUS,
    MAX_METADATA_FILTER_DOCUMENTS,
    METADATA,
    SOURCE,
    TEXT_HASH,
    URI,
    VectorStore,
)


@dataclass(frozen=True, slots=True)
class RankedQuery:
    """One search as a backend's `_query` runs it: the lanes' queries, the pre-filter, the cut and the fusion."""

    mode: SearchMode
    dense: list[float] | None
    sparse: SparseVector | None
    conditions: list[cd.Condition]
    limit: int
    candidates: int
    fusion: Fusion


class PointStore(VectorStore):
    """A VectorStore whose reads are made of the primitives below (records: `.id`, `.payload`, `.vector`)."""

    def _guard(self, action: str) -> AbstractContextManager[None]:
        """Where the engine's own failures become StoreUnavailableError; `action` names the read."""
        return nullcontext()

    # --- primitives -----------------------------------------------------------------------

    @abstractmethod
    def _count(self, conditions: list[cd.Condition]) -> int:
        """Exact count of the matching points."""

    @abstractmethod
    def _scroll_page(
        self,
        conditions: list[cd.Condition],
        *,
        offset: Any,
        limit: int,
        payload: list[str] | bool,
        vector: list[str] | bool,
    ) -> tuple[list[Any], Any]:
        """One page of matching points in id order, and the offset of the next (None at the end)."""

    @abstractmethod
    def _retrieve(self, ids: list[str], payload: list[str] | bool) -> list[Any]:
        """The points of `ids` that exist, without vectors."""

    @abstractmethod
    def _facet(self, key: str, conditions: list[cd.Condition], limit: int) -> dict[str, int]:
        """Distinct values of an indexed `key` among the matching points, with their counts (exact)."""

    @abstractmethod
    def _newest_payload(self, conditions: list[cd.Condition], field: str) -> dict[str, Any] | None:
        """The `field` payload of the matching point with the greatest `field`, or None."""

    @abstractmethod
    def _query(self, search: RankedQuery) -> list[SearchHit]:
        """The ranked chunks (without metadata); a query of stopwords only is never sent."""

    # --- shared reads -----------------------------------------------------------------------

    def get_document(self, uri: str) -> DocumentRecord | None:
        with self._guard("read a document record"):
            found = self._retrieve([document_point_id(uri)], True)
        if not found or (found[0].payload or {}).get(KIND) != KIND_DOCUMENT:
            return None
        return pl.document_from_payload(found[0].payload)

    def stored_signature(self) -> CollectionSignature | None:
        with self._guard("read the collection signature"):
            found = self._retrieve([sg.SIGNATURE_POINT_ID], True)
        return sg.signature_from_payload(found[0].payload or {}) if found else None

    def collection_chunker(self) -> str | None:
        with self._guard("read the collection's chunker"):
            found = self._retrieve([sg.SIGNATURE_POINT_ID], True)
            recorded = sg.chunker_from_payload(found[0].payload if found else None)
            if recorded is not None:
                return recorded
            records, _ = self._scroll_page(
                [cd.Match(KIND, KIND_DOCUMENT)], offset=None, limit=1, payload=[CHUNKER], vector=False
            )
        return sg.chunker_from_payload(records[0].payload if records else None)

    def get_body(self, uri: str) -> StoredBody | None:
        with self._guard("read a document body"):
            found = self._retrieve([body_point_id(uri)], True)
        if not found or (found[0].payload or {}).get(KIND) != KIND_BODY:
            return None
        return pl.body_from_payload(found[0].payload)

    def document_chunks(self, uri: str, first: int, last: int) -> list[DocumentChunk]:
        chunks: list[DocumentChunk] = []
        with self._guard("read the chunks of a document"):
            # Chunk ids are derived from (uri, index): a retrieve by id per page, never a scan.
            for start in range(max(first, 0), last, pl.SCROLL_PAGE):
                ids = [chunk_point_id(uri, i) for i in range(start, min(start + pl.SCROLL_PAGE, last))]
                found = (r.payload or {} for r in self._retrieve(ids, True))
                chunks.extend(
                    pl.chunk_from_payload(p) for p in found if p.get(KIND) == KIND_CHUNK and p.get(URI) == uri
                )
        return sorted(chunks, key=lambda c: c.chunk_index)

    def reusable_vectors(self, uri: str, text_hashes: list[str]) -> dict[str, list[float]]:
        if not text_hashes:
            return {}
        wanted: list[cd.Condition] = [
            cd.Match(KIND, KIND_CHUNK),
            cd.Match(URI, uri),
            cd.MatchAny(TEXT_HASH, list(text_hashes)),
        ]
        with self._guard("read vectors"):
            return {
                (r.payload or {})[TEXT_HASH]: list(r.vector[DENSE_VECTOR])
                for r in self._scroll_all(wanted, payload=[TEXT_HASH], vector=[DENSE_VECTOR])
                if r.vector and DENSE_VECTOR in r.vector
            }

    def vectors_by_text_hash(self, text_hashes: list[str], source_identifier: str | None) -> dict[str, list[float]]:
        source: cd.Condition = cd.Missing(SOURCE) if source_identifier is None else cd.Match(SOURCE, source_identifier)
        return self._vectors_by_text_hash(text_hashes, [source])

    def readable_vectors_by_text_hash(self, text_hashes: list[str], sources: list[str]) -> dict[str, list[float]]:
        if not sources:
            return {}
        return self._vectors_by_text_hash(text_hashes, [cd.MatchAny(SOURCE, list(sources))])

    def _vectors_by_text_hash(self, text_hashes: list[str], scope: list[cd.Condition]) -> dict[str, list[float]]:
        wanted = set(text_hashes)
        found: dict[str, list[float]] = {}
        for start in range(0, len(text_hashes), pl.SCROLL_PAGE):
            conditions: list[cd.Condition] = [
                cd.Match(KIND, KIND_CHUNK),
                *scope,
                cd.MatchAny(TEXT_HASH, list(text_hashes[start : start + pl.SCROLL_PAGE])),
            ]
            with self._guard("read vectors by text hash"):
                for r in self._scroll_all(conditions, payload=[TEXT_HASH], vector=[DENSE_VECTOR]):
                    text_hash = (r.payload or {}).get(TEXT_HASH)
                    if text_hash in wanted and text_hash not in found and r.vector and DENSE_VECTOR in r.vector:
                        found[text_hash] = list(r.vector[DENSE_VECTOR])
                        if len(found) == len(wanted):
                            return found  # copies of a repeated page need not be read
        return found

    def incomplete_documents(self) -> list[DocumentRecord]:
        with self._guard("find incomplete documents"):
            return [
                pl.document_from_payload(r.payload or {})
                for r in self._scroll_all(cd.incomplete_conditions(), payload=True)
            ]

    def chunk_uris(self) -> list[str]:
        chunks: list[cd.Condition] = [cd.Match(KIND, KIND_CHUNK)]
        with self._guard("list the URIs of chunks"):
            # A facet over the uri index: distinct values, never a payload scan. The chunk count
            # bounds the distinct URIs (every URI has a chunk), so none is dropped.
            return list(self._facet(URI, chunks, max(self._count(chunks), 1)))

    def existing_records(self, uris: list[str]) -> set[str]:
        found: set[str] = set()
        with self._guard("read document records"):
            for start in range(0, len(uris), pl.SCROLL_PAGE):
                ids = [document_point_id(u) for u in uris[start : start + pl.SCROLL_PAGE]]
                for r in self._retrieve(ids, [KIND, URI]):
                    if (r.payload or {}).get(KIND) == KIND_DOCUMENT:
                        found.add(r.payload[URI])
        return found

    def source_status(self, source_identifier: str) -> SourceStatus:
        where = cd.source_conditions(source_identifier)
        with self._guard("count a source"):
            latest = self._newest_payload(where["documents"], INGESTED_AT)
            return SourceStatus(
                source_identifier=source_identifier,
                documents=self._count(where["documents"]),
                chunks=self._count(where["chunks"]),
                incomplete_documents=self._count(where["incomplete"]),
                last_ingested_at=(latest or {}).get(INGESTED_AT),
                sync=self._sync_status(source_identifier),
            )

    def list_documents(
        self,
        *,
        source_identifier: str | None,
        uri_prefix: str | None,
        limit: int,
        cursor: str | None,
        allowed: list[str] | None = None,
    ) -> tuple[list[DocumentRecord], str | None]:
        offset = cd.parse_cursor(cursor)
        with self._guard("list documents"):
            records, next_offset = self._scroll_page(
                cd.document_conditions(source_identifier, uri_prefix) + cd.scope_conditions(allowed),
                offset=offset,
                limit=limit,
                payload=True,
                vector=False,
            )
        documents = [pl.document_from_payload(r.payload or {}) for r in records]
        return documents, (str(next_offset) if next_offset is not None else None)

    def list_sources(self, allowed: list[str] | None = None) -> list[SourceStats]:
        with self._guard("list sources"):
            documents = pl.tally_documents(self._document_payloads([SOURCE, INGESTED_AT], allowed))
            statuses = {
                status.source_identifier: status
                for status in (
                    pl.sync_status_from_payload(r.payload or {})
                    for r in self._scroll_all(pl.sync_status_conditions(allowed), payload=True)
                )
            }
            if not documents and not statuses:
                return []
            chunks: dict[str, int] = {}
            if documents:
                sources = list(documents)
                # Restricted to the known sources, `limit=len(sources)` cannot drop any of them.
                chunks = self._facet(SOURCE, [cd.Match(KIND, KIND_CHUNK), cd.MatchAny(SOURCE, sources)], len(sources))
        return pl.source_stats(documents, chunks, statuses)

    def get_sync_status(self, source_identifier: str) -> SyncStatus | None:
        with self._guard("read a sync status"):
            return self._sync_status(source_identifier)

    def _sync_status(self, source_identifier: str) -> SyncStatus | None:
        found = self._retrieve([sync_status_point_id(source_identifier)], True)
        if not found or (found[0].payload or {}).get(KIND) != KIND_SYNC_STATUS:
            return None
        return pl.sync_status_from_payload(found[0].payload)

    def source_identifiers(self) -> list[str]:
        # A source whose every file failed has a sync status and no records: it is a source all the same.
        named: list[cd.Condition] = [cd.MatchAny(KIND, [KIND_DOCUMENT, KIND_SYNC_STATUS])]
        with self._guard("list source identifiers"):
            # The point count bounds the distinct sources, so the facet drops none.
            return sorted(self._facet(SOURCE, named, max(self._count(named), 1)))

    def count(self, allowed: list[str] | None = None) -> tuple[int, int]:
        scope = cd.scope_conditions(allowed)
        with self._guard("count points"):
            return (
                self._count([cd.Match(KIND, KIND_DOCUMENT), *scope]),
                self._count([cd.Match(KIND, KIND_CHUNK), *scope]),
            )

    def version_counts(self, sources: list[str] | None, uri_prefix: str | None, limit: int) -> dict[str, int]:
        where: list[cd.Condition] = [cd.Match(KIND, KIND_CHUNK), *cd.scope_conditions(sources)]
        if uri_prefix:
            where.append(cd.Prefix(URI, uri_prefix))
        with self._guard("count versions"):
            return self._facet(DOC_VERSION, where, limit)

    def search(
        self,
        *,
        mode: SearchMode,
        dense: list[float] | None,
        sparse: SparseVector | None,
        filter: SearchFilter,
        limit: int,
        candidates: int,
        fusion: Fusion,
        phrase: str | None = None,
    ) -> list[SearchHit]:
        conditions: list[cd.Condition] = []
        if mode == "literal":
            if not phrase:
                raise ValueError("literal search needs a phrase")
            # Ranked as hybrid is: the dense lane reaches every chunk the phrase condition lets through.
            mode, conditions = "hybrid", [cd.Phrase(CONTENT, phrase)]
        uris = None
        if filter.metadata:
            with self._guard("resolve a metadata filter"):
                matched = self._scroll_all(
                    cd.metadata_record_conditions(filter), payload=[URI], at_most=MAX_METADATA_FILTER_DOCUMENTS + 1
                )
                uris = cd.metadata_uris(r.payload or {} for r in matched)
            if not uris:
                return []
        with self._guard("search"):
            hits = self._query(
                RankedQuery(
                    mode=mode,
                    dense=dense,
                    sparse=sparse,
                    conditions=cd.search_conditions(filter, uris) + conditions,
                    limit=limit,
                    candidates=candidates,
                    fusion=fusion,
                )
            )
            if not hits:
                return hits
            records = self._retrieve(list({document_point_id(h.uri) for h in hits}), [KIND, URI, METADATA])
        return pl.with_metadata(hits, (r.payload or {} for r in records))

    def _document_payloads(self, fields: list[str], allowed: list[str] | None = None) -> Iterator[dict[str, Any]]:
        for record in self._scroll_all([cd.Match(KIND, KIND_DOCUMENT), *cd.scope_conditions(allowed)], payload=fields):
            yield record.payload or {}

    def _scroll_all(
        self,
        conditions: list[cd.Condition],
        *,
        payload: list[str] | bool,
        vector: list[str] | bool = False,
        at_most: int | None = None,
    ) -> Iterator[Any]:
        """Every matching point, page by page (or the first `at_most`)."""
        offset, seen = None, 0
        while True:
            size = pl.SCROLL_PAGE if at_most is None else min(pl.SCROLL_PAGE, at_most - seen)
            records, offset = self._scroll_page(conditions, offset=offset, limit=size, payload=payload, vector=vector)
            yield from records
            seen += len(records)
            if offset is None or (at_most is not None and seen >= at_most):
                return
