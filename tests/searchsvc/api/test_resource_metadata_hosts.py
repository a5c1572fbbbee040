"""The URL in the OAuth resource metadata and the 401 challenge: never a cached echo of an attacker's Host,
and never a Host /mcp itself would refuse."""

from __future__ import annotations

from pathlib import Path

import httpx

from tests.support.service import running_service
from tests.support.service_process import ServiceProcess

METADATA = "/.well-known/oauth-protected-resource"
# Reads and writes need a token, so no Host allow-list stands in front of the routes.
TOKENS = {"api_token": "write-token-0123456789", "read_token": "read-token-0123456789"}
EVIL = {"host": "evil.example"}


async def test_a_configured_public_url_is_named_whatever_the_host_and_may_be_cached(tmp_path):
    async with running_service("edge", tmp_path / "data", public_url="https://kb.example.com/", **TOKENS) as client:
        document = await client.get(METADATA, headers=EVIL)
        assert document.status_code == 200
        assert document.json()["resource"] == "https://kb.example.com/mcp"
        assert document.headers["cache-control"] == "max-age=3600"
        refused = await client.get("/api/v1/sources", headers=EVIL)
        assert refused.status_code == 401
        challenge = refused.headers["www-authenticate"]
        assert challenge == f'Bearer resource_metadata="https://kb.example.com{METADATA}"'
        assert refused.headers["cache-control"] == "no-store"  # a 401 is never cached
        assert "evil" not in str(refused.headers)


async def test_without_a_public_url_a_host_derived_answer_is_never_cached(tmp_path):
    # /mcp answers any Host (a gateway in front checks them): the metadata follows, uncached.
    async with running_service("edge", tmp_path / "data", mcp_allowed_hosts="*", **TOKENS) as client:
        document = await client.get(METADATA, headers=EVIL)
        assert document.status_code == 200 and document.json()["resource"] == "http://evil.example/mcp"
        assert document.headers["cache-control"] == "no-store" and document.headers["vary"] == "Host"
        refused = await client.get("/api/v1/sources", headers=EVIL | {"authorization": "Bearer wrong-token-000"})
        assert refused.status_code == 401
        assert refused.headers["cache-control"] == "no-store" and refused.headers["vary"] == "Host"


async def test_with_allowed_hosts_a_host_outside_them_is_never_reflected(tmp_path):
    hosts = {"allowed_hosts": "kb.internal:*", "mcp_allowed_hosts": "kb.internal:*"}
    async with running_service("edge", tmp_path / "data", **hosts, **TOKENS) as client:
        document = await client.get(METADATA, headers=EVIL)
        assert document.status_code == 421 and document.json()["error"]["code"] == "MISDIRECTED_REQUEST"
        refused = await client.get("/api/v1/sources", headers=EVIL | {"authorization": "Bearer wrong-token-000"})
        assert refused.status_code == 401
        assert refused.headers["www-authenticate"] == 'Bearer error="invalid_token"'
        ours = await client.get(METADATA, headers={"host": "kb.internal:8000"})
        assert ours.status_code == 200 and ours.json()["resource"] == "http://kb.internal:8000/mcp"


def test_a_running_service_names_no_host_its_mcp_endpoint_refuses(tmp_path: Path) -> None:
    """Tokens on every call (no Host allow-list in front), /mcp on its loopback default: a foreign Host
    gets 421 from both metadata paths and a challenge naming no metadata; the service's own Host works."""
    env = {"SEARCHSVC_DATA_DIR": str(tmp_path / "data")} | {f"SEARCHSVC_{k.upper()}": v for k, v in TOKENS.items()}
    process = ServiceProcess(tmp_path / "service.log", env).start()
    try:
        process.wait_ready()
        for path in (METADATA, METADATA + "/mcp"):
            foreign = process.client.get(path, headers=EVIL)
            assert foreign.status_code == 421 and foreign.json()["error"]["code"] == "MISDIRECTED_REQUEST", path
            assert "evil" not in foreign.text and foreign.headers["cache-control"] == "no-store"
            ours = process.client.get(path)
            assert ours.status_code == 200 and ours.json()["resource"] == f"{process.url}/mcp", path
        refused = httpx.post(f"{process.url}/mcp", json={}, headers=EVIL, timeout=30)
        assert refused.status_code == 401 and refused.headers["www-authenticate"] == "Bearer"
    finally:
        process.stop()
