"""The query log on a Qdrant server: a second, vector-less collection beside the documents."""

from __future__ import annotations

import warnings
from typing import Any

from qdrant_client import QdrantClient
from qdrant_client import models as qm
from qdrant_client.http.exceptions import UnexpectedResponse

from kbsearch.store import conditions as cd
from kbsearch.store.qdrant_common import ORDERING, UPSERT_BATCH, Layout, bare_point, to_filter, unavailable_on_failure
from kbsearch.store.querylog import (
    BOOL_INDEXES,
    FLOAT_INDEXES,
    INTEGER_INDEXES,
    KEYWORD_INDEXES,
    QueryLogStore,
)

__all__ = ["QdrantQueryLog"]


class QdrantQueryLog(QueryLogStore):
    """The query log as a second, vector-less collection on the same server (shared by the replicas)."""

    backend = "qdrant"

    def __init__(self, client: QdrantClient, collection: str, layout: Layout | None = None) -> None:
        self.client = client  # the main store's: it closes it
        self.collection = collection
        self.layout = layout or Layout()  # the main store's: the log is as replicated as the documents

    def open(self) -> None:
        with unavailable_on_failure(f"open collection '{self.collection}'"):
            if not self.client.collection_exists(self.collection):
                try:
                    self.client.create_collection(
                        self.collection,
                        vectors_config={},
                        shard_number=self.layout.shards,
                        replication_factor=self.layout.replication_factor,
                    )
                except UnexpectedResponse as exc:
                    if exc.status_code != 409:  # 409: another replica created it first
                        raise
            present = self.client.get_collection(self.collection).payload_schema or {}
            wanted: dict[str, Any] = dict.fromkeys(FLOAT_INDEXES, qm.PayloadSchemaType.FLOAT)
            wanted |= dict.fromkeys(KEYWORD_INDEXES, qm.PayloadSchemaType.KEYWORD)
            wanted |= dict.fromkeys(BOOL_INDEXES, qm.PayloadSchemaType.BOOL)
            integer = qm.IntegerIndexParams(type=qm.IntegerIndexType.INTEGER, lookup=True, range=True)
            wanted |= dict.fromkeys(INTEGER_INDEXES, integer)
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message="Payload indexes have no effect", category=UserWarning)
                for field, schema in wanted.items():
                    if field not in present:
                        self.client.create_payload_index(self.collection, field, field_schema=schema)

    def close(self) -> None:
        pass

    def _upsert(self, points: list[tuple[str, dict[str, Any]]]) -> None:
        with unavailable_on_failure("write the query log"):
            for start in range(0, len(points), UPSERT_BATCH):
                batch = [bare_point(i, p) for i, p in points[start : start + UPSERT_BATCH]]
                self.client.upsert(self.collection, batch, wait=True, ordering=ORDERING)

    def _scroll_page(
        self, conditions: list[cd.Condition], *, offset: Any, limit: int, payload: list[str] | bool
    ) -> tuple[list[Any], Any]:
        with unavailable_on_failure("read the query log"):
            return self.client.scroll(
                self.collection, scroll_filter=to_filter(conditions), limit=limit, offset=offset, with_payload=payload
            )

    def _oldest_ids(self, limit: int) -> list[str]:
        with unavailable_on_failure("read the query log"):
            page, _ = self.client.scroll(
                self.collection,
                limit=limit,
                with_payload=False,
                order_by=qm.OrderBy(key=FLOAT_INDEXES[0], direction=qm.Direction.ASC),
            )
        return [str(p.id) for p in page]

    def _count(self, conditions: list[cd.Condition]) -> int:
        with unavailable_on_failure("count the query log"):
            return self.client.count(self.collection, count_filter=to_filter(conditions), exact=True).count

    def _facet(self, key: str, conditions: list[cd.Condition], limit: int) -> dict[Any, int]:
        with unavailable_on_failure("count the query log"):
            facet = self.client.facet(
                self.collection, key=key, facet_filter=to_filter(conditions), limit=limit, exact=True
            )
        return {hit.value: hit.count for hit in facet.hits}

    def _first_by(
        self, conditions: list[cd.Condition], field: str, *, descending: bool = True
    ) -> dict[str, Any] | None:
        with unavailable_on_failure("read the query log"):
            page, _ = self.client.scroll(
                self.collection,
                scroll_filter=to_filter(conditions),
                limit=1,
                with_payload=True,
                order_by=qm.OrderBy(key=field, direction=qm.Direction.DESC if descending else qm.Direction.ASC),
            )
        return (page[0].payload or {}) if page else None

    def _delete_where(self, conditions: list[cd.Condition]) -> None:
        if not conditions:
            raise ValueError("a delete by filter needs at least one condition")
        with unavailable_on_failure("prune the query log"):
            selector = qm.FilterSelector(filter=to_filter(conditions))
            self.client.delete(self.collection, points_selector=selector, wait=True, ordering=ORDERING)

    def _delete_ids(self, ids: list[str]) -> None:
        with unavailable_on_failure("prune the query log"):
            self.client.delete(
                self.collection, points_selector=qm.PointIdsList(points=list(ids)), wait=True, ordering=ORDERING
            )
