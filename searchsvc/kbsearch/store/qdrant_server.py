"""The vector store on a Qdrant server, through qdrant-client (also its local mode, in tests)."""

from __future__ import annotations

import math
import threading
import uuid
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from qdrant_client import QdrantClient
from qdrant_client import models as qm
from qdrant_client.http.exceptions import ResponseHandlingException, UnexpectedResponse

from kbsearch.errors import ConfigurationError, StoreUnavailableError
from kbsearch.models import (
    ChunkPoint,
    CollectionSignature,
    DocumentRecord,
    SearchFilter,
    SearchHit,
    SearchMode,
    SourceStats,
    SourceStatus,
    SparseVector,
    document_point_id,
)
from kbsearch.store import payloads as pl
from kbsearch.store.base import (
    CHECKSUM,
    CHUNK_INDEX,
    DENSE_VECTOR,
    INGESTED_AT,
    KIND,
    KIND_CHUNK,
    KIND_DOCUMENT,
    METADATA,
    SOURCE,
    SPARSE_VECTOR,
    TEXT_HASH,
    URI,
    VectorStore,
)

# uri gets a prefix-enabled keyword index so uriPrefix filters are served by the index.
_INDEXES: dict[str, Any] = {
    KIND: qm.PayloadSchemaType.KEYWORD,
    URI: qm.KeywordIndexParams(type=qm.KeywordIndexType.KEYWORD, prefix=True),
    SOURCE: qm.PayloadSchemaType.KEYWORD,
    CHUNK_INDEX: qm.IntegerIndexParams(type=qm.IntegerIndexType.INTEGER, lookup=True, range=True),
    # Finds incomplete records at start-up without reading every payload.
    CHECKSUM: qm.PayloadSchemaType.KEYWORD,
    # Lets a source's latest ingest be read with one ordered scroll.
    INGESTED_AT: qm.PayloadSchemaType.DATETIME,
}

# Points per upsert request: keeps request bodies well under the server's size limit.
_UPSERT_BATCH = 256


@contextmanager
def _unavailable_on_failure(action: str) -> Iterator[None]:
    """Turn transport failures, 429 and 5xx into StoreUnavailableError (a retryable 503)."""
    try:
        yield
    except ResponseHandlingException as exc:  # connection refused, timeout, unreadable answer
        raise StoreUnavailableError(f"Qdrant is unreachable while trying to {action}: {exc.source}") from exc
    except UnexpectedResponse as exc:
        if exc.status_code is None or exc.status_code >= 500 or exc.status_code == 429:
            raise StoreUnavailableError(f"Qdrant failed to {action}: HTTP {exc.status_code}") from exc
        raise


class QdrantServerStore(VectorStore):
    """One collection on a Qdrant server; safe to share between replicas."""

    backend = "qdrant"

    def __init__(self, client: QdrantClient, collection: str, *, owns_client: bool = False):
        self.client = client
        self.collection = collection
        self._owns_client = owns_client  # close() closes only a client this store made
        # Serialises this process's writes, so a count and the delete after it see the same data.
        self._lock = threading.Lock()

    @classmethod
    def from_url(cls, url: str, api_key: str | None, timeout: float, *, collection: str) -> QdrantServerStore:
        # No compatibility probe here: the constructor must not touch the network; open() does.
        client = QdrantClient(url=url, api_key=api_key, timeout=math.ceil(timeout), check_compatibility=False)
        return cls(client, collection, owns_client=True)

    # --- lifecycle ----------------------------------------------------------------------

    def open(self, signature: CollectionSignature) -> None:
        with self._lock, _unavailable_on_failure(f"open collection '{self.collection}'"):
            if not self.client.collection_exists(self.collection):
                self._create(signature)
            found = self.client.retrieve(self.collection, [pl.SIGNATURE_POINT_ID], with_payload=True)
            stored = pl.signature_from_payload(found[0].payload or {}) if found else None
            has_points = self.client.count(self.collection, exact=True).count > 0
            pl.check_signature(f"'{self.collection}' on Qdrant", stored, has_points, signature)
            if pl.epoch_from_payload(found[0].payload if found else None) is None:
                # A new collection, or one from before epochs existed. Conditional, so replicas
                # starting together agree on the first epoch written.
                point = _bare_point(pl.SIGNATURE_POINT_ID, pl.signature_payload(signature, pl.new_epoch()))
                self.client.upsert(
                    self.collection, [point], wait=True, update_filter=_filter([pl.Missing(pl.EPOCH)])
                )
            self._ensure_indexes()
            self._check_conditional_writes()

    def _check_conditional_writes(self) -> None:
        """Refuse a server that ignores conditional writes: replicas would lose updates on it.

        Qdrant answers conditional upserts since 1.16; an older one would overwrite silently.
        The probe uses its own random point, so replicas starting together do not meet.
        """
        probe = str(uuid.uuid4())
        try:
            self.client.upsert(self.collection, [_bare_point(probe, {pl.VERSION: 1})], wait=True)
            self.client.upsert(
                self.collection, [_bare_point(probe, {pl.VERSION: 3})], wait=True,
                update_filter=_filter([pl.Match(pl.VERSION, 2)]),
            )
            found = self.client.retrieve(self.collection, [probe], with_payload=True)
        finally:
            self.client.delete(self.collection, points_selector=qm.PointIdsList(points=[probe]), wait=True)
        if not found or (found[0].payload or {}).get(pl.VERSION) != 1:
            raise ConfigurationError(
                "The Qdrant server ignored a conditional write (update_filter), so writes from several "
                "search replicas could overwrite each other. Use Qdrant 1.16 or later."
            )

    def _create(self, signature: CollectionSignature) -> None:
        try:
            self.client.create_collection(
                self.collection,
                vectors_config={DENSE_VECTOR: qm.VectorParams(size=signature.dimensions, distance=qm.Distance.COSINE)},
                sparse_vectors_config={SPARSE_VECTOR: qm.SparseVectorParams(modifier=qm.Modifier.IDF)},
            )
        except UnexpectedResponse as exc:
            # Another replica created it between our check and our create: validate theirs.
            if exc.status_code != 409:
                raise

    def _ensure_indexes(self) -> None:
        present = self.client.get_collection(self.collection).payload_schema or {}
        with warnings.catch_warnings():
            # Local mode (used in tests) warns that payload indexes do nothing there.
            warnings.filterwarnings("ignore", message="Payload indexes have no effect", category=UserWarning)
            for field, schema in _INDEXES.items():
                if field not in present:
                    self.client.create_payload_index(self.collection, field, field_schema=schema)

    def close(self) -> None:
        if self._owns_client:
            self.client.close()

    # --- writes -------------------------------------------------------------------------

    def upsert_chunks(self, points: list[ChunkPoint]) -> None:
        if not points:
            return
        structs = [
            qm.PointStruct(
                id=p.id,
                vector={
                    DENSE_VECTOR: list(p.dense),
                    SPARSE_VECTOR: qm.SparseVector(indices=list(p.sparse.indices), values=list(p.sparse.values)),
                },
                payload=pl.chunk_payload(p),
            )
            for p in points
        ]
        fence = _filter([pl.version_at_most(points[0].version)])
        with self._lock, _unavailable_on_failure("write chunks"):
            for start in range(0, len(structs), _UPSERT_BATCH):
                self.client.upsert(self.collection, structs[start : start + _UPSERT_BATCH], wait=True, update_filter=fence)

    def write_document(self, record: DocumentRecord, expected_version: int | None) -> bool:
        point = _bare_point(record.id, pl.document_payload(record))
        with self._lock, _unavailable_on_failure("write a document record"):
            self.client.upsert(
                self.collection, [point], wait=True, update_filter=_filter(pl.record_version_is(expected_version))
            )
        return pl.same_write(self.get_document(record.uri), record)

    def delete_record(self, uri: str, version: int) -> None:
        doomed = _filter([pl.HasId(document_point_id(uri)), *pl.record_version_is(version)])
        with self._lock, _unavailable_on_failure("delete a document record"):
            self._delete(doomed)

    def delete_chunks(self, uri: str, lowest: int | None = None, highest: int | None = None) -> int:
        doomed = _filter(pl.chunk_conditions(uri, lowest, highest))
        with self._lock, _unavailable_on_failure("delete chunks"):
            deleted = self._count(doomed)
            if deleted:
                self._delete(doomed)
            return deleted

    def count_chunks(self, uri: str, version: int | None = None) -> int:
        with _unavailable_on_failure("count chunks"):
            return self._count(_filter(pl.chunk_conditions(uri, version, version)))

    def delete_document(self, uri: str) -> int:
        with self._lock, _unavailable_on_failure("delete a document"):
            deleted = self._count(_filter([pl.Match(KIND, KIND_CHUNK), pl.Match(URI, uri)]))
            self._delete(_filter([pl.Match(URI, uri)]))
            return deleted

    def delete_source(self, source_identifier: str) -> tuple[int, int]:
        source = pl.Match(SOURCE, source_identifier)
        with self._lock, _unavailable_on_failure("delete a source"):
            documents = self._count(_filter([pl.Match(KIND, KIND_DOCUMENT), source]))
            chunks = self._count(_filter([pl.Match(KIND, KIND_CHUNK), source]))
            # One delete by filter: no page cap, however large the source.
            self._delete(_filter([source]))
            return documents, chunks

    def _count(self, where: qm.Filter) -> int:
        return self.client.count(self.collection, count_filter=where, exact=True).count

    def _delete(self, where: qm.Filter) -> None:
        self.client.delete(self.collection, points_selector=qm.FilterSelector(filter=where), wait=True)

    # --- reads --------------------------------------------------------------------------

    def collection_epoch(self) -> str:
        with _unavailable_on_failure("read the collection epoch"):
            found = self.client.retrieve(self.collection, [pl.SIGNATURE_POINT_ID], with_payload=True)
        epoch = pl.epoch_from_payload(found[0].payload if found else None)
        if epoch is None:
            raise StoreUnavailableError(
                f"collection '{self.collection}' has no signature point: it was emptied or re-created "
                "behind the service's back; restart the service"
            )
        return epoch

    def get_document(self, uri: str) -> DocumentRecord | None:
        with _unavailable_on_failure("read a document record"):
            found = self.client.retrieve(self.collection, [document_point_id(uri)], with_payload=True)
        if not found or (found[0].payload or {}).get(KIND) != KIND_DOCUMENT:
            return None
        return pl.document_from_payload(found[0].payload)

    def reusable_vectors(self, uri: str, text_hashes: list[str]) -> dict[str, list[float]]:
        if not text_hashes:
            return {}
        wanted = [pl.Match(KIND, KIND_CHUNK), pl.Match(URI, uri), pl.MatchAny(TEXT_HASH, list(text_hashes))]
        with _unavailable_on_failure("read vectors"):
            return {
                (r.payload or {})[TEXT_HASH]: list(r.vector[DENSE_VECTOR])
                for r in self._scroll_all(wanted, payload=[TEXT_HASH], vector=[DENSE_VECTOR])
                if isinstance(r.vector, dict) and DENSE_VECTOR in r.vector
            }

    def incomplete_documents(self) -> list[DocumentRecord]:
        with _unavailable_on_failure("find incomplete documents"):
            return [
                pl.document_from_payload(r.payload or {})
                for r in self._scroll_all(pl.incomplete_conditions(), payload=True)
            ]

    def chunk_uris(self) -> list[str]:
        chunks = _filter([pl.Match(KIND, KIND_CHUNK)])
        with _unavailable_on_failure("list the URIs of chunks"):
            # A facet over the uri index; the chunk count bounds the distinct URIs, so none is dropped.
            limit = max(self._count(chunks), 1)
            facet = self.client.facet(self.collection, key=URI, facet_filter=chunks, limit=limit, exact=True)
        return [str(hit.value) for hit in facet.hits]

    def existing_records(self, uris: list[str]) -> set[str]:
        found: set[str] = set()
        with _unavailable_on_failure("read document records"):
            for start in range(0, len(uris), pl.SCROLL_PAGE):
                ids = [document_point_id(u) for u in uris[start : start + pl.SCROLL_PAGE]]
                for r in self.client.retrieve(self.collection, ids, with_payload=[KIND, URI]):
                    if (r.payload or {}).get(KIND) == KIND_DOCUMENT:
                        found.add(r.payload[URI])
        return found

    def source_status(self, source_identifier: str) -> SourceStatus:
        where = {name: _filter(conditions) for name, conditions in pl.source_conditions(source_identifier).items()}
        with _unavailable_on_failure("count a source"):
            latest, _ = self.client.scroll(
                self.collection, scroll_filter=where["documents"], limit=1, with_payload=[INGESTED_AT],
                with_vectors=False, order_by=qm.OrderBy(key=INGESTED_AT, direction=qm.Direction.DESC),
            )
            return SourceStatus(
                source_identifier=source_identifier,
                documents=self._count(where["documents"]),
                chunks=self._count(where["chunks"]),
                incomplete_documents=self._count(where["incomplete"]),
                last_ingested_at=(latest[0].payload or {}).get(INGESTED_AT) if latest else None,
            )

    def list_documents(
        self, *, source_identifier: str | None, uri_prefix: str | None, limit: int, cursor: str | None
    ) -> tuple[list[DocumentRecord], str | None]:
        offset = pl.parse_cursor(cursor)
        with _unavailable_on_failure("list documents"):
            records, next_offset = self.client.scroll(
                self.collection,
                scroll_filter=_filter(pl.document_conditions(source_identifier, uri_prefix)),
                limit=limit,
                offset=offset,
                with_payload=True,
                with_vectors=False,
            )
        documents = [pl.document_from_payload(r.payload or {}) for r in records]
        return documents, (str(next_offset) if next_offset is not None else None)

    def list_sources(self) -> list[SourceStats]:
        with _unavailable_on_failure("list sources"):
            documents = pl.tally_documents(self._document_payloads([SOURCE, INGESTED_AT]))
            if not documents:
                return []
            sources = list(documents)
            # Restricted to the known sources, `limit=len(sources)` cannot drop any of them.
            facet = self.client.facet(
                self.collection,
                key=SOURCE,
                facet_filter=_filter([pl.Match(KIND, KIND_CHUNK), pl.MatchAny(SOURCE, sources)]),
                limit=len(sources),
                exact=True,
            )
        return pl.source_stats(documents, {str(hit.value): hit.count for hit in facet.hits})

    def _document_payloads(self, fields: list[str]) -> Iterator[dict[str, Any]]:
        for record in self._scroll_all([pl.Match(KIND, KIND_DOCUMENT)], payload=fields):
            yield record.payload or {}

    def _scroll_all(
        self, conditions: list[pl.Condition], *, payload: list[str] | bool, vector: list[str] | bool = False,
        at_most: int | None = None,
    ):
        """Every matching point, page by page (or the first `at_most`)."""
        offset, seen = None, 0
        while True:
            size = pl.SCROLL_PAGE if at_most is None else min(pl.SCROLL_PAGE, at_most - seen)
            records, offset = self.client.scroll(
                self.collection, scroll_filter=_filter(conditions), limit=size, offset=offset,
                with_payload=payload, with_vectors=vector,
            )
            yield from records
            seen += len(records)
            if offset is None or (at_most is not None and seen >= at_most):
                return

    def count(self) -> tuple[int, int]:
        with _unavailable_on_failure("count points"):
            documents = self._count(_filter([pl.Match(KIND, KIND_DOCUMENT)]))
            chunks = self._count(_filter([pl.Match(KIND, KIND_CHUNK)]))
        return documents, chunks

    def search(
        self,
        *,
        mode: SearchMode,
        dense: list[float] | None,
        sparse: SparseVector | None,
        filter: SearchFilter,
        limit: int,
        candidates: int,
        rrf_k: int,
    ) -> list[SearchHit]:
        uris = None
        if filter.metadata:
            with _unavailable_on_failure("resolve a metadata filter"):
                matched = self._scroll_all(
                    pl.metadata_record_conditions(filter), payload=[URI], at_most=pl.MAX_METADATA_FILTER_DOCUMENTS + 1
                )
                uris = pl.metadata_uris(r.payload or {} for r in matched)
            if not uris:
                return []
        where = _filter(pl.search_conditions(filter, uris))
        stages: list[tuple[Any, str]] = []
        if dense is not None and mode in ("hybrid", "dense"):
            stages.append((list(dense), DENSE_VECTOR))
        # A query of stopwords only has no terms: it can match nothing, so it is not sent.
        if sparse is not None and sparse.indices and mode in ("hybrid", "keyword"):
            stages.append((qm.SparseVector(indices=list(sparse.indices), values=list(sparse.values)), SPARSE_VECTOR))
        if mode == "dense" and not stages:
            raise ValueError("dense search needs a dense query vector")
        if not stages:
            return []
        common: dict[str, Any] = {"query_filter": where, "limit": limit, "with_payload": True, "with_vectors": False}
        with _unavailable_on_failure("search"):
            if mode == "hybrid":
                prefetch = [qm.Prefetch(query=q, using=using, filter=where, limit=candidates) for q, using in stages]
                response = self.client.query_points(
                    self.collection, prefetch=prefetch, query=qm.RrfQuery(rrf=qm.Rrf(k=rrf_k)), **common
                )
            else:
                query, using = stages[0]
                response = self.client.query_points(self.collection, query=query, using=using, **common)
            hits = [pl.hit_from_payload(p.id, p.score, p.payload or {}) for p in response.points]
            if not hits:
                return hits
            ids = list({document_point_id(h.uri) for h in hits})
            records = self.client.retrieve(self.collection, ids, with_payload=[KIND, URI, METADATA])
        return pl.with_metadata(hits, (r.payload or {} for r in records))


def _bare_point(point_id: str, payload: dict[str, Any]) -> qm.PointStruct:
    """A point with no vectors: document records and the signature."""
    return qm.PointStruct(id=point_id, vector={}, payload=payload)


def _filter(conditions: list[pl.Condition]) -> qm.Filter | None:
    return qm.Filter(must=[_condition(c) for c in conditions]) if conditions else None


def _condition(condition: pl.Condition) -> Any:
    match condition:
        case pl.Missing(key):
            return qm.IsEmptyCondition(is_empty=qm.PayloadField(key=key))
        case pl.AnyOf(conditions):
            return qm.Filter(should=[_condition(c) for c in conditions])
        case pl.HasId(point_id):
            return qm.HasIdCondition(has_id=[point_id])
        case pl.Match(key, value):
            return qm.FieldCondition(key=key, match=qm.MatchValue(value=value))
        case pl.MatchAny(key, values):
            return qm.FieldCondition(key=key, match=qm.MatchAny(any=values))
        case pl.Prefix(key, prefix):
            return qm.FieldCondition(key=key, match=qm.MatchPrefix(prefix=prefix))
        case pl.Range(key, gte, lte):
            return qm.FieldCondition(key=key, range=qm.Range(gte=gte, lte=lte))
    raise TypeError(f"unknown condition {condition!r}")
