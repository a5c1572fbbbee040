"""HTTP clients to search services: replaced on a token rotation, bounded, closed once unused."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from kboperator.git.repo import RepoCache
from kboperator.kube.context import OperatorContext
from kboperator.kube.engines import EngineCache
from kboperator.kube.secrets import SecretReader
from kboperator.kube.source import ServiceRef
from kboperator.searchclient import SearchClient
from kboperator.settings import OperatorSettings
from kboperator.sync.engine import SyncEngine
from tests.operator.secrets import create_secret
from tests.support.kube import KubeApi, KubeEmulator


def closed(engine: SyncEngine) -> bool:
    return engine.client._http.is_closed


@pytest.fixture
def cache(tmp_path: Path) -> EngineCache:
    repos = RepoCache(tmp_path / "cache")
    return EngineCache(lambda url, token: SyncEngine(SearchClient(url, token), repos), max_size=2)


async def test_a_rotated_token_replaces_the_client_and_closes_the_old_one(cache: EngineCache) -> None:
    async with cache.lease("http://a", "secret:kb/t", "one") as first:
        pass
    async with cache.lease("http://a", "secret:kb/t", "one") as again:
        assert again is first and not closed(first)
    async with cache.lease("http://a", "secret:kb/t", "two") as second:
        assert second is not first and closed(first) and not closed(second)
    assert len(cache) == 1


async def test_a_client_in_use_is_closed_only_when_released(cache: EngineCache) -> None:
    async with cache.lease("http://a", "secret:kb/t", "one") as busy:
        async with cache.lease("http://a", "secret:kb/t", "two"):
            assert not closed(busy)  # a sync still uses it: its requests must not fail
        assert not closed(busy)
    assert closed(busy)


async def test_the_cache_is_bounded_and_evicts_the_least_recently_used(cache: EngineCache) -> None:
    engines = []
    for url in ("http://a", "http://b", "http://a", "http://c"):
        async with cache.lease(url, "operator", "t") as engine:
            engines.append(engine)
    a, b, _, c = engines
    assert len(cache) == 2
    assert closed(b) and not closed(a) and not closed(c)  # "a" was used after "b"
    await cache.close()
    assert closed(a) and closed(c) and len(cache) == 0


@pytest.fixture
async def services(kube: KubeEmulator, kubeconfig: Path, tmp_path: Path) -> AsyncIterator[OperatorContext]:
    settings = OperatorSettings(search_url="http://localhost", cache_dir=tmp_path / "cache", max_search_clients=4)
    services = OperatorContext(settings, secrets=SecretReader.from_environment())
    yield services
    await services.close()


async def test_services_close_the_client_of_a_rotated_secret(services: OperatorContext, kube: KubeEmulator) -> None:
    api = KubeApi(kube, "kb")
    await create_secret(api, "token", {"token": "first"}, "search-token")
    async with services.engine("kb", ServiceRef(None, "token")) as before:
        assert before.client._http.headers["authorization"] == "Bearer first"
    rotated = {"data": {"token": base64.b64encode(b"second").decode()}}
    response = await kube.patch(
        "/api/v1/namespaces/kb/secrets/token", json=rotated, headers={"Content-Type": "application/merge-patch+json"}
    )
    assert response.status == 200, await response.text()
    async with services.engine("kb", ServiceRef(None, "token")) as after:
        assert after.client._http.headers["authorization"] == "Bearer second"
    assert closed(before) and not closed(after)
