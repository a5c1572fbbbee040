"""store.layout reaches the search service as the shards and replicas of the collections it creates."""

from __future__ import annotations

from tests.chart.helmchart import SEARCH, assert_schema_rejects, container, env_of, render_ok


def layout_env(*args: str) -> dict[str, str | None]:
    env = env_of(container(render_ok(*args), "Deployment", SEARCH, "search"))
    names = ("SEARCHSVC_QDRANT_SHARDS", "SEARCHSVC_QDRANT_REPLICATION_FACTOR")
    return {name: env[name]["value"] if name in env else None for name in names}


def test_a_single_node_gets_one_shard_and_one_copy() -> None:
    assert layout_env("--set", "store.mode=server") == {
        "SEARCHSVC_QDRANT_SHARDS": "1",
        "SEARCHSVC_QDRANT_REPLICATION_FACTOR": "1",
    }


def test_a_cluster_gets_the_configured_layout() -> None:
    cluster = ["--set", "store.mode=external", "--set", "store.external.url=http://qdrant.qdrant.svc:6333"]
    tuned = ["--set", "store.layout.shards=3", "--set", "store.layout.replicationFactor=2"]
    assert layout_env(*cluster, *tuned) == {
        "SEARCHSVC_QDRANT_SHARDS": "3",
        "SEARCHSVC_QDRANT_REPLICATION_FACTOR": "2",
    }


def test_the_embedded_store_gets_no_layout() -> None:
    assert set(layout_env().values()) == {None}


def test_a_layout_of_zero_is_refused() -> None:
    assert_schema_rejects(["--set", "store.layout.shards=0"], "/store/layout/shards")
    assert_schema_rejects(["--set", "store.layout.replicationFactor=0"], "/store/layout/replicationFactor")
