"""Which Secret the operator reads, which keys, and where their values may go.

The Secrets live in the emulated API server and are read with the real Kubernetes client; the
search service is the real app, behind a transport that records every request it is sent.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from kboperator.errors import InvalidSpecError, SecretError, SecretNotAllowedError, ServiceError
from kboperator.kube.context import OperatorContext
from kboperator.kube.secrets import SecretReader, repository_credentials
from kboperator.kube.source import ServiceRef, parse_source
from kboperator.repourl import parse_repo_url
from kboperator.settings import OperatorSettings
from tests.operator.secrets import create_secret
from tests.support.kube import KubeApi, KubeEmulator
from tests.support.service import running_service

NS = "kb"
DEFAULT_URL = "http://kb-search.kb-system.svc:8000"
OTHER_URL = "https://search.team-a.example/kb"
OPERATOR_TOKEN = "operator-write-token"
TEAM_TOKEN = "team-a-token-value"


class Recording(httpx.AsyncBaseTransport):
    """Forwards to the real app, keeping every request (host and headers) it was asked to send."""

    def __init__(self, inner: httpx.AsyncBaseTransport) -> None:
        self.inner = inner
        self.requests: list[httpx.Request] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        return await self.inner.handle_async_request(request)


@pytest.fixture
async def sent(tmp_path: Path) -> AsyncIterator[Recording]:
    async with running_service("edge", tmp_path / "data", api_token=OPERATOR_TOKEN) as http:
        yield Recording(httpx.ASGITransport(app=http.app))  # type: ignore[attr-defined]


@pytest.fixture
async def services(
    kube: KubeEmulator, kubeconfig: Path, sent: Recording, tmp_path: Path
) -> AsyncIterator[OperatorContext]:
    settings = OperatorSettings(
        search_url=DEFAULT_URL,
        search_token=OPERATOR_TOKEN,
        allowed_search_urls=[OTHER_URL],
        cache_dir=tmp_path / "cache",
        metrics_port=0,
    )
    services = OperatorContext(settings, secrets=SecretReader.from_environment(), transport=sent)
    yield services
    await services.close()


@pytest.fixture
def api(kube: KubeEmulator) -> KubeApi:
    return KubeApi(kube, NS)


async def delete_through(services: OperatorContext, service: ServiceRef) -> None:
    """Send one request through the source's engine. What counts is what was sent, and where:
    the app serves no path prefix and knows only the operator's token, so others may be refused."""
    async with services.engine(NS, service) as engine:
        with contextlib.suppress(ServiceError):
            await engine.client.delete_source(f"{NS}/docs")


def authorization(request: httpx.Request) -> str | None:
    return request.headers.get("authorization")


async def test_a_url_off_the_allow_list_is_refused_before_any_secret_is_read(
    services: OperatorContext, sent: Recording
) -> None:
    # No Secret "team-token" exists: reading it first would fail with "does not exist" instead.
    for url in (
        "https://evil.example/kb",
        "https://search.team-a.example@evil.example/kb",
        "https://search.team-a.example.evil.example/kb",
        "https://search.team-a.example/kb-evil",
    ):
        with pytest.raises(InvalidSpecError) as caught:
            await delete_through(services, ServiceRef(url, "team-token"))
        assert not isinstance(caught.value, SecretError)
    assert sent.requests == []


async def test_a_secret_without_the_opt_in_label_is_never_used(
    services: OperatorContext, sent: Recording, api: KubeApi
) -> None:
    # What a legacy service-account token Secret looks like to the operator: a `token` key, no label.
    await create_secret(api, "default-token-x7k2p", {"token": "eyJhbGciOiJSUzI1NiJ9.sa-token"}, None)
    await create_secret(api, "git-creds", {"token": "git-token"}, "repository")  # labelled for another use
    for name in ("default-token-x7k2p", "git-creds"):
        with pytest.raises(SecretNotAllowedError) as caught:
            await delete_through(services, ServiceRef(None, name))
        message = str(caught.value)
        assert f"Secret {NS}/{name}" in message and "kb.knowledgebase.dev/secret-type=search-token" in message
        assert "sa-token" not in message and "git-token" not in message
    assert sent.requests == []
    # The same for repository credentials: the git credential helper never sees these tokens.
    await create_secret(api, "search", {"token": "search-token-value"}, "search-token")
    location = parse_repo_url("https://github.com/a/b", allow_local=False)
    for name in ("default-token-x7k2p", "search"):
        with pytest.raises(SecretNotAllowedError, match="secret-type=repository"):
            await repository_credentials(services.secrets, NS, name, location)


async def test_only_the_fixed_key_token_is_read(services: OperatorContext, sent: Recording, api: KubeApi) -> None:
    await create_secret(api, "renamed", {"api-token": TEAM_TOKEN}, "search-token")
    with pytest.raises(SecretError, match="has no 'token' key"):
        await delete_through(services, ServiceRef(None, "renamed"))
    assert sent.requests == []
    # The deprecated secretRef.key may only name the fixed key.
    spec = {
        "repository": {"url": "https://github.com/a/b"},
        "searchService": {"secretRef": {"name": "renamed", "key": "api-token"}},
    }
    with pytest.raises(InvalidSpecError, match=r"secretRef\.key 'api-token' is not supported"):
        parse_source(NS, "docs", spec, allow_local=False)
    spec["searchService"]["secretRef"]["key"] = "token"
    parse_source(NS, "docs", spec, allow_local=False)


async def test_a_search_token_goes_only_where_it_is_allowed_and_bound(
    services: OperatorContext, sent: Recording, api: KubeApi
) -> None:
    await create_secret(api, "team-token", {"token": TEAM_TOKEN, "url": OTHER_URL}, "search-token")
    # Bound to OTHER_URL: not sent to the operator's own service, though that one is allowed.
    with pytest.raises(SecretNotAllowedError, match="bound \\(key 'url'\\) to another search service"):
        await delete_through(services, ServiceRef(None, "team-token"))
    assert sent.requests == []
    await delete_through(services, ServiceRef(OTHER_URL + "/v2", "team-token"))
    (request,) = sent.requests
    assert request.url.host == "search.team-a.example" and request.url.path.startswith("/kb/v2/api/v1/sources/")
    assert authorization(request) == f"Bearer {TEAM_TOKEN}"


async def test_the_operators_own_token_goes_only_to_its_own_service(services: OperatorContext, sent: Recording) -> None:
    await delete_through(services, ServiceRef(None, None))
    await delete_through(services, ServiceRef(DEFAULT_URL + "/", None))
    await delete_through(services, ServiceRef(OTHER_URL, None))
    assert [(r.url.host, authorization(r)) for r in sent.requests] == [
        ("kb-search.kb-system.svc", f"Bearer {OPERATOR_TOKEN}"),
        ("kb-search.kb-system.svc", f"Bearer {OPERATOR_TOKEN}"),
        ("search.team-a.example", None),
    ]


async def test_parse_source_refuses_a_service_off_the_list(services: OperatorContext) -> None:
    spec = {"repository": {"url": "https://github.com/a/b"}, "searchService": {"url": "http://evil.example:8000"}}
    with pytest.raises(InvalidSpecError, match="not one of the search services"):
        parse_source(NS, "docs", spec, allow_local=False, services=services.policy)
    spec["searchService"]["url"] = OTHER_URL
    parse_source(NS, "docs", spec, allow_local=False, services=services.policy)


@pytest.mark.parametrize(
    ("repository", "bound", "allowed"),
    [
        ("https://github.com/acme/docs.git", "https://github.com/acme", True),
        ("https://github.com/acme-evil/docs.git", "https://github.com/acme", False),
        ("https://github.com.evil.example/acme/docs", "https://github.com/acme", False),
        ("https://gitlab.example.com/acme/docs", "https://github.com/acme", False),
        ("git@github.com:acme/docs.git", "git@github.com:acme", True),
        ("git@evil.example:acme/docs.git", "git@github.com:acme", False),
        ("https://github.com/acme/docs", "not a url", False),
        ("https://github.com/anyone/docs", None, True),  # unbound: the credential helper keeps it to the host
    ],
)
async def test_a_repository_secret_is_used_only_for_its_url(
    services: OperatorContext, api: KubeApi, repository: str, bound: str | None, allowed: bool
) -> None:
    data = {
        "token": "git-token",
        "ssh-privatekey": "KEY",
        "known_hosts": "github.com ssh-ed25519 AAAA",
        "password": "never-read",
    }
    if bound:
        data["url"] = bound
    await create_secret(api, "git", data, "repository")
    location = parse_repo_url(repository, allow_local=False)
    if not allowed:
        with pytest.raises(SecretNotAllowedError) as caught:
            await repository_credentials(services.secrets, NS, "git", location)
        assert "git-token" not in str(caught.value) and "KEY" not in str(caught.value)
        return
    creds = await repository_credentials(services.secrets, NS, "git", location)
    if location.kind == "ssh":
        assert (creds.ssh_private_key, creds.token) == ("KEY", None)
    else:
        assert (creds.token, creds.ssh_private_key, creds.username) == ("git-token", None, None)
