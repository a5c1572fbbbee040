"""The embedded store's query log: a payload-only Qdrant Edge shard beside the chunks' shard."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any
from uuid import UUID

import qdrant_edge as qe

from kbsearch.store import conditions as cd
from kbsearch.store.edge.filters import bare_point, to_filter, where
from kbsearch.store.querylog import (
    BOOL_INDEXES,
    FLOAT_INDEXES,
    INTEGER_INDEXES,
    KEYWORD_INDEXES,
    QueryLogStore,
)


class EdgeQueryLog(QueryLogStore):
    """The query log as a second shard, `data_dir/<collection>`, beside the chunks' shard.

    Edge needs at least one vector in a shard's config: a 1-dimension one is declared and never
    written, so every point is payload-only. Each append is flushed: the log is written in
    batches by a background task, never on a request's path. The main EdgeStore's directory
    lock already keeps a second process out of the data directory.
    """

    backend = "edge"

    def __init__(self, data_dir: Path, collection: str) -> None:
        self.collection = collection
        self.path = Path(data_dir) / collection
        self._shard: qe.EdgeShard | None = None
        self._lock = threading.Lock()

    def open(self) -> None:
        with self._lock:
            if self.path.is_dir() and any(self.path.iterdir()):
                shard = qe.EdgeShard.load(str(self.path))
            else:
                self.path.mkdir(parents=True, exist_ok=True)
                unused = qe.EdgeVectorParams(size=1, distance=qe.Distance.Cosine)
                shard = qe.EdgeShard.create(str(self.path), qe.EdgeConfig(vectors={"unused": unused}))
            present = shard.info().payload_schema
            wanted: dict[str, Any] = {f: qe.FloatIndexParams() for f in FLOAT_INDEXES}
            wanted |= dict.fromkeys(KEYWORD_INDEXES, qe.PayloadSchemaType.Keyword)
            wanted |= dict.fromkeys(BOOL_INDEXES, qe.PayloadSchemaType.Bool)
            wanted |= {f: qe.IntegerIndexParams(lookup=True, range=True) for f in INTEGER_INDEXES}
            for field, schema in wanted.items():
                if field not in present:
                    shard.update(qe.UpdateOperation.create_field_index(field, schema))
            shard.flush()
            self._shard = shard

    def close(self) -> None:
        with self._lock:
            if self._shard is not None:
                try:
                    self._shard.flush()
                    self._shard.close()
                finally:
                    self._shard = None

    @property
    def _s(self) -> qe.EdgeShard:
        if self._shard is None:
            raise RuntimeError(f"query log {self.path} is not open")
        return self._shard

    def _upsert(self, points: list[tuple[str, dict[str, Any]]]) -> None:
        with self._lock:
            self._s.update(qe.UpdateOperation.upsert_points([bare_point(i, p) for i, p in points]))
            self._s.flush()

    def _scroll_page(
        self, conditions: list[cd.Condition], *, offset: Any, limit: int, payload: list[str] | bool
    ) -> tuple[list[Any], Any]:
        page = qe.ScrollRequest(offset=offset, limit=limit, filter=to_filter(conditions), with_payload=payload)
        return self._s.scroll(page)

    def _oldest_ids(self, limit: int) -> list[str]:
        oldest = qe.OrderBy(FLOAT_INDEXES[0], direction=qe.Direction.Asc)
        page, _ = self._s.scroll(qe.ScrollRequest(limit=limit, with_payload=False, order_by=oldest))
        return [str(p.id) for p in page]

    def _count(self, conditions: list[cd.Condition]) -> int:
        return self._s.count(qe.CountRequest(exact=True, filter=to_filter(conditions)))

    def _facet(self, key: str, conditions: list[cd.Condition], limit: int) -> dict[Any, int]:
        facet = self._s.facet(qe.FacetRequest(key, limit=limit, exact=True, filter=to_filter(conditions)))
        return {hit.value: hit.count for hit in facet.hits}

    def _first_by(
        self, conditions: list[cd.Condition], field: str, *, descending: bool = True
    ) -> dict[str, Any] | None:
        page, _ = self._s.scroll(
            qe.ScrollRequest(
                limit=1,
                filter=to_filter(conditions),
                with_payload=True,
                order_by=qe.OrderBy(field, direction=qe.Direction.Desc if descending else qe.Direction.Asc),
            )
        )
        return (page[0].payload or {}) if page else None

    def _delete_where(self, conditions: list[cd.Condition]) -> None:
        with self._lock:
            self._s.update(qe.UpdateOperation.delete_points_by_filter(where(conditions)))
            self._s.flush()

    def _delete_ids(self, ids: list[str]) -> None:
        with self._lock:
            self._s.update(qe.UpdateOperation.delete_points(list[int | UUID | str](ids)))
            self._s.flush()
