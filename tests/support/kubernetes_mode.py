"""Kubernetes mode's service over the kmock API server: its identities, their sources, the reviews' script.

Shared by the REST tests (tests/searchsvc/services/access/test_kubernetes_access.py) and the MCP ones
(tests/searchsvc/mcp/test_mcp_kubernetes.py); a test module imports the `reviews` fixture by name.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import pytest

from tests.support.kube import KubeEmulator
from tests.support.kube_reviews import jwt_token
from tests.support.service import running_service

WRITER, WRITER_NAME = jwt_token("operator-token-1"), "system:serviceaccount:kb-system:kb-operator"
AGENT_A, AGENT_A_NAME = jwt_token("agent-a-token"), "system:serviceaccount:team-a:agent"
NAMED, NAMED_NAME = jwt_token("named-token"), "system:serviceaccount:team-a:runbook-reader"
STRANGER = jwt_token("stranger-token")  # a valid identity with no grants
SOURCES = {
    "team-a/docs": ["https://git.example/a/docs/one.md", "https://git.example/a/docs/two.md"],
    "team-a/runbooks": ["https://git.example/a/runbooks/pager.md"],
    "team-b/docs": ["https://git.example/b/docs/secret.md", "https://git.example/b/docs/plans.md"],
    "plain-source": ["https://git.example/plain/readme.md"],
}
B_WORD = "zebrafish"


def bearer(token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


def content(source: str, uri: str) -> str:
    secret = f" The {B_WORD} plans are here." if source.startswith("team-b") else ""
    return f"# {uri}\n\nHow we run deploys and restarts, for {source}.{secret}\n"


@pytest.fixture
def reviews(kube: KubeEmulator):
    script = kube.reviews
    script.user(WRITER, WRITER_NAME)
    script.user(AGENT_A, AGENT_A_NAME, ["system:serviceaccounts"])
    script.user(NAMED, NAMED_NAME)
    script.user(STRANGER, "system:serviceaccount:team-c:agent")
    script.grants |= {(AGENT_A_NAME, "team-a", None), (NAMED_NAME, "team-a", "runbooks")}
    return script


@asynccontextmanager
async def kubernetes_service(data: Path, cache_seconds: float = 1) -> AsyncIterator[httpx.AsyncClient]:
    async with running_service(
        "edge",
        data,
        auth_mode="kubernetes",
        kubernetes_writers=WRITER_NAME,
        kubernetes_audiences="search-service",
        auth_cache_seconds=cache_seconds,
        auth_timeout_seconds=1,
    ) as client:
        for source, uris in SOURCES.items():
            for uri in uris:
                body = {"uri": uri, "content": content(source, uri), "metadata": {"sourceIdentifier": source}}
                response = await client.put("/api/v1/documents", json=body, headers=bearer(WRITER))
                assert response.status_code == 200, response.text
        yield client
