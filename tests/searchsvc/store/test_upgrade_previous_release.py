"""Upgrade from a data directory the previous release wrote for real, with versioned documentation.

The previous release (`de201e8`: markdown-v1 chunker, no stored bodies, no versions) runs from the
repository's history (tests/support/previous_release.py) with its own test launcher and hashing
embedder. It ingests three versions of a docs tree (Hugo layout, older versions slightly edited)
and a second source, answers a few searches (the query log), and stops. Today's service then
starts on a copy of that directory: the chunker changed, so it rebuilds in the background while
it serves, and the rebuild must end swapped in by itself. Started instead with a broken embedder
setting (the real OpenAI embedder, pointed at a model that returns random vectors), the rebuild
must be refused, and say how to resolve it.
"""

from __future__ import annotations

import logging
import random
import shutil
from pathlib import Path

import pytest

from kbsearch.chunker import MarkdownChunker
from kbsearch.deps import context_of
from kbsearch.store.base import VectorStore
from kbsearch.store.bm25 import Bm25Encoder
from tests.fixtures.upgrade.make_fixture import HERE as FIXTURE_DIR
from tests.support.previous_release import extract
from tests.support.randomembed import RandomEmbeddings
from tests.support.rebuilds import rebuild_status, search_uris, wait_for
from tests.support.service import configured_service, make_store, running_service, settings_of
from tests.support.service_process import ServiceProcess

pytestmark = pytest.mark.slow  # two releases' services end to end, and three rebuilds

VERSIONS = ("2.9", "2.10", "2.12")  # 2.12 the newest
COLLECTION = "knowledge"
SCALERS = [
    ("kafka", "consumer group lag on a topic"),
    ("rabbitmq", "queue length of a virtual host"),
    ("prometheus", "query result of a PromQL expression"),
    ("cron", "start and end of a schedule"),
    ("cpu", "utilisation of the pod's containers"),
    ("memory", "working set of the pod's containers"),
    ("redis", "length of a list or a stream"),
    ("postgresql", "result of a SQL query"),
    ("nats", "pending messages of a JetStream consumer"),
    ("pubsub", "undelivered messages of a subscription"),
    ("datadog", "value of a monitor's metric"),
    ("elasticsearch", "hits of a search template"),
    ("mongodb", "documents matched by a query"),
    ("mysql", "result of a query on a replica"),
    ("influxdb", "value of a Flux query"),
    ("loki", "count of log lines matched"),
    ("pulsar", "backlog of a subscription"),
    ("etcd", "value of a watched key"),
    ("graphite", "value of a series"),
    ("temporal", "queued workflow tasks"),
]
QUERIES = ("kafka consumer group lag", "scale on cron schedule", "redis stream length", "kafka consumer group lag")


def scaler_page(name: str, reads: str) -> str:
    return (
        f"---\ntitle: {name.capitalize()} scaler\n---\n# {name.capitalize()} scaler\n\n"
        f"The {name} scaler reads the {reads} and scales the workload to match it. "
        f"It polls {name} every thirty seconds and keeps the replica count between the bounds you set.\n\n"
        f"## Trigger specification for {name}\n\n"
        f"Set `{name}Threshold` on the trigger: the target value of the {reads} per replica. "
        "The activation threshold decides when the workload scales from zero.\n\n"
        f"```yaml\ntriggers:\n  - type: {name}\n    metadata:\n      {name}Threshold: '10'\n```\n\n"
        f"## Authenticating to {name}\n\n"
        f"Give the scaler its {name} credentials through a TriggerAuthentication that names a secret. "
        "Pod identity works where the platform offers it.\n"
    )


def older(text: str, rng: random.Random) -> str:
    """An older version of a page: one sentence fewer, as docs usually differ between versions."""
    sentences = [s for s in text.split(". ") if len(s) > 40]
    return text.replace(rng.choice(sentences) + ". ", "", 1) if sentences else text


def documents() -> list[dict[str, object]]:
    rng = random.Random(30)
    made: list[dict[str, object]] = []
    for name, reads in SCALERS:
        text = scaler_page(name, reads)
        for version in reversed(VERSIONS):
            path = f"content/docs/{version}/scalers/{name}.md"
            metadata = {"sourceIdentifier": "scalers-docs", "path": path}
            made.append({"uri": f"git://scalers/{path}", "content": text, "metadata": metadata})
            text = older(text, rng)
    for path in sorted((FIXTURE_DIR / "documents").glob("*.md")):  # a second source, unversioned
        metadata = {"sourceIdentifier": "widgets", "path": f"docs/{path.name}"}
        made.append({"uri": f"git://widgets/docs/{path.name}", "content": path.read_text(), "metadata": metadata})
    return made


DOCUMENTS = documents()


@pytest.fixture(scope="module")
def previous_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The data directory as the previous release leaves it (written once per module, copied per test)."""
    root = tmp_path_factory.mktemp("previous-release")
    release = extract(root / "release")
    data = root / "data"
    old = ServiceProcess(root / "previous.log", {"SEARCHSVC_DATA_DIR": str(data)}, repo=release).start()
    try:
        old.wait_ready()
        for document in DOCUMENTS:
            response = old.client.put("/api/v1/documents", json=document)
            assert response.status_code == 200, response.text
        for query in QUERIES:
            assert old.client.post("/api/v1/search", json={"query": query, "limit": 5}).status_code == 200
        status = old.client.get("/api/v1/status").json()
    finally:
        assert old.stop(), "the previous release did not shut down cleanly"
    assert status["chunker"]["fingerprint"].startswith("markdown-v1;"), status["chunker"]
    assert status["store"]["documents"] == len(DOCUMENTS)
    return data


def copy_of(data: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(data, tmp_path / "data"))


async def test_todays_release_on_the_previous_releases_versioned_data_rebuilds_and_swaps_by_itself(
    previous_data: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
):
    data = copy_of(previous_data, tmp_path)
    caplog.set_level(logging.INFO, logger="kbsearch.services.rebuild")
    store = make_store("edge", data, COLLECTION)
    async with running_service("edge", data, store=store, collection=COLLECTION, rebuild_pause_ms=20) as client:
        status = await rebuild_status(client)
        # The first difference is named: the previous release's keyword encoder against today's (the chunker
        # differs too, and is checked on the swapped collection below).
        assert "sparse=kb-bm25-en-v2]" in status["reason"] and f"sparse={Bm25Encoder.name}]" in status["reason"], status
        done = await wait_for(client, {"idle", "refused"}, searching="kafka consumer group lag")
        assert "building" in done["seen"], "no search ran while the rebuild was building"
        # Swapped by itself: no forced step, the self-check passed.
        assert done["state"] == "idle" and done["message"] == "swapped in", done
        check = done["check"]
        assert check["passed"] is True and check["worseModes"] == [], check
        # One answer per page: the title of each scaler page is asked once, not once per version.
        assert check["byOrigin"]["title"] == len(SCALERS) + 6, check
        # ...and a heading of each (the previous release kept no bodies: read from its chunks).
        assert check["byOrigin"]["heading"] >= len(SCALERS), check
        assert set(check["bySource"]) == {"scalers-docs", "widgets"}, check
        assert check["byOrigin"]["logged"] >= 1 and "bootstrap" in check["test"]
        # The figures are in the log too.
        logged = [r for r in caplog.records if r.getMessage() == "rebuild self-check"]
        assert logged and logged[-1].check == check  # type: ignore[attr-defined]

        live: VectorStore = context_of(client.app).store  # type: ignore[attr-defined]
        assert live.collection_chunker() == MarkdownChunker().fingerprint
        assert (await client.get("/api/v1/status")).json()["store"]["documents"] == len(DOCUMENTS)
        # Rebuilt documents know their versions: one result per page, its newest version first.
        response = await client.post("/api/v1/search", json={"query": "kafka scaler consumer group lag", "limit": 10})
        kafka = [hit for hit in response.json()["results"] if hit["uri"].endswith("/scalers/kafka.md")]
        assert [hit["uri"] for hit in kafka] == ["git://scalers/content/docs/2.12/scalers/kafka.md"], kafka
        assert kafka[0]["version"] == "2.12" and kafka[0]["otherVersions"] == ["2.10", "2.9"], kafka
        assert "git://widgets/docs/guides-install.md" in await search_uris(client, "install the widget operator")
        # Asked again with nothing changed: the same collection rebuilt scores the same and swaps.
        again = await client.post("/api/v1/reindex", json={})
        assert again.status_code == 202, again.text
        same = await wait_for(client, {"idle", "refused"})
        assert same["message"] == "swapped in" and same["check"]["current"] == same["check"]["rebuilt"], same


async def test_a_broken_embedder_on_the_previous_releases_data_is_refused_with_the_way_out(
    previous_data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")  # the model's endpoint is local
    data = copy_of(previous_data, tmp_path)
    with RandomEmbeddings() as endpoint:
        store = make_store("edge", data, COLLECTION)
        settings = settings_of(endpoint.settings())
        async with configured_service(data, store, collection=COLLECTION, **settings) as client:
            refused = await wait_for(client, {"idle", "refused"})
            assert refused["state"] == "refused", refused
            check = refused["check"]
            assert "dense" in check["worseModes"] and "keyword" not in check["worseModes"], check
            assert check["upperBound"]["dense"] < 0 and check["difference"]["dense"] < -check["margin"]
            again = await client.post("/api/v1/reindex", json={})
            assert again.status_code == 409 and again.json()["error"]["code"] == "REBUILD_REFUSED_PENDING"
            assert "forceSwap" in again.json()["error"]["message"]
            page = await client.get("/ui/sources")
            assert "Index rebuild: refused" in page.text and "How to resolve" in page.text
            # The previous release's collection still serves, with the embedder that built it.
            status = (await client.get("/api/v1/status")).json()
            assert status["embedder"]["model"] == "hashing-v1"
            # (its chunks carry no versions, so each version is its own result: any of them will do)
            assert any(uri.endswith("/scalers/redis.md") for uri in await search_uris(client, "redis scaler"))
