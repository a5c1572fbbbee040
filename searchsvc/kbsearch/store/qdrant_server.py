"""The vector store on a Qdrant server, through qdrant-client (also its local mode, in tests)."""

from __future__ import annotations

import logging
import math
import threading
import uuid
import warnings
from contextlib import AbstractContextManager
from typing import Any

from qdrant_client import QdrantClient
from qdrant_client import models as qm
from qdrant_client.http.exceptions import UnexpectedResponse

from kbsearch.errors import ConfigurationError, StoreUnavailableError
from kbsearch.models import (
    ChunkPoint,
    CollectionSignature,
    DocumentRecord,
    Fusion,
    SearchHit,
    SearchMode,
    SparseVector,
    StoredBody,
    SyncStatus,
    body_point_id,
    document_point_id,
    sync_status_point_id,
)
from kbsearch.store import conditions as cd
from kbsearch.store import payloads as pl
from kbsearch.store import signature as sg
from kbsearch.store.base import (
    CHECKSUM,
    CHUNK_INDEX,
    CONTENT,
    DENSE_VECTOR,
    DOC_VERSION,
    EPOCH,
    INGESTED_AT,
    KIND,
    KIND_CHUNK,
    KIND_DOCUMENT,
    SOURCE,
    SPARSE_VECTOR,
    TEXT_HASH,
    URI,
    VERSION,
    VectorStore,
)
from kbsearch.store.health import server_problem
from kbsearch.store.points import PointStore
from kbsearch.store.qdrant_common import (
    ORDERING,
    UPSERT_BATCH,
    Layout,
    bare_point,
    to_filter,
    unavailable_on_failure,
)

# uri gets a prefix-enabled keyword index so uriPrefix filters are served by the index.
_INDEXES: dict[str, Any] = {
    KIND: qm.PayloadSchemaType.KEYWORD,
    URI: qm.KeywordIndexParams(type=qm.KeywordIndexType.KEYWORD, prefix=True),
    SOURCE: qm.PayloadSchemaType.KEYWORD,
    CHUNK_INDEX: qm.IntegerIndexParams(type=qm.IntegerIndexType.INTEGER, lookup=True, range=True),
    # Finds incomplete records at start-up without reading every payload.
    CHECKSUM: qm.PayloadSchemaType.KEYWORD,
    # Finds a stored vector of a repeated chunk text in the same source (vectors_by_text_hash).
    TEXT_HASH: qm.PayloadSchemaType.KEYWORD,
    # The version filter of docs search (services/documents/versions.py).
    DOC_VERSION: qm.PayloadSchemaType.KEYWORD,
    # Lets a source's latest ingest be read with one ordered scroll.
    INGESTED_AT: qm.PayloadSchemaType.DATETIME,
    # Literal search's phrase condition (store/base.py, TEXT_INDEXES); the edge store's twin.
    CONTENT: qm.TextIndexParams(
        type=qm.TextIndexType.TEXT, tokenizer=qm.TokenizerType.WORD, lowercase=True, phrase_matching=True
    ),
}

log = logging.getLogger(__name__)

# Points fetched past a cut so that ties at it are broken by id (see _top).
TIE_SLACK = 16

# On a shadow's signature point once its first swap began (see adopt).
_SWAP_READY = "swapReady"


class QdrantServerStore(PointStore):
    """One collection on a Qdrant server; safe to share between replicas."""

    backend = "qdrant"

    def __init__(
        self,
        client: QdrantClient,
        collection: str,
        *,
        owns_client: bool = False,
        layout: Layout | None = None,
        probe: QdrantClient | None = None,
        probe_timeout_s: float = 2.0,
    ):
        self.client = client
        self.collection = collection
        self.layout = layout or Layout()  # applied to the collections this store creates
        self._owns_client = owns_client  # close() closes only clients this store made
        # /readyz's count goes through a client of its own with a short timeout, so that a
        # hanging server fails readiness in `probe_timeout_s` rather than the request timeout.
        self._probe = probe or client
        self._probe_timeout_s = probe_timeout_s
        self._unready_logged = False
        # Serialises this process's writes, so a count and the delete after it see the same data.
        self._lock = threading.Lock()

    @classmethod
    def from_url(
        cls,
        url: str,
        api_key: str | None,
        timeout: float,
        *,
        collection: str,
        layout: Layout | None = None,
        probe_timeout_s: float = 2.0,
    ) -> QdrantServerStore:
        # No compatibility probe here: the constructor must not touch the network; open() does.
        def client(seconds: float) -> QdrantClient:
            return QdrantClient(url=url, api_key=api_key, timeout=math.ceil(seconds), check_compatibility=False)

        return cls(
            client(timeout),
            collection,
            owns_client=True,
            layout=layout,
            probe=client(probe_timeout_s),
            probe_timeout_s=probe_timeout_s,
        )

    # --- lifecycle ----------------------------------------------------------------------

    def open(self, signature: CollectionSignature, *, check: bool = True) -> None:
        with self._lock, unavailable_on_failure(f"open collection '{self.collection}'"):
            if not self._exists(self.collection) and not self._finish_first_swap():
                self._create(signature)
            found = self.client.retrieve(self.collection, [sg.SIGNATURE_POINT_ID], with_payload=True)
            stored = sg.signature_from_payload(found[0].payload or {}) if found else None
            has_points = self.client.count(self.collection, exact=True).count > 0
            if check or stored is None:
                sg.check_signature(f"'{self.collection}' on Qdrant", stored, has_points, signature)
            if sg.epoch_from_payload(found[0].payload if found else None) is None:
                # A new collection, or one from before epochs existed. Conditional, so replicas
                # starting together agree on the first epoch written.
                point = bare_point(sg.SIGNATURE_POINT_ID, sg.signature_payload(signature, sg.new_epoch()))
                self.client.upsert(
                    self.collection, [point], wait=True, ordering=ORDERING, update_filter=to_filter([cd.Missing(EPOCH)])
                )
            self._ensure_indexes()
            self._check_conditional_writes()

    def _finish_first_swap(self) -> bool:
        """Alias the configured name to a rebuilt collection whose first swap was interrupted."""
        for name in reversed(self._generations()):
            found = self.client.retrieve(name, [sg.SIGNATURE_POINT_ID], with_payload=True)
            if found and (found[0].payload or {}).get(_SWAP_READY):
                create = qm.CreateAlias(collection_name=name, alias_name=self.collection)
                self.client.update_collection_aliases(
                    change_aliases_operations=[qm.CreateAliasOperation(create_alias=create)]
                )
                log.warning("finished an interrupted swap to a rebuilt collection", extra={"collection": name})
                return True
        return False

    def _aliases(self) -> dict[str, str]:
        return {a.alias_name: a.collection_name for a in self.client.get_aliases().aliases}

    def _exists(self, name: str) -> bool:
        """A collection or an alias of one (a rebuild turns the configured name into an alias)."""
        return name in self._aliases() or self.client.collection_exists(name)

    # --- the rebuild's shadow: a collection of its own, which the configured name becomes an alias of

    def _generations(self) -> list[str]:
        """Collections named `<name>--g<n>`, oldest first: rebuilt ones and a shadow under way."""
        prefix = f"{self.collection}--g"
        names = [c.name for c in self.client.get_collections().collections]
        found = [n for n in names if n.startswith(prefix) and n[len(prefix) :].isdigit()]
        return sorted(found, key=lambda n: int(n[len(prefix) :]))

    def _shadow_name(self) -> str | None:
        live = self._aliases().get(self.collection)
        pending = [g for g in self._generations() if g != live]
        return pending[-1] if pending else None

    def _sibling(self, name: str) -> QdrantServerStore:
        """Another collection on this store's client, laid out alike (a rebuild's shadow)."""
        return QdrantServerStore(self.client, name, layout=self.layout)

    def shadow_exists(self) -> bool:
        with unavailable_on_failure("look for a rebuild's shadow collection"):
            return self._shadow_name() is not None

    def open_shadow(self, signature: CollectionSignature) -> QdrantServerStore:
        with unavailable_on_failure("open a rebuild's shadow collection"):
            name = self._shadow_name()
            if name is not None:
                shadow = self._sibling(name)
                shadow.open(signature, check=False)
                stored = shadow.stored_signature()
                if stored is None or sg.compatible(stored, signature):
                    return shadow
                log.info("dropping a rebuild's shadow made for other settings", extra={"collection": name})
                self.client.delete_collection(name)
            numbers = [int(g.rsplit("--g", 1)[1]) for g in self._generations()]
            shadow = self._sibling(f"{self.collection}--g{max(numbers, default=0) + 1}")
            shadow.open(signature)
            return shadow

    def drop_shadow(self, shadow: VectorStore | None) -> None:
        with unavailable_on_failure("delete a rebuild's shadow collection"):
            name = shadow.collection if shadow is not None else self._shadow_name()
            if name is not None and name != self._aliases().get(self.collection):
                self.client.delete_collection(name)

    def stage_adoption(self, shadow: VectorStore) -> object:
        if not isinstance(shadow, QdrantServerStore) or shadow.client is not self.client:
            raise ValueError("only a shadow made by open_shadow can be adopted")
        return shadow  # nothing to prepare: the switch is one alias operation

    def adopt(self, staged: object) -> None:
        """Point the configured name at the shadow: one alias switch when it is an alias already.

        The first time, the name is still a collection of its own, which must go before the name can
        become an alias; a replica's request in that moment fails and is retried by its client.
        """
        shadow = staged
        if not isinstance(shadow, QdrantServerStore) or shadow.client is not self.client:
            raise ValueError("adopt takes what stage_adoption returned")
        with self._lock, unavailable_on_failure("swap in the rebuilt collection"):
            old = self._aliases().get(self.collection)
            create = qm.CreateAliasOperation(
                create_alias=qm.CreateAlias(collection_name=shadow.collection, alias_name=self.collection)
            )
            if old is not None:
                delete = qm.DeleteAliasOperation(delete_alias=qm.DeleteAlias(alias_name=self.collection))
                self.client.update_collection_aliases(change_aliases_operations=[delete, create])
                self.client.delete_collection(old)
            else:
                # Marked first: a process killed between the delete and the alias finishes the swap
                # at its next open (_finish_first_swap) instead of creating an empty collection.
                shadow.client.set_payload(
                    shadow.collection, {_SWAP_READY: True}, points=[sg.SIGNATURE_POINT_ID], wait=True, ordering=ORDERING
                )
                self.client.delete_collection(self.collection)
                self.client.update_collection_aliases(change_aliases_operations=[create])
        log.info("swapped in the rebuilt collection", extra={"collection": shadow.collection})

    def mark_chunker(self, fingerprint: str) -> None:
        with self._lock, unavailable_on_failure("record the collection's chunker"):
            found = self.client.retrieve(self.collection, [sg.SIGNATURE_POINT_ID], with_payload=True)
            if not found:
                raise StoreUnavailableError(f"collection '{self.collection}' has no signature point")
            payload = sg.with_chunker(found[0].payload or {}, fingerprint)
            self.client.upsert(
                self.collection, [bare_point(sg.SIGNATURE_POINT_ID, payload)], wait=True, ordering=ORDERING
            )

    def _check_conditional_writes(self) -> None:
        """Refuse a server that ignores conditional writes: replicas would lose updates on it.

        Qdrant answers conditional upserts since 1.16; an older one would overwrite silently.
        The probe uses its own random point, so replicas starting together do not meet.
        """
        probe = str(uuid.uuid4())
        try:
            self.client.upsert(self.collection, [bare_point(probe, {VERSION: 1})], wait=True, ordering=ORDERING)
            self.client.upsert(
                self.collection,
                [bare_point(probe, {VERSION: 3})],
                wait=True,
                ordering=ORDERING,
                update_filter=to_filter([cd.Match(VERSION, 2)]),
            )
            found = self.client.retrieve(self.collection, [probe], with_payload=True)
        finally:
            self.client.delete(
                self.collection, points_selector=qm.PointIdsList(points=[probe]), wait=True, ordering=ORDERING
            )
        if not found or (found[0].payload or {}).get(VERSION) != 1:
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
                shard_number=self.layout.shards,
                replication_factor=self.layout.replication_factor,
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
            if self._probe is not self.client:
                self._probe.close()

    def read_problem(self) -> StoreUnavailableError | None:
        """Whether the server can serve this collection: an exact count, which every shard answers.

        A cluster that lost every copy of a shard, an unreachable or hanging server: not ready.
        """
        seconds = math.ceil(self._probe_timeout_s)
        try:
            with unavailable_on_failure("count the collection's points"):
                self._probe.count(self.collection, exact=True, timeout=seconds)
        except StoreUnavailableError as exc:
            if not self._unready_logged:
                log.error("the Qdrant server cannot serve the collection", extra={"detail": str(exc)})
            self._unready_logged = True
            return server_problem(str(exc)).error()
        if self._unready_logged:
            log.info("the Qdrant server serves the collection again")
        self._unready_logged = False
        return None

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
        fence = to_filter([cd.version_at_most(points[0].version)])
        with self._lock, unavailable_on_failure("write chunks"):
            for start in range(0, len(structs), UPSERT_BATCH):
                self.client.upsert(
                    self.collection,
                    structs[start : start + UPSERT_BATCH],
                    wait=True,
                    ordering=ORDERING,
                    update_filter=fence,
                )

    def write_document(self, record: DocumentRecord, expected_version: int | None) -> bool:
        point = bare_point(record.id, pl.document_payload(record))
        with self._lock, unavailable_on_failure("write a document record"):
            self.client.upsert(
                self.collection,
                [point],
                wait=True,
                ordering=ORDERING,
                update_filter=to_filter(cd.record_version_is(expected_version)),
            )
        return pl.same_write(self.get_document(record.uri), record)

    def put_body(self, body: StoredBody) -> None:
        point = bare_point(body_point_id(body.uri), pl.body_payload(body))
        fence = to_filter([cd.version_at_most(body.version)])
        with self._lock, unavailable_on_failure("write a document body"):
            self.client.upsert(self.collection, [point], wait=True, ordering=ORDERING, update_filter=fence)

    def delete_body(self, uri: str, highest: int) -> None:
        doomed = [cd.HasId(body_point_id(uri)), cd.version_at_most(highest)]
        with self._lock, unavailable_on_failure("delete a document body"):
            self._delete(doomed)

    def delete_record(self, uri: str, version: int) -> None:
        doomed = [cd.HasId(document_point_id(uri)), *cd.record_version_is(version)]
        with self._lock, unavailable_on_failure("delete a document record"):
            self._delete(doomed)

    def put_sync_status(self, status: SyncStatus, trusted_until_s: float | None = None) -> bool:
        point = bare_point(sync_status_point_id(status.source_identifier), pl.sync_status_payload(status))
        with self._lock, unavailable_on_failure("write a sync status"):
            self.client.upsert(
                self.collection,
                [point],
                wait=True,
                ordering=ORDERING,
                update_filter=to_filter(pl.sync_status_newer_than(status, trusted_until_s)),
            )
        return self.get_sync_status(status.source_identifier) == status

    def delete_chunks(self, uri: str, lowest: int | None = None, highest: int | None = None) -> int:
        doomed = cd.chunk_conditions(uri, lowest, highest)
        with self._lock, unavailable_on_failure("delete chunks"):
            deleted = self._count(doomed)
            if deleted:
                self._delete(doomed)
            return deleted

    def count_chunks(self, uri: str, version: int | None = None) -> int:
        with unavailable_on_failure("count chunks"):
            return self._count(cd.chunk_conditions(uri, version, version))

    def delete_document(self, uri: str) -> int:
        with self._lock, unavailable_on_failure("delete a document"):
            deleted = self._count([cd.Match(KIND, KIND_CHUNK), cd.Match(URI, uri)])
            self._delete([cd.Match(URI, uri)])
            return deleted

    def delete_source(self, source_identifier: str) -> tuple[int, int]:
        source = cd.Match(SOURCE, source_identifier)
        with self._lock, unavailable_on_failure("delete a source"):
            documents = self._count([cd.Match(KIND, KIND_DOCUMENT), source])
            chunks = self._count([cd.Match(KIND, KIND_CHUNK), source])
            # One delete by filter: no page cap, however large the source.
            self._delete([source])
            return documents, chunks

    def _count(self, conditions: list[cd.Condition]) -> int:
        return self.client.count(self.collection, count_filter=to_filter(conditions), exact=True).count

    def _delete(self, conditions: list[cd.Condition]) -> None:
        self.client.delete(
            self.collection,
            points_selector=qm.FilterSelector(filter=to_filter(conditions)),
            wait=True,
            ordering=ORDERING,
        )

    # --- reads --------------------------------------------------------------------------

    def collection_epoch(self) -> str:
        with unavailable_on_failure("read the collection epoch"):
            found = self.client.retrieve(self.collection, [sg.SIGNATURE_POINT_ID], with_payload=True)
        epoch = sg.epoch_from_payload(found[0].payload if found else None)
        if epoch is None:
            raise StoreUnavailableError(
                f"collection '{self.collection}' has no signature point: it was emptied or re-created "
                "behind the service's back; restart the service"
            )
        return epoch

    # --- the primitives of the shared reads (store/points.py) -------------------------------

    def _guard(self, action: str) -> AbstractContextManager[None]:
        return unavailable_on_failure(action)

    def _scroll_page(
        self,
        conditions: list[cd.Condition],
        *,
        offset: Any,
        limit: int,
        payload: list[str] | bool,
        vector: list[str] | bool,
    ) -> tuple[list[Any], Any]:
        return self.client.scroll(
            self.collection,
            scroll_filter=to_filter(conditions),
            limit=limit,
            offset=offset,
            with_payload=payload,
            with_vectors=vector,
        )

    def _retrieve(self, ids: list[str], payload: list[str] | bool) -> list[Any]:
        return self.client.retrieve(self.collection, ids, with_payload=payload)

    def _facet(self, key: str, conditions: list[cd.Condition], limit: int) -> dict[str, int]:
        facet = self.client.facet(self.collection, key=key, facet_filter=to_filter(conditions), limit=limit, exact=True)
        return {str(hit.value): hit.count for hit in facet.hits}

    def _newest_payload(self, conditions: list[cd.Condition], field: str) -> dict[str, Any] | None:
        latest, _ = self.client.scroll(
            self.collection,
            scroll_filter=to_filter(conditions),
            limit=1,
            with_payload=[field],
            with_vectors=False,
            order_by=qm.OrderBy(key=field, direction=qm.Direction.DESC),
        )
        return (latest[0].payload or {}) if latest else None

    def _query(
        self,
        *,
        mode: SearchMode,
        dense: list[float] | None,
        sparse: SparseVector | None,
        conditions: list[cd.Condition],
        limit: int,
        candidates: int,
        fusion: Fusion,
    ) -> list[SearchHit]:
        where = to_filter(conditions)
        stages: list[tuple[Any, str, float]] = []
        if dense is not None and mode in ("hybrid", "dense"):
            stages.append((list(dense), DENSE_VECTOR, fusion.dense_weight))
        # A query of stopwords only has no terms: it can match nothing, so it is not sent.
        if sparse is not None and sparse.indices and mode in ("hybrid", "keyword"):
            vector = qm.SparseVector(indices=list(sparse.indices), values=list(sparse.values))
            stages.append((vector, SPARSE_VECTOR, fusion.keyword_weight))
        if mode == "dense" and not stages:
            raise ValueError("dense search needs a dense query vector")
        if not stages:
            return []
        # With a query vector, each hit's cosine to it comes back too (see EdgeStore._query).
        wanted = [DENSE_VECTOR] if dense is not None else False
        # TIE_SLACK more than asked, so that _top can break ties at the cut by id.
        common: dict[str, Any] = {
            "query_filter": where,
            "limit": limit + TIE_SLACK,
            "with_payload": True,
            "with_vectors": wanted,
        }
        if mode == "hybrid":
            prefetch = [qm.Prefetch(query=q, using=using, filter=where, limit=candidates) for q, using, _ in stages]
            lane_size = candidates
            if fusion.full_scores and len(stages) > 1:
                # Each lane rescores the union of both lanes' candidates, chosen here (ties by id).
                union = self._candidate_union(stages, where, candidates)
                if not union:
                    return []
                pinned = qm.Filter(must=[*(where.must if where else []), qm.HasIdCondition(has_id=union)])  # type: ignore[misc]
                lane_size = len(union)
                prefetch = [qm.Prefetch(query=q, using=using, filter=pinned, limit=lane_size) for q, using, _ in stages]
            weights = [w for _, _, w in stages]
            fused: Any
            if fusion.method == "dbsf" and any(w != 1.0 for w in weights):
                # Weighted DBSF: each lane normalised alone (a DBSF of one prefetch), then a weighted sum.
                dbsf = qm.FusionQuery(fusion=qm.Fusion.DBSF)
                prefetch = [qm.Prefetch(prefetch=[p], query=dbsf, limit=lane_size) for p in prefetch]
                fused = _weighted_sum(weights)
            else:
                fused = _fusion(fusion, weights)
            response = self.client.query_points(self.collection, prefetch=prefetch, query=fused, **common)
        else:
            query, using, _ = stages[0]
            response = self.client.query_points(self.collection, query=query, using=using, **common)
        return [
            pl.hit_from_payload(p.id, p.score, p.payload or {}, _similarity(dense, p.vector))
            for p in _top(response.points, limit)
        ]

    def _candidate_union(self, stages: list[tuple[Any, str, float]], where: qm.Filter | None, n: int) -> list[Any]:
        """Each lane's top `n` (ties broken by id, as _top does), in one batch of lane queries."""
        requests = [
            qm.QueryRequest(query=q, using=using, filter=where, limit=n + TIE_SLACK, with_payload=False)
            for q, using, _ in stages
        ]
        answers = self.client.query_batch_points(self.collection, requests=requests)
        return sorted({p.id for answer in answers for p in _top(answer.points, n)}, key=str)


def _top(points: list[qm.ScoredPoint], n: int) -> list[qm.ScoredPoint]:
    """The engine's first `n` (best first), with the points tied at the cut chosen by id.

    Which of several equal scores an engine keeps at a cut depends on where the points sit
    (segments, shards, which replica answers): Qdrant's local mode and a server differ, and so do
    runs on a cluster. By id, every engine and replica keeps the same ones. Above the cut the
    engine's order stays (its fusion ranks a lane in that order). Callers fetch TIE_SLACK more
    than `n`: a tie reaching further past the cut than that stays the engine's pick.
    """
    if len(points) <= n or n <= 0:
        return points[: max(n, 0)]
    edge = points[n - 1].score
    above = [p for p in points if p.score > edge]
    tied = sorted((p for p in points if p.score == edge), key=lambda p: str(p.id))[: n - len(above)]
    kept = {str(p.id) for p in tied}
    return [p for p in points if p.score > edge or str(p.id) in kept]


def _similarity(dense: list[float] | None, vectors: Any) -> float | None:
    if dense is None or not isinstance(vectors, dict) or not isinstance(vectors.get(DENSE_VECTOR), list):
        return None
    return pl.cosine(dense, vectors[DENSE_VECTOR])


def _fusion(fusion: Fusion, weights: list[float]) -> qm.FusionQuery | qm.RrfQuery:
    """The engine's fusion of the lanes' prefetches; `weights` follows the prefetch order."""
    if fusion.method == "dbsf":
        return qm.FusionQuery(fusion=qm.Fusion.DBSF)
    return qm.RrfQuery(rrf=qm.Rrf(k=fusion.rrf_k, weights=weights))


def _weighted_sum(weights: list[float]) -> qm.FormulaQuery:
    """sum(weight_i * score of prefetch i); a point a lane did not return scores 0 there."""
    terms: list[qm.Expression] = [qm.MultExpression(mult=[w, f"$score[{i}]"]) for i, w in enumerate(weights)]
    return qm.FormulaQuery(
        formula=qm.SumExpression(sum=terms), defaults={f"$score[{i}]": 0.0 for i in range(len(weights))}
    )
