"""The tools the images ship besides their servers, run from the images as an operator would.

The operator image's own `--help` (it must not start kopf), and the search image's backup tool
(`python -m kbsearch.store.backup`, docs/operations/backup.md) exporting a collection from a real
Qdrant server and importing it into another, under the chart's securityContext.
"""

from __future__ import annotations

import os
import subprocess
import uuid
from pathlib import Path

import pytest
from qdrant_client import QdrantClient
from qdrant_client import models as qm

from tests.images.support import OPERATOR_IMAGE, SEARCH_IMAGE, podman, require_images, run_flags
from tests.support.qdrant import QdrantNode, wipe

pytestmark = pytest.mark.slow


def test_the_operator_image_prints_a_real_help_without_starting_kopf() -> None:
    require_images()
    done = podman("run", "--rm", *run_flags(), OPERATOR_IMAGE, "--help", check=False, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "usage: python -m kboperator" in done.stdout
    assert "KBOPERATOR_SEARCH_URL" in done.stdout
    assert "kopf" not in done.stderr.lower()  # kopf never started: no log lines from it


def _collection(client: QdrantClient, name: str) -> None:
    client.create_collection(
        name,
        vectors_config={"dense": qm.VectorParams(size=4, distance=qm.Distance.COSINE)},
        sparse_vectors_config={"bm25": qm.SparseVectorParams(modifier=qm.Modifier.IDF)},
    )


def _points(client: QdrantClient, name: str) -> dict[str, tuple[object, dict[str, object]]]:
    page, _ = client.scroll(name, limit=100, with_payload=True, with_vectors=True)
    return {str(p.id): (p.vector, p.payload or {}) for p in page}


def _backup(action: str, url: str, folder: Path, collection: str) -> str:
    done = podman(
        "run", "--rm", *run_flags(),
        "--network=host",  # the test's Qdrant listens on the host's loopback
        f"--volume={folder}:/backup",
        "--env=SEARCHSVC_QDRANT_URL",
        "--entrypoint=python", SEARCH_IMAGE,
        "-m", "kbsearch.store.backup", action, collection, "/backup/points.jsonl",
        timeout=180, check=False, env_extra={"SEARCHSVC_QDRANT_URL": url},
    )  # fmt: skip
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"
    return done.stdout


def test_the_search_images_backup_tool_exports_and_imports_a_collection(
    qdrant_server: QdrantNode, tmp_path: Path
) -> None:
    require_images()
    client = QdrantClient(url=qdrant_server.url, check_compatibility=False)
    try:
        _collection(client, "kb-chunks")
        client.upsert(
            "kb-chunks",
            [
                qm.PointStruct(
                    id=str(uuid.uuid5(uuid.NAMESPACE_URL, f"kb-test-{n}")),  # the service's ids are UUIDs
                    vector={
                        "dense": [1.0, float(n), 0.5, 0.0],
                        "bm25": qm.SparseVector(indices=[n, 7], values=[1.0, 2.0]),
                    },
                    payload={"uri": f"https://docs.example.test/{n}.md", "sourceIdentifier": "team/docs"},
                )
                for n in range(1, 6)
            ],
            wait=True,
        )
        folder = tmp_path / "backup"
        folder.mkdir()
        # The container runs as 10001 with no capabilities: the folder must be its own to write in.
        chown = ["chown", "10001:10001", str(folder)]
        subprocess.run(chown if os.geteuid() == 0 else ["podman", "unshare", *chown], check=True)

        assert _backup("export", qdrant_server.url, folder, "kb-chunks").strip() == "exported 5 points of kb-chunks"
        assert len((folder / "points.jsonl").read_text().splitlines()) == 5
        _collection(client, "kb-restored")
        assert _backup("import", qdrant_server.url, folder, "kb-restored").strip() == "imported 5 points of kb-restored"

        original, restored = _points(client, "kb-chunks"), _points(client, "kb-restored")
        assert len(restored) == 5
        assert restored == original
    finally:
        wipe(client)
        client.close()
