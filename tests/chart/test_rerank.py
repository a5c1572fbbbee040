"""The chart's reranker: off by default; a local cross-encoder from a volume; a remote endpoint with its key."""

from __future__ import annotations

import pytest

from tests.chart.helmchart import SEARCH, assert_schema_rejects, container, env_of, render, render_error, render_ok


def search_env(manifests) -> dict[str, dict]:
    return env_of(container(manifests, "Deployment", SEARCH, "search"))


def test_by_default_no_reranker_is_set():
    assert not [name for name in search_env(render("default")) if name.startswith("SEARCHSVC_RERANK")]


def test_a_local_cross_encoder_is_mounted_read_only_from_its_volume():
    manifests = render_ok(
        "--set", "rerank.backend=local",
        "--set", "rerank.modelVolume.persistentVolumeClaim.claimName=rerankers",
        "--set", "rerank.modelSubPath=ms-marco-MiniLM-L-6-v2",
    )  # fmt: skip
    search = container(manifests, "Deployment", SEARCH, "search")
    env = env_of(search)
    assert env["SEARCHSVC_RERANK"]["value"] == "local"
    assert env["SEARCHSVC_RERANK_MODEL_DIR"]["value"] == "/models/reranker"
    (mount,) = [m for m in search["volumeMounts"] if m["name"] == "reranker"]
    assert mount == {
        "name": "reranker", "mountPath": "/models/reranker", "readOnly": True, "subPath": "ms-marco-MiniLM-L-6-v2"
    }  # fmt: skip
    spec = manifests.one("Deployment", SEARCH)["spec"]["template"]["spec"]
    (volume,) = [v for v in spec["volumes"] if v["name"] == "reranker"]
    assert volume == {"name": "reranker", "persistentVolumeClaim": {"claimName": "rerankers"}}


def test_a_remote_endpoint_takes_its_key_from_an_existing_secret():
    values = {
        "backend": "remote",
        "url": "http://tei.ai.svc:8080/rerank",
        "protocol": "tei",
        "existingSecret": "rerank-key",
        "timeoutMs": "400",
    }
    env = search_env(render_ok(*[arg for key, value in values.items() for arg in ("--set", f"rerank.{key}={value}")]))
    assert env["SEARCHSVC_RERANK_URL"]["value"] == "http://tei.ai.svc:8080/rerank"
    assert env["SEARCHSVC_RERANK_PROTOCOL"]["value"] == "tei"
    assert env["SEARCHSVC_RERANK_TIMEOUT_MS"]["value"] == "400"
    assert env["SEARCHSVC_RERANK_API_KEY"]["valueFrom"] == {"secretKeyRef": {"name": "rerank-key", "key": "api-key"}}
    assert "SEARCHSVC_RERANK_MODEL_DIR" not in env


def test_the_listwise_reranker_needs_a_chat_model():
    assert "rerank.backend=llm ranks with the chat model" in render_error("--set", "rerank.backend=llm")


@pytest.mark.parametrize(
    ("args", "where"),
    [
        (["--set", "rerank.backend=cohere"], "/rerank/backend"),
        (["--set", "rerank.backend=local"], "/rerank/modelVolume"),
        (["--set", "rerank.backend=remote"], "/rerank/url"),
        (["--set", "rerank.candidates=1"], "/rerank/candidates"),
        (["--set", "rerank.url=ftp://x"], "/rerank/url"),
    ],
)
def test_schema_rejects_bad_rerank_values(args, where):
    assert_schema_rejects(args, where)
