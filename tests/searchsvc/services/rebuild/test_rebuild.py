"""Background rebuilds: upgrade from the previous release's data, writes during a build, kill -9, self-check.

The service is started on a collection built otherwise (another embedder, chunker, or the data
directory the previous release wrote: tests/fixtures/upgrade) and must keep answering searches
while it builds the new collection, then swap it in complete.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import pytest
from qdrant_client import QdrantClient

from kbsearch.chunker import MarkdownChunker
from kbsearch.deps import context_of
from kbsearch.store.base import VectorStore
from kbsearch.store.bm25 import Bm25Encoder
from kbsearch.store.qdrant_server import QdrantServerStore
from tests.fixtures.upgrade.make_fixture import HERE as FIXTURE_DIR
from tests.fixtures.upgrade.make_fixture import unpack
from tests.support.formatfiles import code_cell, docx_file, markdown_cell, notebook, pdf_pages
from tests.support.hashing import HashingEmbedder
from tests.support.randomembed import MODEL as RANDOM_MODEL
from tests.support.randomembed import RandomEmbeddings
from tests.support.rebuilds import rebuild_status, search_uris, wait_for
from tests.support.service import STORE_KINDS, configured_service, make_store, running_service, scraped, settings_of
from tests.support.service_process import ServiceProcess

NEW_MODEL = "hashing-v2"
TOPICS = [
    "kafka consumer lag",
    "rabbitmq queue length",
    "prometheus metrics scraping",
    "helm chart installation",
    "cron schedules",
    "cpu utilisation",
    "memory pressure",
    "azure service bus",
    "aws sqs queues",
    "redis streams",
    "postgresql query",
    "http request rate",
    "nats jetstream",
    "gcp pubsub",
    "datadog monitors",
    "elasticsearch query",
    "mongodb collections",
    "mysql replicas",
    "influxdb buckets",
    "loki log lines",
    "solace brokers",
    "pulsar topics",
    "ibm mq depth",
    "etcd watch",
    "graphite series",
    "huawei cloudeye",
    "openstack swift",
    "selenium grid",
    "splunk searches",
    "temporal workflows",
]


def page(i: int, topic: str, edit: str = "") -> str:
    words = topic.split()
    return (
        f"---\ntitle: Scaling on {topic}\n---\n# Scaling on {topic}\n\n"
        f"This scaler reads {topic} and scales the workload on it. {edit}\n\n"
        f"## Configuring the {words[0]} trigger\n\n"
        f"Set the `{words[0]}Threshold` field of the trigger; the operator polls {topic} every thirty seconds.\n\n"
        "```yaml\ntriggers:\n"
        f"  - type: {words[0]}\n    metadata:\n      threshold: '{i}'\n```\n\n"
        f"## Authentication for {words[-1]}\n\n"
        f"Give the scaler credentials for {words[0]} {words[-1]} through a TriggerAuthentication.\n"
    )


def uri_of(i: int) -> str:
    return f"git://scalers/docs/scaler-{i:02d}.md"


async def put(client: httpx.AsyncClient, uri: str, content: str, source: str = "scalers") -> None:
    body = {"uri": uri, "content": content, "metadata": {"sourceIdentifier": source}}
    response = await client.put("/api/v1/documents", json=body)
    assert response.status_code == 200, response.text


class SharedQdrant:
    """qdrant-local keeps its data in the client: stores over one client see one server."""

    def __init__(self) -> None:
        self.client = QdrantClient(":memory:")

    def store(self) -> VectorStore:
        store = QdrantServerStore(self.client, "test")
        store.close = lambda: None  # type: ignore[method-assign]  # the next app opens the same data
        return store


@asynccontextmanager
async def service_on(
    store_kind: str, data_dir: Path, shared: SharedQdrant | None, **options: object
) -> AsyncIterator[httpx.AsyncClient]:
    store = shared.store() if shared is not None else make_store(store_kind, data_dir)
    async with running_service(store_kind, data_dir, store=store, **options) as client:  # type: ignore[arg-type]
        yield client


@pytest.fixture(params=STORE_KINDS)
def backend(request: pytest.FixtureRequest) -> Iterator[tuple[str, SharedQdrant | None]]:
    shared = SharedQdrant() if request.param == "qdrant-local" else None
    yield request.param, shared
    if shared is not None:
        shared.client.close()


# --- upgrade from the previous release's data directory ------------------------------------------


async def test_an_upgrade_from_the_previous_release_serves_searches_throughout_and_swaps(tmp_path: Path):
    data_dir = tmp_path / "data"
    manifest = unpack(data_dir)
    old_chunker = manifest["chunker"]["fingerprint"]  # type: ignore[index]
    # The new release chunks otherwise (here: other sizes; on top, whatever its chunker version changed).
    options = {"collection": "knowledge", "rebuild_pause_ms": 150, "chunk_min_chars": 300, "chunk_max_chars": 600}
    new_chunker = MarkdownChunker(300, 600, 0).fingerprint
    assert old_chunker != new_chunker
    documents = {d["uri"]: d for d in manifest["documents"]}  # type: ignore[attr-defined]
    async with running_service("edge", data_dir, store=make_store("edge", data_dir, "knowledge"), **options) as client:
        status = await rebuild_status(client)
        # Its keyword vectors came from the previous encoder: the signature names it, so it rebuilds.
        assert status["reason"] is not None and f"sparse={manifest['sparse']['encoder']}" in status["reason"]  # type: ignore[index]
        assert f"sparse={Bm25Encoder.name}" in status["reason"]
        done = await wait_for(client, {"idle"}, searching="kafka lag")
        assert "building" in done["seen"], "no search ran while the rebuild was building"
        assert done["message"] == "swapped in" and done["check"]["passed"] is True
        assert done["documents"]["done"] == done["documents"]["total"] == len(documents)

        store: VectorStore = context_of(client.app).store  # type: ignore[attr-defined]
        assert store.collection_chunker() == new_chunker
        assert (signature := store.stored_signature()) is not None and signature.sparse_encoder == Bm25Encoder.name
        records, _ = store.list_documents(source_identifier=None, uri_prefix=None, limit=100, cursor=None)
        assert {r.uri for r in records} == set(documents)
        assert {r.chunker for r in records} == {new_chunker}
        assert {r.source_identifier for r in records} == {"widgets-docs", "widgets-blog"}
        sources = (await client.get("/api/v1/sources")).json()["sources"]
        assert {s["sourceIdentifier"]: s["documents"] for s in sources} == {"widgets-docs": 4, "widgets-blog": 2}
        assert "git://widgets/docs/blog/kafka" in (await search_uris(client, "kafka consumer lag partitions"))[:2]
        # The previous release kept no bodies: the text is rebuilt from its chunks, title included.
        text = await client.get("/api/v1/documents/text", params={"uri": "git://widgets/docs/guides/install"})
        assert text.status_code == 200 and text.json()["title"] == "Installing the widget operator"
        assert "helm install widget-operator" in text.json()["text"]
        metrics = scraped(client)
        assert 'searchsvc_rebuild_swaps_total{outcome="swapped"} 1.0' in metrics
        assert "searchsvc_rebuild_running 0.0" in metrics

    # The pointer names the rebuilt generation; the previous release's shard is gone (at the latest
    # when the next start removes what the pointer does not name).
    assert (data_dir / ".knowledge.current").read_text().strip() == "knowledge@1"
    assert not (data_dir / "knowledge.rebuild").exists()
    async with running_service("edge", data_dir, store=make_store("edge", data_dir, "knowledge"), **options) as client:
        assert not (data_dir / "knowledge").exists()
        status = await rebuild_status(client)
        assert status["state"] == "idle" and status["reason"] is None  # nothing left to rebuild
        assert (await client.get("/api/v1/status")).json()["store"]["documents"] == len(documents)


# --- writes and deletes during a rebuild --------------------------------------------------------


async def test_a_write_and_a_delete_during_a_rebuild_land_in_the_new_collection(
    backend: tuple[str, SharedQdrant | None], tmp_path: Path
):
    store_kind, shared = backend
    data_dir = tmp_path / "data"
    async with service_on(store_kind, data_dir, shared) as client:
        for i, topic in enumerate(TOPICS[:20]):
            await put(client, uri_of(i), page(i, topic))
    new_embedder = HashingEmbedder(48, NEW_MODEL)
    async with service_on(store_kind, data_dir, shared, embedder=new_embedder, rebuild_pause_ms=100) as client:
        status = await rebuild_status(client)
        assert status["state"] == "building" and "hashing-v1" in status["reason"]
        await put(client, "git://scalers/docs/new.md", page(99, "zookeeper ensembles"))
        await put(client, uri_of(3), page(3, TOPICS[3], edit="Edited during the rebuild."))
        deleted = await client.delete("/api/v1/documents", params={"uri": uri_of(7)})
        assert deleted.status_code == 200 and deleted.json()["chunksDeleted"] > 0
        assert (await rebuild_status(client))["state"] == "building"  # all three landed mid-build
        done = await wait_for(client, {"idle"}, searching="kafka consumer lag")
        assert done["message"] == "swapped in"

        assert (await client.get("/api/v1/status")).json()["embedder"]["model"] == NEW_MODEL
        assert (await client.get("/api/v1/status")).json()["store"]["documents"] == 20
        text = await client.get("/api/v1/documents/text", params={"uri": uri_of(3)})
        assert "Edited during the rebuild." in text.json()["text"]
        text = await client.get("/api/v1/documents/text", params={"uri": "git://scalers/docs/new.md"})
        assert text.status_code == 200 and "zookeeper ensembles" in text.json()["text"]
        missing = await client.get("/api/v1/documents/text", params={"uri": uri_of(7)})
        assert missing.status_code == 404
        assert "git://scalers/docs/new.md" in (await search_uris(client, "zookeeper ensembles", "dense"))[:1]
        assert uri_of(7) not in await search_uris(client, TOPICS[7], "keyword")


async def test_a_requested_reindex_rebuilds_with_the_same_settings_and_keeps_everything(
    backend: tuple[str, SharedQdrant | None], tmp_path: Path
):
    store_kind, shared = backend
    async with service_on(store_kind, tmp_path / "data", shared) as client:
        for i, topic in enumerate(TOPICS[:6]):
            await put(client, uri_of(i), page(i, topic))
        assert (await rebuild_status(client))["state"] == "idle"
        for round_ in range(2):  # on a Qdrant server: first the name becomes an alias, then the alias moves
            response = await client.post("/api/v1/reindex", json={})
            assert response.status_code == 202, response.text
            assert response.json()["state"] == "building"
            done = await wait_for(client, {"idle"}, searching="helm chart installation")
            assert done["message"] == "swapped in", round_
            # The same collection rebuilt scores the same, query by query.
            check = done["check"]
            assert check["current"] == check["rebuilt"] and check["worseModes"] == [], check
            assert all(wins_losses == [0, 0] for wins_losses in check["winsLosses"].values()), check
            assert (await client.get("/api/v1/status")).json()["store"]["documents"] == 6
        refused = await client.post("/api/v1/reindex", json={"forceSwap": True})
        assert refused.status_code == 409 and refused.json()["error"]["code"] == "NOTHING_TO_SWAP"
        assert uri_of(5) in (await search_uris(client, "scaling on cpu utilisation"))[:1]


async def test_a_reindex_while_one_runs_is_a_409_not_a_202_that_starts_nothing(tmp_path: Path):
    # Half a second after each of six documents: the second request surely meets the first rebuild.
    async with running_service("edge", tmp_path / "data", rebuild_pause_ms=500) as client:
        for i, topic in enumerate(TOPICS[:6]):
            await put(client, uri_of(i), page(i, topic))
        started = await client.post("/api/v1/reindex", json={})
        assert started.status_code == 202 and started.json()["state"] == "building"
        again = await client.post("/api/v1/reindex")
        assert again.status_code == 409, again.text
        error = again.json()["error"]
        assert error["code"] == "REBUILD_RUNNING" and error["details"]["state"] == "building"
        assert (await wait_for(client, {"idle"}))["message"] == "swapped in"


# --- a rebuild converts what the serving path converts ----------------------------------------------


def _handbook(document) -> None:  # type: ignore[no-untyped-def]
    document.add_heading("Operator handbook", level=1)
    document.add_paragraph("Rotate the repository credentials every ninety days with the vault plugin.")


FORMATS: dict[str, tuple[bytes, str]] = {  # name: (bytes, a phrase only that document holds)
    "manual.pdf": (
        pdf_pages("Uninstalling the controller deletes the namespace and its finalizers. " * 6),
        "finalizers",
    ),
    "handbook.docx": (docx_file(_handbook), "vault plugin"),
    "report.ipynb": (
        notebook(
            [markdown_cell("# Drift report\n\nThe sharded reconciler halves the sync latency."), code_cell("x = 1")]
        ),
        "sharded reconciler",
    ),
    "guide.rst": (b"Guide\n=====\n\nThe kustomize overlays render before pruning.\n", "kustomize overlays"),
    "guide.adoc": (b"= Adoc guide\n\nThe webhook secret rotates with the dex connector.\n", "dex connector"),
    "guide.html": (
        b"<html><body><main><h1>Html guide</h1><p>Sync windows deny manual syncs.</p></main></body></html>",
        "sync windows",
    ),
    "guide.mdx": (
        b"import X from 'x';\n\n# Mdx guide\n\n<Note>Application sets generate applications.</Note>\n",
        "application sets",
    ),
    "guide.md": (b"# Markdown guide\n\nThe redis cache keeps the manifests warm.\n", "redis cache"),
}


async def test_a_collection_holding_every_format_is_rebuilt_and_each_document_converted_again(tmp_path: Path):
    data_dir = tmp_path / "data"
    async with running_service("edge", data_dir) as client:
        for name, (data, _) in FORMATS.items():
            body = {
                "uri": f"docs/{name}",
                "content": base64.b64encode(data).decode(),
                "contentEncoding": "base64",
                "metadata": {"sourceIdentifier": "formats"},
            }
            response = await client.put("/api/v1/documents", json=body)
            assert response.status_code == 200, (name, response.text)
    # Another embedder model: every document is converted and embedded again, in the shadow.
    async with running_service("edge", data_dir, embedder=HashingEmbedder(64, NEW_MODEL)) as client:
        done = await wait_for(client, {"idle"})
        assert done["message"] == "swapped in", done
        assert done["documents"]["done"] == done["documents"]["copied"] == len(FORMATS)
        assert (await client.get("/api/v1/status")).json()["embedder"]["model"] == NEW_MODEL
        for name, (_, phrase) in FORMATS.items():
            assert (await search_uris(client, phrase, "keyword"))[:1] == [f"docs/{name}"], name
        best = (await client.post("/api/v1/search", json={"query": "finalizers namespace", "mode": "keyword"})).json()
        assert best["results"][0]["page"] == 1  # the PDF's page, from its conversion, not from the old chunks


# --- the self-check refuses a worse collection ----------------------------------------------------


async def test_a_worse_rebuild_is_refused_by_the_self_check_until_a_writer_forces_it(
    backend: tuple[str, SharedQdrant | None], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")  # the model's endpoint is local
    store_kind, shared = backend
    data_dir = tmp_path / "data"
    async with service_on(store_kind, data_dir, shared) as client:
        for i, topic in enumerate(TOPICS):
            await put(client, uri_of(i), page(i, topic))
        for _ in range(3):  # a frequent query in the log joins the check
            assert await search_uris(client, "scaling on redis streams")
        await context_of(client.app).query_log.flush()  # type: ignore[attr-defined]
    # A broken embedder setting: the real OpenAI embedder, pointed at a model that knows nothing.
    with RandomEmbeddings() as endpoint:
        store = shared.store() if shared is not None else make_store(store_kind, data_dir)
        async with configured_service(data_dir, store, **settings_of(endpoint.settings())) as client:
            refused = await wait_for(client, {"refused", "idle"})
            check = refused["check"]
            assert check["passed"] is False and "dense" in check["worseModes"], check
            # One title and one heading per page (the H1 is the title), and the logged query.
            assert check["byOrigin"] == {"title": len(TOPICS), "heading": len(TOPICS), "logged": 1}, check
            assert check["upperBound"]["dense"] < 0
            assert check["rebuilt"]["dense"] < check["current"]["dense"] - check["margin"]
            assert "keyword" not in check["worseModes"]  # keyword search needs no embedder
            assert "forceSwap" in refused["message"]
            # Asking again starts nothing: a 409 that names the way out.
            again = await client.post("/api/v1/reindex", json={})
            assert again.status_code == 409, again.text
            error = again.json()["error"]
            assert error["code"] == "REBUILD_REFUSED_PENDING" and "forceSwap" in error["message"]
            assert error["details"]["resolve"] == "forceSwap" and error["details"]["check"]["passed"] is False
            console = await client.get("/ui/sources")
            assert console.status_code == 200 and "Index rebuild: refused" in console.text
            assert "How to resolve" in console.text and "forceSwap" in console.text
            # The current collection still serves, with the embedder that built it.
            status = (await client.get("/api/v1/status")).json()
            assert status["embedder"]["model"] == "hashing-v1"
            assert (await search_uris(client, f"Scaling on {TOPICS[9]}", "dense"))[0] == uri_of(9)

            forced = await client.post("/api/v1/reindex", json={"forceSwap": True})
            assert forced.status_code == 202, forced.text
            done = await wait_for(client, {"idle"})
            assert "forced" in done["message"]
            assert (await client.get("/api/v1/status")).json()["embedder"]["model"] == RANDOM_MODEL


# --- kill -9 during a rebuild ----------------------------------------------------------------------


def test_a_rebuild_killed_with_sigkill_resumes_where_it_was(tmp_path: Path):
    data_dir = tmp_path / "data"
    first = ServiceProcess(tmp_path / "first.log", {"SEARCHSVC_DATA_DIR": str(data_dir)}).start()
    try:
        first.wait_ready()
        for i in range(60):
            topic = TOPICS[i % len(TOPICS)]
            body = {"uri": uri_of(i), "content": page(i, topic, edit=f"Copy {i}."), "metadata": {}}
            assert first.client.put("/api/v1/documents", json=body).status_code == 200
    finally:
        first.stop()

    # This test is about resuming; the self-check (tested above) is told to accept any shadow, since
    # eight title queries under two hashing models can differ by one query either way.
    changed = {
        "SEARCHSVC_DATA_DIR": str(data_dir),
        "KB_TEST_HASHING_MODEL": NEW_MODEL,
        "SEARCHSVC_REBUILD_CHECK_MARGIN": "1",
    }
    slow = ServiceProcess(tmp_path / "slow.log", {**changed, "SEARCHSVC_REBUILD_PAUSE_MS": "150"}).start()
    try:
        slow.wait_ready()
        for _ in range(600):
            rebuild = slow.client.get("/api/v1/status").json()["rebuild"]
            assert rebuild["state"] == "building", rebuild
            search = slow.client.post("/api/v1/search", json={"query": "kafka consumer lag", "limit": 5})
            assert search.status_code == 200 and search.json()["results"]
            if rebuild["documents"]["done"] >= 15:
                break
            time.sleep(0.1)
        else:
            raise AssertionError("the rebuild made no progress")
        assert rebuild["etaSeconds"] is not None and rebuild["ratePerSecond"] > 0
    finally:
        slow.kill()  # SIGKILL, mid-build
    copied_before = rebuild["documents"]["done"]

    resumed = ServiceProcess(tmp_path / "resumed.log", changed).start()
    try:
        resumed.wait_ready()
        for _ in range(3000):
            status = resumed.client.get("/api/v1/status").json()
            if status["rebuild"]["state"] == "idle" and status["rebuild"]["finishedAt"]:
                break
            assert status["rebuild"]["state"] not in ("failed", "refused"), status["rebuild"]
            time.sleep(0.1)
        else:
            raise AssertionError(f"the resumed rebuild did not finish: {status['rebuild']}")
        rebuild = status["rebuild"]
        assert rebuild["message"] == "swapped in"
        assert rebuild["documents"]["done"] == rebuild["documents"]["total"] == 60
        # What the killed run had copied was not copied again.
        assert rebuild["documents"]["copied"] <= 60 - copied_before + 1
        assert status["embedder"]["model"] == NEW_MODEL and status["store"]["documents"] == 60
        log_lines = [json.dumps(e) for e in resumed.log_entries()]
        assert any("rebuild started" in line for line in log_lines)
        search = resumed.client.post("/api/v1/search", json={"query": "temporal workflows", "limit": 3})
        assert search.json()["results"][0]["title"] == "Scaling on temporal workflows"
    finally:
        resumed.stop()
    assert (data_dir / ".knowledge.current").exists() and not (data_dir / "knowledge.rebuild").exists()


def test_the_fixture_is_the_previous_releases_data():
    """The archive is written once, by make_fixture.py with that release's code; its manifest says what wrote it."""
    manifest = json.loads((FIXTURE_DIR / "manifest.json").read_text())
    assert manifest["store"]["backend"] == "edge" and manifest["store"]["documents"] == 6
    assert {d["sourceIdentifier"] for d in manifest["documents"]} == {"widgets-docs", "widgets-blog"}
