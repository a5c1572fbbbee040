"""Regression tests of the attack findings that a running `python -m kbsearch` process answers.

One open service (no tokens, as `make run` starts it) and one with a tokens file, each a real
process (tests/support/service_process.py: the service's own entry point, the hashing embedder).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tests.support.mcpclient import mcp_client, text_of
from tests.support.service_process import ServiceProcess, ready_service

ADMIN, READER = "admin-tok-hp1", "reader-tok-hp2"
TOKENS = (
    "tokens:\n"
    f'  - name: admin\n    token: "{ADMIN}"\n    write: true\n    sources: ["*"]\n'
    f'  - name: reader\n    token: "{READER}"\n    sources: ["team-a/*"]\n'
)
REBOUND = "attacker.example"  # a page's own name, made to resolve to 127.0.0.1


def bearer(token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


@pytest.fixture(scope="module")
def open_service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceProcess]:
    root: Path = tmp_path_factory.mktemp("open")
    with ready_service(root / "service.log", {"SEARCHSVC_DATA_DIR": str(root / "data")}) as process:
        yield process


@pytest.fixture(scope="module")
def token_service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceProcess]:
    root: Path = tmp_path_factory.mktemp("tokens")
    (root / "tokens.yaml").write_text(TOKENS)
    env = {"SEARCHSVC_DATA_DIR": str(root / "data"), "SEARCHSVC_TOKENS_FILE": str(root / "tokens.yaml")}
    with ready_service(root / "service.log", env) as process:
        yield process


# --- finding 3: DNS rebinding against the open service ----------------------------------------


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/api/v1/documents"),
        ("POST", "/api/v1/search"),
        ("PUT", "/api/v1/documents"),
        ("DELETE", "/api/v1/sources/team-a%2Fdocs"),
        ("GET", "/ui/"),
        ("GET", "/ui/login"),
        ("POST", "/mcp"),
        ("GET", "/api/v1/status"),
    ],
)
def test_an_open_service_answers_no_route_under_a_foreign_host(open_service, method, path):
    body = {"uri": "x.md", "content": "planted"} if method == "PUT" else {"query": "x"}
    response = open_service.client.request(
        method, path, json=body if method in ("PUT", "POST") else None, headers={"host": REBOUND}
    )
    assert response.status_code == 421, response.text
    assert response.json()["error"]["code"] == "MISDIRECTED_REQUEST"
    listed = open_service.client.get("/api/v1/documents").json()["documents"]
    assert all(d["uri"] != "x.md" for d in listed)  # nothing was written


def test_an_open_service_answers_loopback_names_and_its_probes_any_host(open_service):
    port = open_service.port
    for host in (f"127.0.0.1:{port}", f"localhost:{port}", "localhost", f"[::1]:{port}"):
        assert open_service.client.get("/api/v1/documents", headers={"host": host}).status_code == 200, host
    for path in ("/healthz", "/readyz"):  # a kubelet sends the pod's IP
        assert open_service.client.get(path, headers={"host": "10.1.2.3:8000"}).status_code == 200


def test_a_service_whose_every_call_needs_a_token_leaves_hosts_to_the_token(token_service):
    response = token_service.client.get("/api/v1/documents", headers={"host": REBOUND, **bearer(ADMIN)})
    assert response.status_code == 200


# --- finding 5: one question length on every face ----------------------------------------------

LONG_QUESTION = "How do I roll back a deployment? " + "Please explain every step in detail. " * 40  # ~1,500


def test_a_question_longer_than_a_search_query_is_answered_on_every_face(open_service):
    assert 1000 < len(LONG_QUESTION) <= 2000
    doc = {"uri": "runbook.md", "content": "# Runbook\n\nRoll back a deployment with helm rollback."}
    assert open_service.client.put("/api/v1/documents", json=doc).status_code == 200
    answered = open_service.client.post("/api/v1/ask", json={"question": LONG_QUESTION})
    assert answered.status_code == 200, answered.text
    assert answered.json()["searches"][0]["query"] == LONG_QUESTION.strip()[:1000]
    streamed = open_service.client.post("/api/v1/ask", json={"question": LONG_QUESTION, "stream": True})
    assert streamed.status_code == 200 and "event: done" in streamed.text and "event: error" not in streamed.text

    page = open_service.client.get("/ui/")
    csrf = re.search(r'name="csrf_token" value="([^"]+)"', page.text).group(1)
    panel = open_service.client.post(
        "/ui/ask", data={"question": LONG_QUESTION, "csrf_token": csrf}, headers={"HX-Request": "true"}
    )
    assert panel.status_code == 200 and "should have at most" not in panel.text and 'class="answer"' in panel.text

    async def over_mcp() -> tuple[bool, str]:
        async with mcp_client(str(open_service.client.base_url)) as client:
            result = await client.call_tool("ask_knowledge", {"question": LONG_QUESTION})
            return result.is_error, text_of(result)

    is_error, text = asyncio.run(over_mcp())
    assert not is_error, text


def test_a_question_over_the_limit_is_refused_alike_on_every_face(open_service):
    too_long = "why " * 501
    refused = open_service.client.post("/api/v1/ask", json={"question": too_long})
    assert refused.status_code == 422 and "2000" in refused.text

    async def over_mcp() -> tuple[bool, str]:
        async with mcp_client(str(open_service.client.base_url)) as client:
            result = await client.call_tool("ask_knowledge", {"question": too_long})
            return result.is_error, text_of(result)

    is_error, text = asyncio.run(over_mcp())
    assert is_error and "2000" in text


# --- finding 6: no endless event streams on the stateless MCP endpoint ----------------------------


@pytest.mark.parametrize("method", ["GET", "DELETE"])
def test_mcp_answers_only_posts(token_service, method):
    headers = {**bearer(READER), "accept": "application/json, text/event-stream"}
    # Before: a GET opened an event stream that never sent anything and never ended (the read times out).
    response = token_service.client.request(method, "/mcp", headers=headers, timeout=10)
    assert response.status_code == 405, response.text
    assert response.headers["allow"] == "POST"
    assert response.json()["error"]["code"] == "METHOD_NOT_ALLOWED"


# --- finding 8: a sync status from the future ---------------------------------------------------


def test_a_sync_status_dated_far_ahead_is_refused_and_real_reports_keep_landing(token_service):
    path = "/api/v1/sources/team-a%2Fstatus/status"
    report = {"phase": "ok", "documents": 0}
    forged = token_service.client.put(path, json=report | {"syncedAt": "9999-12-31T23:59:59Z"}, headers=bearer(ADMIN))
    assert forged.status_code == 422, forged.text
    assert forged.json()["error"]["code"] == "SYNCED_AT_IN_FUTURE"
    now = datetime.now(UTC)
    for minutes in (0, 1):  # within the default 5 minutes of skew, and each later one is stored
        synced = (now + timedelta(minutes=minutes)).isoformat()
        real = token_service.client.put(path, json=report | {"syncedAt": synced}, headers=bearer(ADMIN))
        assert real.status_code == 200 and real.json()["stored"] is True, real.text


# --- finding 12: the start-up log says whether writes are open -----------------------------------


def test_the_open_writes_warning_only_when_writes_are_open(open_service, token_service):
    def warned(service: ServiceProcess) -> bool:
        return any(e.get("message", "").startswith("writes are open") for e in service.log_entries())

    assert warned(open_service)
    assert not warned(token_service)  # a tokens file closes writes without SEARCHSVC_API_TOKEN
