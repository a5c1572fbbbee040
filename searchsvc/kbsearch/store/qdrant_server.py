"""The vector store on a Qdrant server, through qdrant-client (also its local mode, in tests)."""

from __future__ import annotations

import logging
import math
import threading
from contextlib import AbstractContextManager
from typing import Any

from qdrant_client import QdrantClient
from qdrant_client import models as qm

from kbsearch.errors import StoreUnavailableError
from kbsearch.models import (
    ChunkPoint,
    CollectionSignature,
    DocumentRecord,
    SearchHit,
    StoredBody,
    SyncStatus,
    body_point_id,
    document_point_id,
    sync_status_point_id,
)
from kbsearch.store import conditions as cd
from kbsearch.store import payloads as pl
from kbsearch.store import qdrant_setup as setup
from kbsearch.store import signature as sg
from kbsearch.store.base import (
    DENSE_VECTOR,
    EPOCH,
    KIND,
    KIND_CHUNK,
    KIND_DOCUMENT,
    SOURCE,
    SPARSE_VECTOR,
    URI,
    VectorStore,
)
from kbsearch.store.health import server_problem
from kbsearch.store.points import PointStore, RankedQuery
from kbsearch.store.qdrant_common import (
    ORDERING,
    UPSERT_BATCH,
    Layout,
    bare_point,
    to_filter,
    unavailable_on_failure,
)
from kbsearch.store.qdrant_query import query_points

log = logging.getLogger(__name__)

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
                setup.create_collection(self.client, self.collection, signature, self.layout)
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
            setup.ensure_indexes(self.client, self.collection)
            setup.check_conditional_writes(self.client, self.collection)

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

    def _query(self, search: RankedQuery) -> list[SearchHit]:
        return query_points(self.client, self.collection, search)
