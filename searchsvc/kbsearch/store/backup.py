"""Export and import the points of the service's collections on a Qdrant server or cluster.

A collection snapshot on a cluster holds only the shards of the node that took it; this reads
every point through the (load-balanced) address instead: a scroll of vectors and payloads, one
JSON line per point, written as it is read (memory bounded by one page of PAGE points), and an
import that upserts the lines back in pages, each write waited for and leader-ordered.

    SEARCHSVC_QDRANT_URL=... [SEARCHSVC_QDRANT_API_KEY=...] \\
        python -m kbsearch.store.backup export|import COLLECTION FILE

The key comes from the environment only (never the command line). Import into a collection
the service has created (start it once on the empty cluster): docs/operations/backup.md.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Iterable
from typing import IO, Any

from qdrant_client import QdrantClient
from qdrant_client import models as qm

from kbsearch.store.qdrant_common import ORDERING, UPSERT_BATCH

__all__ = ["export_points", "import_points", "main"]

PAGE = UPSERT_BATCH


def _vectors_out(vector: Any) -> dict[str, Any]:
    if not isinstance(vector, dict):
        return {}
    return {k: v.model_dump() if isinstance(v, qm.SparseVector) else v for k, v in vector.items()}


def _vectors_in(vector: dict[str, Any]) -> dict[str, Any]:
    return {k: qm.SparseVector(**v) if isinstance(v, dict) else v for k, v in vector.items()}


def export_points(client: QdrantClient, collection: str, out: IO[str]) -> int:
    """Every point of `collection` as JSON lines on `out`; the number written."""
    offset: Any = None
    written = 0
    while True:
        page, offset = client.scroll(collection, limit=PAGE, offset=offset, with_payload=True, with_vectors=True)
        for point in page:
            line = {"id": point.id, "vector": _vectors_out(point.vector), "payload": point.payload or {}}
            out.write(json.dumps(line, separators=(",", ":")) + "\n")
        written += len(page)
        if offset is None:
            return written


def import_points(client: QdrantClient, collection: str, lines: Iterable[str]) -> int:
    """Upsert the exported points into `collection`, PAGE at a time; the number written."""
    batch: list[qm.PointStruct] = []
    written = 0
    for line in lines:
        if not line.strip():
            continue
        point = json.loads(line)
        batch.append(qm.PointStruct(id=point["id"], vector=_vectors_in(point["vector"]), payload=point["payload"]))
        if len(batch) == PAGE:
            client.upsert(collection, batch, wait=True, ordering=ORDERING)
            written, batch = written + len(batch), []
    if batch:
        client.upsert(collection, batch, wait=True, ordering=ORDERING)
        written += len(batch)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kbsearch.store.backup", description=__doc__)
    parser.add_argument("action", choices=["export", "import"])
    parser.add_argument("collection")
    parser.add_argument("file")
    args = parser.parse_args(argv)
    url = os.environ.get("SEARCHSVC_QDRANT_URL")
    if not url:
        parser.error("SEARCHSVC_QDRANT_URL is not set")
    client = QdrantClient(url=url, api_key=os.environ.get("SEARCHSVC_QDRANT_API_KEY"), check_compatibility=False)
    try:
        if args.action == "export":
            with open(args.file, "w", encoding="utf-8") as out:
                count = export_points(client, args.collection, out)
        else:
            with open(args.file, encoding="utf-8") as lines:
                count = import_points(client, args.collection, lines)
    finally:
        client.close()
    sys.stdout.write(f"{args.action}ed {count} points of {args.collection}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
