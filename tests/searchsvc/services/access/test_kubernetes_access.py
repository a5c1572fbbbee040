"""Kubernetes mode: TokenReview and SubjectAccessReview over real HTTP to the kmock API server.

The service's own client code (kbsearch.services.access.kubernetes) talks to the emulator through a
kubeconfig, as it would to an API server; the emulator answers the reviews from a script.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import time
from pathlib import Path

import httpx
import pytest
import yaml

from kbsearch.services.access.kubernetes import TtlCache
from tests.support.kube_reviews import jwt_token
from tests.support.kubernetes_mode import (
    AGENT_A,
    AGENT_A_NAME,
    B_WORD,
    NAMED,
    SOURCES,
    STRANGER,
    WRITER,
    bearer,
    kubernetes_service,
)
from tests.support.service import CHALLENGE, running_service

API_PATHS = [
    ("GET", "/api/v1/documents"),
    ("GET", "/api/v1/sources"),
    ("GET", "/api/v1/sources/team-a%2Fdocs"),
    ("GET", "/api/v1/status"),
    ("GET", "/api/v1/search?q=deploys"),
    ("POST", "/api/v1/search"),
]


@pytest.fixture
async def service(reviews, kubeconfig, tmp_path):
    async with kubernetes_service(tmp_path / "data") as client:
        yield client


async def test_reviews_are_cached_by_token_and_by_identity_and_namespace(reviews, kubeconfig, tmp_path):
    async with kubernetes_service(tmp_path / "data", cache_seconds=600) as client:
        assert await visible_sources(client, AGENT_A) == ["team-a/docs", "team-a/runbooks"]
        tokens, decisions = len(reviews.token_reviews), len(reviews.access_reviews)
        for _ in range(3):
            assert await visible_sources(client, AGENT_A) == ["team-a/docs", "team-a/runbooks"]
        assert (len(reviews.token_reviews), len(reviews.access_reviews)) == (tokens, decisions)
        # Namespaces: team-a (granted) and team-b (refused, then asked per name); plain-source is never asked.
        asked = {
            (r["spec"]["resourceAttributes"]["namespace"], r["spec"]["resourceAttributes"].get("name"))
            for r in reviews.access_reviews
        }
        assert asked == {("team-a", None), ("team-b", None), ("team-b", "docs")}


def test_the_review_caches_are_bounded_and_expire():
    now = [0.0]
    cache: TtlCache[str, int] = TtlCache(size=2, ttl=10, clock=lambda: now[0])
    for key, value in (("a", 1), ("b", 2)):
        cache.put(key, value)
    assert cache.get("a") == 1  # "b" is now the least recently used
    cache.put("c", 3)
    assert [cache.get(k) for k in ("a", "c")] == [1, 3] and cache.get("b") != 2
    now[0] = 10.0
    assert cache.get("a") != 1  # expired: never answered past its lifetime


async def visible_sources(client: httpx.AsyncClient, token: str) -> list[str]:
    response = await client.get("/api/v1/sources", headers=bearer(token))
    assert response.status_code == 200, response.text
    return [s["sourceIdentifier"] for s in response.json()["sources"]]


def no_leak(payload: object, *hidden: str) -> None:
    text = json.dumps(payload)
    for word in hidden:
        assert word not in text, f"{word!r} leaked: {text[:400]}"


async def test_a_namespace_grant_reads_that_namespace_and_nothing_else(service, reviews):
    assert await visible_sources(service, AGENT_A) == ["team-a/docs", "team-a/runbooks"]
    hidden = ("team-b", "/b/", B_WORD, "plain")
    for mode in ("hybrid", "dense", "keyword"):
        for search_filter in ({}, {"sourceIdentifier": "team-b/docs"}, {"uriPrefix": "https://git.example/b/"}):
            for limit in (1, 100):
                body = {"query": f"{B_WORD} deploys", "mode": mode, "limit": limit, "filter": search_filter}
                response = await service.post("/api/v1/search", json=body, headers=bearer(AGENT_A))
                assert response.status_code == 200, response.text
                results = response.json()["results"]
                no_leak(results, *hidden)
                if not search_filter:
                    assert len(results) == min(limit, 3)
    listing = (await service.get("/api/v1/documents", headers=bearer(AGENT_A))).json()
    assert sorted(d["uri"] for d in listing["documents"]) == sorted(SOURCES["team-a/docs"] + SOURCES["team-a/runbooks"])
    store = (await service.get("/api/v1/status", headers=bearer(AGENT_A))).json()["store"]
    assert store["documents"] == 3
    other = (await service.get("/api/v1/sources/team-b%2Fdocs", headers=bearer(AGENT_A))).json()
    assert other["documents"] == other["chunks"] == 0
    b_uri = SOURCES["team-b/docs"][0]
    refused = await service.delete("/api/v1/documents", params={"uri": b_uri}, headers=bearer(AGENT_A))
    assert refused.status_code == 403
    assert await visible_sources(service, WRITER) == sorted(SOURCES)
    # Every decision asked about this identity, as the identity the TokenReview gave.
    assert {r["spec"]["user"] for r in reviews.access_reviews} == {AGENT_A_NAME}
    assert all(r["spec"]["groups"] == ["system:serviceaccounts"] for r in reviews.access_reviews)
    assert reviews.token_reviews[0]["spec"]["audiences"] == ["search-service"]


async def test_a_grant_on_one_knowledgesource_reads_only_that_source(service):
    assert await visible_sources(service, NAMED) == ["team-a/runbooks"]


async def test_an_identity_without_grants_gets_empty_answers(service):
    assert await visible_sources(service, STRANGER) == []
    response = await service.get("/api/v1/search", params={"q": "deploys"}, headers=bearer(STRANGER))
    assert response.status_code == 200 and response.json()["results"] == []


async def test_an_invalid_token_is_401(service):
    response = await service.get("/api/v1/sources", headers=bearer("not-a-real-token"))
    assert response.status_code == 401 and response.headers["www-authenticate"] == CHALLENGE + ', error="invalid_token"'
    assert (await service.get("/api/v1/sources")).status_code == 401


async def test_a_revoked_grant_takes_effect_within_the_cache_lifetime(service, reviews):
    assert await visible_sources(service, AGENT_A) == ["team-a/docs", "team-a/runbooks"]
    reviews.grants.discard((AGENT_A_NAME, "team-a", None))
    deadline = time.monotonic() + 15  # the cache lives 1 s; generous for a loaded machine
    while await visible_sources(service, AGENT_A):
        assert time.monotonic() < deadline, "the revoked grant is still honoured"
        await asyncio.sleep(0.1)


async def test_a_failing_review_api_is_503_everywhere_and_never_a_stale_allow(service, reviews):
    assert await visible_sources(service, AGENT_A) == ["team-a/docs", "team-a/runbooks"]
    reviews.failing = True
    deadline = time.monotonic() + 15  # until the cached decisions of AGENT_A have expired
    while (await service.get("/api/v1/sources", headers=bearer(AGENT_A))).status_code == 200:
        assert time.monotonic() < deadline, "a cached allow outlived its lifetime"
        await asyncio.sleep(0.1)
    for token in (AGENT_A, jwt_token("fresh-token")):
        for method, path in API_PATHS:
            body = {"query": "deploys"} if method == "POST" else None
            response = await service.request(method, path, json=body, headers=bearer(token))
            assert response.status_code == 503, (path, response.text)
            assert response.json()["error"]["code"] == "AUTH_UNAVAILABLE"
            assert int(response.headers["retry-after"]) >= 1
    assert (await service.get("/healthz")).status_code == 200


async def test_a_slow_review_api_hits_the_timeout(service, reviews):
    reviews.delay_s = 5.0  # the service waits 1 s
    response = await service.get("/api/v1/sources", headers=bearer(jwt_token("slow-token")))
    assert response.status_code == 503 and response.json()["error"]["code"] == "AUTH_UNAVAILABLE"


async def test_an_unreachable_api_server_is_503(tmp_path, monkeypatch):
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    config = tmp_path / "kubeconfig"
    config.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "c",
                "clusters": [{"name": "c", "cluster": {"server": f"http://127.0.0.1:{port}"}}],
                "users": [{"name": "u", "user": {"token": "service-token"}}],
                "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
            }
        )
    )
    import kubernetes.config.kube_config

    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setattr(kubernetes.config.kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", str(config))
    async with running_service("edge", tmp_path / "data", auth_mode="kubernetes", auth_timeout_seconds=1) as client:
        response = await client.get("/api/v1/sources", headers=bearer(jwt_token("any-token")))
        assert response.status_code == 503 and response.json()["error"]["code"] == "AUTH_UNAVAILABLE"
        assert "retry-after" in response.headers


def test_kubernetes_mode_without_any_api_configuration_refuses_to_start(tmp_path: Path, monkeypatch):
    import kubernetes.config.kube_config

    from kbsearch.app import create_app
    from kbsearch.errors import ConfigurationError
    from kbsearch.settings import Settings

    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setattr(kubernetes.config.kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", str(tmp_path / "none"))
    with pytest.raises(ConfigurationError, match="SEARCHSVC_AUTH_MODE=kubernetes"):
        create_app(Settings(data_dir=tmp_path, auth_mode="kubernetes"))


async def test_a_review_that_does_not_confirm_the_audience_is_refused(reviews, kubeconfig, tmp_path):
    # An authenticator that ignores the asked audiences (a webhook, an old API server) must not pass
    # a token minted for another service: the answer's status.audiences has to name ours.
    other = jwt_token("other-service-token")  # it claims our audience; the review is what checks
    reviews.user(other, "system:serviceaccount:team-a:agent", audiences=["vault"])
    async with kubernetes_service(tmp_path / "data") as client:
        reviews.ignore_audiences = True
        refused = await client.get("/api/v1/sources", headers=bearer(other))
        assert refused.status_code == 401, refused.text
        assert (await client.get("/api/v1/sources", headers=bearer(AGENT_A))).status_code == 401  # no audiences named
        reviews.ignore_audiences = False
        await asyncio.sleep(1.1)  # past the refusal cache of this service (auth_cache_seconds=1)
        assert await visible_sources(client, AGENT_A) == ["team-a/docs", "team-a/runbooks"]


async def test_made_up_tokens_are_reviewed_a_few_at_a_time_and_a_refusal_is_remembered(
    reviews,
    kubeconfig,
    tmp_path,
):
    async with kubernetes_service(tmp_path / "data", cache_seconds=60) as client:
        reviews.delay_s = 0.2
        before = len(reviews.token_reviews)
        async with contextlib.AsyncExitStack() as stack:
            # Ten addresses, so the global bound is reached before any address's own one.
            guessers = [
                await stack.enter_async_context(
                    httpx.AsyncClient(
                        transport=httpx.ASGITransport(app=client.app, client=(f"127.0.0.{10 + n}", 40000)),
                        base_url=client.base_url,
                    )
                )
                for n in range(10)
            ]
            guesses = [
                guessers[i % 10].get("/api/v1/sources", headers=bearer(jwt_token(f"made-up-{i}"))) for i in range(40)
            ]
            answers = await asyncio.gather(*guesses)
        assert {a.status_code for a in answers} <= {401, 503}
        assert reviews.most_in_flight <= 16  # SEARCHSVC_AUTH_MAX_REVIEWS_IN_FLIGHT's default
        reviews.delay_s = 0
        while reviews.in_flight:  # noqa: ASYNC110 - a review abandoned at its timeout may still be answered
            await asyncio.sleep(0.05)
        reviewed = len(reviews.token_reviews)
        assert reviewed - before <= 40
        for _ in range(5):  # the same bad token again: answered from the short refusal cache
            assert (await client.get("/api/v1/sources", headers=bearer(jwt_token("made-up-0")))).status_code == 401
        assert len(reviews.token_reviews) <= reviewed + 1


async def test_tokens_no_review_could_accept_are_refused_without_one(reviews, kubeconfig, tmp_path):
    async with kubernetes_service(tmp_path / "data") as client:
        before = len(reviews.token_reviews)
        no_alg = ".".join(part.rstrip("=") for part in ("e30", *AGENT_A.split(".")[1:]))  # header {}
        junk = [
            "not-a-jwt",
            "a.b.c",  # base64url, but not JSON
            "eyJhbGciOiJIUzI1NiJ9.bm90IGpzb24.c2ln",  # a JSON header, a payload that is not JSON
            no_alg,
            jwt_token("agent-a-token", audiences=("vault",)),  # minted for another service
            jwt_token("agent-a-token", expires_at=int(time.time()) - 3600),  # expired an hour ago
        ]
        for token in junk:
            response = await client.get("/api/v1/sources", headers=bearer(token))
            assert response.status_code == 401, (token, response.text)
        assert len(reviews.token_reviews) == before
        assert await visible_sources(client, AGENT_A) == ["team-a/docs", "team-a/runbooks"]


async def test_one_address_flooding_made_up_tokens_leaves_reviews_for_everyone_else(reviews, kubeconfig, tmp_path):
    async with kubernetes_service(tmp_path / "data") as client:
        reviews.delay_s = 0.5  # each review: a busy API server
        transport = httpx.ASGITransport(app=client.app, client=("127.0.0.2", 40000))
        async with httpx.AsyncClient(transport=transport, base_url=client.base_url) as flooder:
            flood = [
                asyncio.create_task(flooder.get("/api/v1/sources", headers=bearer(jwt_token(f"junk-{i}"))))
                for i in range(100)
            ]
            while reviews.in_flight < 4:  # noqa: ASYNC110 - the flood has taken its share of the review slots
                await asyncio.sleep(0.01)
            # Before the per-address bound, 16 junk reviews at a time made this wait past its timeout.
            response = await client.get("/api/v1/sources", headers=bearer(AGENT_A))
            assert response.status_code == 200, response.text
            answers = await asyncio.gather(*flood)
        # (The emulator may see more than 4 of the flood at once: a review abandoned at its timeout
        # frees its turn while its request is still open, so only the answer above is asserted.)
        assert {a.status_code for a in answers} <= {401, 503}
