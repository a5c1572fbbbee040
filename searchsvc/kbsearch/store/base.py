"""The vector store interface and the payload layout every backend shares.

Every method is blocking; the service calls them from a worker thread. Implementations
serialise their own writes where the vendor library needs it.

Layout of one collection:
- a *chunk* point per chunk: named vectors `dense` and `bm25` (sparse, IDF modifier), id
  `chunk_point_id(uri, index)`;
- a *document* point per document: no vectors, id `document_point_id(uri)`, the manifest;
- one *collection* point holding the CollectionSignature, so a different embedder is refused.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

from kbsearch.errors import StoreUnavailableError
from kbsearch.models import (
    ChunkPoint,
    CollectionSignature,
    DocumentRecord,
    SearchFilter,
    SearchHit,
    SearchMode,
    SourceStats,
    SparseVector,
)

DENSE_VECTOR = "dense"
SPARSE_VECTOR = "bm25"

# payload keys
KIND = "kind"
KIND_CHUNK = "chunk"
KIND_DOCUMENT = "document"
KIND_COLLECTION = "collection"
URI = "uri"
SOURCE = "sourceIdentifier"
CHUNK_INDEX = "chunkIndex"
TOTAL_CHUNKS = "totalChunks"
CONTENT = "content"
TEXT_HASH = "textHash"
TITLE = "title"
TAGS = "tags"
HEADINGS = "headings"
METADATA = "metadata"
CHECKSUM = "checksum"
CHUNKS = "chunks"
INGESTED_AT = "ingestedAt"
CHUNKER = "chunker"

# Keyword payload indexes every backend creates.
KEYWORD_INDEXES = (KIND, URI, SOURCE)


class VectorStore(ABC):
    """One collection of chunks and document records."""

    backend: str  # "edge" | "qdrant"
    collection: str

    @abstractmethod
    def open(self, signature: CollectionSignature) -> None:
        """Create the collection (vectors, payload indexes, signature) or open it.

        Raises ConfigurationError when an existing collection was built with a different
        signature (embedder, model, dimensions or sparse encoder).
        """

    @abstractmethod
    def close(self) -> None: ...

    def write_problem(self) -> StoreUnavailableError | None:
        """Why the store refuses writes right now (a full disk, a vanished directory), or None.

        Reads go on meanwhile. The default is for stores that report failures per call.
        """
        return None

    @abstractmethod
    def get_document(self, uri: str) -> DocumentRecord | None: ...

    @abstractmethod
    def get_dense_vectors(self, point_ids: list[str]) -> dict[str, list[float]]:
        """Dense vectors of the given chunk points that exist, by id."""

    @abstractmethod
    def reusable_vectors(self, uri: str, text_hashes: list[str]) -> dict[str, list[float]]:
        """Dense vectors of the stored chunks of `uri` whose text hash is one of `text_hashes`.

        Keyed by the hash each point itself carries, so a vector is only reused for exactly
        the text it was computed from, even after an interrupted write reshuffled the chunks.
        """

    @abstractmethod
    def upsert_chunks(self, points: list[ChunkPoint]) -> None: ...

    @abstractmethod
    def delete_chunks_from(self, uri: str, first_index: int) -> int:
        """Delete the chunks of `uri` whose index is >= first_index; return how many."""

    @abstractmethod
    def put_document(self, record: DocumentRecord) -> None: ...

    @abstractmethod
    def delete_document(self, uri: str) -> int:
        """Delete the record and every chunk of `uri`; return the chunks deleted (0 if absent)."""

    @abstractmethod
    def delete_source(self, source_identifier: str) -> tuple[int, int]:
        """Delete every record and chunk of a source, with no cap; return (documents, chunks)."""

    @abstractmethod
    def list_documents(
        self,
        *,
        source_identifier: str | None,
        uri_prefix: str | None,
        limit: int,
        cursor: str | None,
    ) -> tuple[list[DocumentRecord], str | None]:
        """Document records in point-id order, starting at `cursor` (a point id).

        The order is fixed by the deterministic ids, so paging while documents are written
        never skips or repeats a document that exists throughout.
        """

    @abstractmethod
    def list_sources(self) -> list[SourceStats]: ...

    @abstractmethod
    def count(self) -> tuple[int, int]:
        """(documents, chunks) in the collection."""

    @abstractmethod
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
        """Top `limit` chunks. Hybrid fuses `candidates` dense and sparse hits with RRF(k)."""
