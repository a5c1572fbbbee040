"""The vector store interface and the payload layout every backend shares.

Every method is blocking; the service calls them from a worker thread. Implementations
serialise their own writes where the vendor library needs it.

Layout of one collection:
- a *chunk* point per chunk: named vectors `dense` and `bm25` (sparse, IDF modifier), id
  `chunk_point_id(uri, index)`, and the `version` of the write that made it;
- a *document* point per document: no vectors, id `document_point_id(uri)`, the manifest,
  the document's metadata (stored once, never copied into chunks) and its `version`;
- one *collection* point holding the CollectionSignature, so a different embedder is refused,
  and the collection's epoch: a random id made when the collection is created;
- a *body* point per document written since bodies are kept: no vectors, id
  `body_point_id(uri)`, the text as PUT and the chunker's body (front matter aside), the record's
  checksum and the version of the write that made it; what reads and rebuilds start from;
- a *sync status* point per source that reported one: no vectors, id
  `sync_status_point_id(source)`, the source's sourceIdentifier and its last reported sync
  under `sync`. It goes with the source's documents when the source is deleted.

Writes are conditional where several writers could meet (replicas on one Qdrant server):
a record is written only over the version its writer read, and a chunk is overwritten only
by a write of the same or a higher version. Points written before versions existed have no
`version` field and count as version 0.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

from kbsearch.errors import StoreUnavailableError
from kbsearch.models import (
    ChunkPoint,
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
)

DENSE_VECTOR = "dense"
SPARSE_VECTOR = "bm25"

# payload keys
KIND = "kind"
KIND_CHUNK = "chunk"
KIND_DOCUMENT = "document"
KIND_COLLECTION = "collection"
KIND_SYNC_STATUS = "syncstatus"
KIND_BODY = "body"
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
VERSION = "version"
CHAR_START = "start"
CHAR_END = "end"
DOC_VERSION = "docVersion"  # the documentation version (services/documents/versions.py); VERSION is the record version
PAGE_KEY = "pageKey"  # the version-free page key of versioned docs
PAGE = "page"  # a PDF chunk's page; absent for other formats
CELL = "cell"  # a notebook chunk's cell
WRITE_ID = "writeId"
EPOCH = "epoch"
SYNC = "sync"
BODY = "body"
SYNCED_AT_S = "syncedAtS"  # the report's time as seconds since the epoch: a newer one is never replaced

# Keyword payload indexes every backend creates.
KEYWORD_INDEXES = (KIND, URI, SOURCE, CHECKSUM, TEXT_HASH)
# A chunk's content also has a full-text index (word tokens, lowercased, with positions), which
# literal search's phrase condition (conditions.Phrase) is served by. Both backends create it on
# open when it is missing, so a store from before it gains it by itself.
TEXT_INDEXES = (CONTENT,)

# A metadata search filter is resolved to the URIs of the matching documents first; past
# this many the request is refused (422) and must be narrowed by source or URI prefix.
MAX_METADATA_FILTER_DOCUMENTS = 10_000


class VectorStore(ABC):
    """One collection of chunks and document records."""

    backend: str  # "edge" | "qdrant"
    collection: str

    @abstractmethod
    def open(self, signature: CollectionSignature, *, check: bool = True) -> None:
        """Create the collection (vectors, payload indexes, signature) or open it.

        Raises ConfigurationError when an existing collection was built with a different
        signature (embedder, model, dimensions or sparse encoder), unless `check` is False: then
        it opens as it is, to be served with the embedder that built it while a rebuild runs
        (services/rebuild/rebuild.py); stored_signature() says what that was.
        """

    @abstractmethod
    def stored_signature(self) -> CollectionSignature | None:
        """What the open collection's vectors were made with (None: an empty, new collection)."""

    @abstractmethod
    def collection_chunker(self) -> str | None:
        """The chunker fingerprint the collection was built with.

        Recorded on the signature point by a rebuild; for older collections, that of one document
        record (None when there is none).
        """

    @abstractmethod
    def mark_chunker(self, fingerprint: str) -> None:
        """Record the chunker fingerprint the whole collection was built with (a rebuild's last step)."""

    # --- the background rebuild's shadow collection (services/rebuild/rebuild.py) ----------------------
    # The store owns where the shadow lives and how it is swapped in: on Edge a directory beside
    # the shard that becomes its next generation (the pointer file names it); on a Qdrant server a
    # collection the configured name becomes an alias of.

    @abstractmethod
    def shadow_exists(self) -> bool:
        """Whether a shadow collection from an unfinished rebuild is there to resume."""

    @abstractmethod
    def open_shadow(self, signature: CollectionSignature) -> VectorStore:
        """The shadow collection, open: the one there if it has `signature`, else a new empty one."""

    @abstractmethod
    def stage_adoption(self, shadow: VectorStore) -> object:
        """The slow half of a swap (on Edge: close, rename and load the shadow); nothing changes for readers.

        The caller holds every write back from here until adopt() returns; `shadow` is closed by it.
        """

    @abstractmethod
    def adopt(self, staged: object) -> None:
        """Serve what stage_adoption() prepared from now on, atomically (a restart opens it too), and
        drop the old collection. The caller holds searches back meanwhile (a query must be embedded by
        the model of the collection it meets)."""

    @abstractmethod
    def drop_shadow(self, shadow: VectorStore | None) -> None:
        """Close (if given) and delete the shadow collection."""

    @abstractmethod
    def close(self) -> None: ...

    def write_problem(self) -> StoreUnavailableError | None:
        """Why the store refuses writes right now (a full disk, a vanished directory), or None.

        Reads go on meanwhile. The default is for stores that report failures per call.
        """
        return None

    def read_problem(self) -> StoreUnavailableError | None:
        """Why the store cannot serve at all right now (its server is lost), or None; /readyz asks.

        The default is for stores inside the process, which serve while the process runs.
        """
        return None

    @abstractmethod
    def collection_epoch(self) -> str:
        """The random id stored with the signature when the collection was created (read live)."""

    @abstractmethod
    def get_document(self, uri: str) -> DocumentRecord | None: ...

    @abstractmethod
    def document_chunks(self, uri: str, first: int, last: int) -> list[DocumentChunk]:
        """The stored chunks of `uri` with first <= index < last, in index order (absent ones skipped)."""

    @abstractmethod
    def reusable_vectors(self, uri: str, text_hashes: list[str]) -> dict[str, list[float]]:
        """Dense vectors of the stored chunks of `uri` whose text hash is one of `text_hashes`.

        Keyed by the hash each point itself carries, so a vector is only reused for exactly
        the text it was computed from, even after an interrupted write reshuffled the chunks.
        """

    @abstractmethod
    def vectors_by_text_hash(self, text_hashes: list[str], source_identifier: str | None) -> dict[str, list[float]]:
        """A dense vector for each of `text_hashes` that some chunk of `source_identifier` has.

        Found through the textHash payload index (an engine filter, never a scan), so a text
        repeated across a source's documents (versioned documentation) is embedded once per source.
        Another source's chunks are never looked at: whether a vector was found must not tell a
        writer what other sources hold. None is the documents without a source.
        Equal hashes mean equal embedded text, and the collection signature guarantees one model.
        """

    @abstractmethod
    def readable_vectors_by_text_hash(self, text_hashes: list[str], sources: list[str]) -> dict[str, list[float]]:
        """A dense vector for each of `text_hashes` that some chunk of one of `sources` has (none: {}).

        Through the same index and an engine filter on the exact `sources`, which the caller bounds
        to what the writer may read within its team (services/documents/prep.py), so a vector
        found tells the writer only of a text it could search for anyway.
        """

    @abstractmethod
    def write_document(self, record: DocumentRecord, expected_version: int | None) -> bool:
        """Write `record` only if the stored record has `expected_version` (None: no record).

        One conditional write in the engine, then a read back: True when the stored record is
        now exactly this write (same write_id, version and checksum).
        """

    @abstractmethod
    def put_body(self, body: StoredBody) -> None:
        """Store a document's text; a stored body of a higher version is left alone."""

    @abstractmethod
    def get_body(self, uri: str) -> StoredBody | None: ...

    @abstractmethod
    def delete_body(self, uri: str, highest: int) -> None:
        """Delete the body of `uri` if its version is at most `highest`."""

    @abstractmethod
    def delete_record(self, uri: str, version: int) -> None:
        """Delete the record of `uri` if it still has `version`; its chunks are not touched."""

    @abstractmethod
    def upsert_chunks(self, points: list[ChunkPoint]) -> None:
        """Insert or overwrite chunks; an existing chunk of a higher version is left alone.

        Every point of one call has the same uri and version.
        """

    @abstractmethod
    def delete_chunks(self, uri: str, lowest: int | None = None, highest: int | None = None) -> int:
        """Delete the chunks of `uri` whose version is within [lowest, highest] (None: open).

        Returns how many were deleted.
        """

    @abstractmethod
    def count_chunks(self, uri: str, version: int | None = None) -> int:
        """Chunks of `uri`, or only those of one version."""

    @abstractmethod
    def delete_document(self, uri: str) -> int:
        """Delete the record and every chunk of `uri`; return the chunks deleted (0 if absent)."""

    @abstractmethod
    def delete_source(self, source_identifier: str) -> tuple[int, int]:
        """Delete every record, chunk and the sync status of a source, with no cap; return (documents, chunks)."""

    @abstractmethod
    def incomplete_documents(self) -> list[DocumentRecord]:
        """Records marked incomplete (an interrupted write), found through the checksum index."""

    @abstractmethod
    def chunk_uris(self) -> list[str]:
        """Every URI that has at least one chunk (a facet over the uri index, not a scan)."""

    @abstractmethod
    def existing_records(self, uris: list[str]) -> set[str]:
        """Those of `uris` that have a document record."""

    @abstractmethod
    def list_documents(
        self,
        *,
        source_identifier: str | None,
        uri_prefix: str | None,
        limit: int,
        cursor: str | None,
        allowed: list[str] | None = None,
    ) -> tuple[list[DocumentRecord], str | None]:
        """Document records in point-id order, starting at `cursor` (a point id).

        `allowed` (a caller's scope, exact ids) is one more engine filter; None: every source.

        The order is fixed by the deterministic ids, so paging while documents are written
        never skips or repeats a document that exists throughout.
        """

    @abstractmethod
    def list_sources(self, allowed: list[str] | None = None) -> list[SourceStats]:
        """Every source (or those of `allowed`) with its counts and its last reported sync.

        A source with a sync status but no documents (its every file failed) is listed too.
        """

    @abstractmethod
    def put_sync_status(self, status: SyncStatus, trusted_until_s: float | None = None) -> bool:
        """Store a source's sync status, unless the stored one is newer (a later synced_at).

        A stored status dated at or after `trusted_until_s` (seconds since the epoch) is replaced
        whatever its date: a date that far ahead is forged or from a wrong clock. True when
        `status` is now the stored one.
        """

    @abstractmethod
    def get_sync_status(self, source_identifier: str) -> SyncStatus | None: ...

    @abstractmethod
    def source_identifiers(self) -> list[str]:
        """Every sourceIdentifier of a document record or a sync status: a facet, not a scan (resolves scope globs)."""

    @abstractmethod
    def source_status(self, source_identifier: str) -> SourceStatus:
        """Counts for one source from filtered engine counts; zeros for an unknown source."""

    @abstractmethod
    def version_counts(self, sources: list[str] | None, uri_prefix: str | None, limit: int) -> dict[str, int]:
        """Chunks per documentation version in `sources` (None: every source), at most `limit` versions:
        a facet over the indexed version, not a scan."""

    @abstractmethod
    def count(self, allowed: list[str] | None = None) -> tuple[int, int]:
        """(documents, chunks) in the collection, or in the sources of `allowed`."""

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
        fusion: Fusion,
        phrase: str | None = None,
    ) -> list[SearchHit]:
        """Top `limit` chunks. Hybrid fuses `candidates` dense and sparse hits by `fusion`,
        in the engine. Literal is hybrid over the chunks whose content holds `phrase`'s words in
        order (a phrase condition on the content's text index, beside the filter's).

        A metadata filter is resolved to the URIs of the matching records first (at most
        MAX_METADATA_FILTER_DOCUMENTS, else InvalidRequestError), so the engine still applies
        every filter before ranking. Each hit carries its document's metadata, read from the
        records of the hits in one retrieve.
        """
