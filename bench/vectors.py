"""SciFact chunk points (dense + sparse + payload) for loading a store directly, with cached vectors.

The dense vectors are the real MiniLM vectors of the service's own chunks of each abstract
(`# {title}\\n\\n{text}` through MarkdownChunker at default settings). They come, cheapest first, from:
1. bench/results/cache/scifact-vectors-<key>.npy (written by an earlier run);
2. the retrieval benchmark's ingested collection (bench/results/cache/scifact-edge/), read back by
   point id with `EdgeStore.get_dense_vectors` - the vectors the service itself computed;
3. the LocalEmbedder, on every chunk's `embed_text` (~15 min on 2 cores).
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bench.common import CACHE_DIR, SciFact, scifact_markdown

# The retrieval benchmark's Edge collection, which the vectors here can be read back from.
COLLECTION = "scifact"


def data_dir() -> Path:
    from bench.common import model_tag

    return CACHE_DIR / f"{model_tag()}scifact-retrieval-edge"


@dataclass
class ChunkSet:
    points: list  # kbsearch.models.ChunkPoint
    records: list  # kbsearch.models.DocumentRecord
    origin: str  # how the dense vectors were obtained
    real: int  # points with their own real vector
    augmented: int  # extra points made from real ones (see augment)


def signature(backend: str | None = None, dimensions: int = 384):
    """The collection signature of the SciFact points: the local model (MiniLM's 384 dimensions unless
    told) run by `backend` (None: the service's default) and the service's BM25 encoder. The backend is
    part of it, so vectors read back from a collection are never another backend's (an int8 collection
    refuses torch)."""
    from kbsearch.models import CollectionSignature
    from kbsearch.settings import Settings
    from kbsearch.store.bm25 import Bm25Encoder

    settings = Settings()
    return CollectionSignature(
        "local",
        settings.embedding.local_model,
        dimensions,
        Bm25Encoder.name,
        backend or settings.embedding.local_backend,
    )


def scifact_chunks(
    data: SciFact, embedder=None, *, target: int = 0, seed: int = 3, backend: str | None = None
) -> ChunkSet:
    """Every SciFact chunk as a ChunkPoint, topped up to `target` points by augmentation if asked.

    `backend` (SEARCHSVC_LOCAL_BACKEND) is part of the vector cache's key: each backend's vectors apart.
    """
    from kbsearch.chunker import MarkdownChunker
    from kbsearch.models import ChunkPoint, DocumentRecord, chunk_point_id
    from kbsearch.settings import Settings
    from kbsearch.store.bm25 import Bm25Encoder

    settings = Settings()
    lo, hi = settings.chunk_range
    chunker = MarkdownChunker(lo, hi, settings.chunking.chunk_overlap_chars)
    parsed = [(doc, chunker.chunk(scifact_markdown(doc))) for doc in data.corpus]
    embed_texts = [c.embed_text for _, p in parsed for c in p.chunks]
    ids = [chunk_point_id(f"scifact:{doc['_id']}", c.index) for doc, p in parsed for c in p.chunks]
    from bench.common import model_tag

    salt = chunker.fingerprint + (f"\nbackend={backend}" if backend else "") + model_tag()
    # int8 vectors depend a little on their run-mates, so the runs' limits are part of the key.
    salt += f"\nbatch={settings.embedding.local_batch_size},{settings.embedding.local_batch_tokens}"
    key = hashlib.sha256((salt + "\n" + "\n".join(embed_texts)).encode()).hexdigest()[:16]
    dense, origin = _dense_vectors(ids, embed_texts, key, embedder, backend)

    encoder = Bm25Encoder()  # per document: a chunk's neighbours are part of its keyword vector
    sparse = [v for _, p in parsed for v in encoder.encode_chunks([c.embed_text for c in p.chunks])]
    points, records = [], []
    row = 0
    for doc, p in parsed:
        uri = f"scifact:{doc['_id']}"
        for c in p.chunks:
            text_hash = hashlib.sha256(c.embed_text.encode()).hexdigest()
            points.append(
                ChunkPoint(
                    uri=uri,
                    source_identifier="bench/scifact",
                    chunk_index=c.index,
                    total_chunks=len(p.chunks),
                    text=c.text,
                    text_hash=text_hash,
                    title=p.title,
                    tags=p.tags,
                    headings=c.headings,
                    dense=dense[row].tolist(),
                    sparse=sparse[row],
                )
            )
            row += 1
        records.append(
            DocumentRecord(
                uri=uri,
                source_identifier="bench/scifact",
                checksum="sha256:" + hashlib.sha256(scifact_markdown(doc).encode()).hexdigest(),
                chunks=len(p.chunks),
                metadata={"docId": str(doc["_id"]), "sourceIdentifier": "bench/scifact"},
                title=p.title,
                ingested_at="2026-01-01T00:00:00.000Z",
                chunker=chunker.fingerprint,
            )
        )
    real = len(points)
    extra = augment(points, target - real, seed) if target > real else []
    # Every chunk needs a record: the service's start-up repair deletes chunks without one.
    records += [
        DocumentRecord(
            uri=p.uri,
            source_identifier=p.source_identifier,
            checksum="sha256:augmented",
            chunks=1,
            metadata={"sourceIdentifier": "bench/augmented"},
            title=p.title,
            ingested_at="2026-01-01T00:00:00.000Z",
            chunker=chunker.fingerprint,
        )
        for p in extra
    ]
    return ChunkSet(points=points + extra, records=records, origin=origin, real=real, augmented=len(extra))


def augment(points: list, count: int, seed: int) -> list:
    """`count` extra chunks: copies of random real chunks under new URIs, each dense vector moved
    by Gaussian noise of norm 0.5 and renormalised (cosine ~0.9 to its original), same text and
    sparse vector. They make the collection the requested size without hours of embedding."""
    from kbsearch.models import ChunkPoint

    rng = np.random.default_rng(seed)
    out = []
    for j in range(count):
        src = points[int(rng.integers(len(points)))]
        v = np.asarray(src.dense, dtype=np.float32)
        noise = rng.standard_normal(v.shape[0]).astype(np.float32)
        v = v + 0.5 * noise / np.linalg.norm(noise)
        v /= np.linalg.norm(v)
        out.append(
            ChunkPoint(
                uri=f"scifact-aug:{j}",
                source_identifier="bench/augmented",
                chunk_index=0,
                total_chunks=1,
                text=src.text,
                text_hash=src.text_hash,
                title=src.title,
                tags=src.tags,
                headings=src.headings,
                dense=v.tolist(),
                sparse=src.sparse,
            )
        )
    return out


def _dense_vectors(ids: list[str], texts: list[str], key: str, embedder, backend: str | None) -> tuple[np.ndarray, str]:
    cache = CACHE_DIR / f"scifact-vectors-{key}.npy"
    if cache.is_file():
        vectors = np.load(cache)
        if vectors.shape[0] == len(ids):
            meta = json.loads(cache.with_suffix(".json").read_text()) if cache.with_suffix(".json").is_file() else {}
            return vectors, f"cached .npy ({meta.get('origin', 'unknown origin')})"
    vectors, origin = _from_retrieval_store(ids, backend)
    if vectors is None:
        if embedder is None:
            from bench.common import local_embedder

            embedder = local_embedder()
        print(
            f"  embedding {len(texts)} SciFact chunks with LocalEmbedder (one-off, cached afterwards) ...", flush=True
        )
        started = time.perf_counter()
        vectors = np.asarray(embedder.embed_documents(texts), dtype=np.float32)
        origin = f"LocalEmbedder.embed_documents on {len(texts)} chunk texts in {time.perf_counter() - started:.0f} s"
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    np.save(cache, vectors)
    cache.with_suffix(".json").write_text(json.dumps({"origin": origin, "chunks": len(ids)}) + "\n")
    return vectors, origin


def _from_retrieval_store(ids: list[str], backend: str | None) -> tuple[np.ndarray | None, str]:

    from bench.common import dir_in_use, exclusive_dir

    path = Path(data_dir())
    if not (path / COLLECTION).is_dir():
        return None, ""
    holder = dir_in_use(path)
    if holder:  # never open a shard another process holds: a refused open still damages it
        print(f"  the retrieval collection is in use by process {holder}; embedding instead")
        return None, ""
    with exclusive_dir(path):
        return _read_store(path, COLLECTION, ids, backend)


def _read_store(path: Path, collection: str, ids: list[str], backend: str | None) -> tuple[np.ndarray | None, str]:
    from kbsearch.store.edge.store import EdgeStore

    store = EdgeStore(path, collection)
    try:
        store.open(signature(backend))
    except Exception as exc:  # noqa: BLE001 - busy or incompatible: compute instead
        print(f"  cannot read the retrieval collection ({exc}); embedding instead")
        return None, ""
    try:
        found: dict[str, list[float]] = {}
        for start in range(0, len(ids), 1000):
            found.update(store.get_dense_vectors(ids[start : start + 1000]))
    finally:
        store.close()
    if len(found) != len(ids):
        print(f"  the retrieval collection holds {len(found)} of {len(ids)} chunk vectors; embedding instead")
        return None, ""
    return (
        np.asarray([found[i] for i in ids], dtype=np.float32),
        "read back from the retrieval benchmark's collection (vectors the service computed at ingest)",
    )
