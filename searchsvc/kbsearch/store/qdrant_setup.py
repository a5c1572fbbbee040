"""The server store's collection setup: its vectors, shards and copies, payload indexes, and the
check that the server honours conditional writes."""

from __future__ import annotations

import uuid
import warnings
from typing import Any

from qdrant_client import QdrantClient
from qdrant_client import models as qm
from qdrant_client.http.exceptions import UnexpectedResponse

from kbsearch.errors import ConfigurationError
from kbsearch.models import CollectionSignature
from kbsearch.store import conditions as cd
from kbsearch.store.base import (
    CHECKSUM,
    CHUNK_INDEX,
    CONTENT,
    DENSE_VECTOR,
    DOC_VERSION,
    INGESTED_AT,
    KIND,
    SOURCE,
    SPARSE_VECTOR,
    TEXT_HASH,
    URI,
    VERSION,
)
from kbsearch.store.qdrant_common import ORDERING, Layout, bare_point, to_filter

__all__ = ["check_conditional_writes", "create_collection", "ensure_indexes"]

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


def create_collection(client: QdrantClient, name: str, signature: CollectionSignature, layout: Layout) -> None:
    try:
        client.create_collection(
            name,
            vectors_config={DENSE_VECTOR: qm.VectorParams(size=signature.dimensions, distance=qm.Distance.COSINE)},
            sparse_vectors_config={SPARSE_VECTOR: qm.SparseVectorParams(modifier=qm.Modifier.IDF)},
            shard_number=layout.shards,
            replication_factor=layout.replication_factor,
        )
    except UnexpectedResponse as exc:
        # Another replica created it between our check and our create: validate theirs.
        if exc.status_code != 409:
            raise


def ensure_indexes(client: QdrantClient, name: str) -> None:
    present = client.get_collection(name).payload_schema or {}
    with warnings.catch_warnings():
        # Local mode (used in tests) warns that payload indexes do nothing there.
        warnings.filterwarnings("ignore", message="Payload indexes have no effect", category=UserWarning)
        for field, schema in _INDEXES.items():
            if field not in present:
                client.create_payload_index(name, field, field_schema=schema)


def check_conditional_writes(client: QdrantClient, name: str) -> None:
    """Refuse a server that ignores conditional writes: replicas would lose updates on it.

    Qdrant answers conditional upserts since 1.16; an older one would overwrite silently.
    The probe uses its own random point, so replicas starting together do not meet.
    """
    probe = str(uuid.uuid4())
    try:
        client.upsert(name, [bare_point(probe, {VERSION: 1})], wait=True, ordering=ORDERING)
        client.upsert(
            name,
            [bare_point(probe, {VERSION: 3})],
            wait=True,
            ordering=ORDERING,
            update_filter=to_filter([cd.Match(VERSION, 2)]),
        )
        found = client.retrieve(name, [probe], with_payload=True)
    finally:
        client.delete(name, points_selector=qm.PointIdsList(points=[probe]), wait=True, ordering=ORDERING)
    if not found or (found[0].payload or {}).get(VERSION) != 1:
        raise ConfigurationError(
            "The Qdrant server ignored a conditional write (update_filter), so writes from several "
            "search replicas could overwrite each other. Use Qdrant 1.19 or later."
        )
