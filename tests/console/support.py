"""Helpers shared by the console tests: signing in, the CSRF token, the sources page and its cards."""

from __future__ import annotations

import re
from contextlib import AbstractAsyncContextManager
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import yaml

from tests.support.console import csrf_in
from tests.support.service import running_service

WRITER, READER = "fresh-writer-token", "fresh-reader-token"
WRITE = {"Authorization": f"Bearer {WRITER}"}


def writer_and_reader(tmp_path: Path) -> AbstractAsyncContextManager[httpx.AsyncClient]:
    """The service with two tokens: WRITER writes every source, READER reads docs/* only."""
    tokens = {
        "tokens": [
            {"name": "writer", "token": WRITER, "write": True, "sources": ["*"]},
            {"name": "reader", "token": READER, "sources": ["docs/*"]},
        ]
    }
    (tmp_path / "tokens.yaml").write_text(yaml.safe_dump(tokens))
    return running_service("edge", tmp_path / "data", tokens_file=tmp_path / "tokens.yaml")


def ago(**delta: float) -> str:
    return (datetime.now(UTC) - timedelta(**delta)).strftime("%Y-%m-%dT%H:%M:%SZ")


async def report(client: httpx.AsyncClient, source: str, body: dict) -> None:
    response = await client.put(f"/api/v1/sources/{source}/status", json=body, headers=WRITE)
    assert response.status_code == 200 and response.json()["stored"], response.text


async def sign_in(client: httpx.AsyncClient, token: str) -> None:
    login = await client.get("/ui/login")
    match = re.search(r'name="csrf_token" value="([^"]+)"', login.text)
    assert match
    signed = await client.post("/ui/login", data={"token": token, "csrf_token": match.group(1), "next": "/ui/sources"})
    assert signed.status_code == 303, signed.text


async def sources_page(client: httpx.AsyncClient) -> str:
    page = await client.get("/ui/sources")
    assert page.status_code == 200, page.text
    return page.text


def card(page: str, source: str) -> str:
    """The source's card on the page (from its heading to the next card)."""
    start = page.index(f">{source}</a></h2>")
    end = page.find('<article class="card source"', start)
    return page[start : end if end > 0 else len(page)]


async def csrf_of(client: httpx.AsyncClient) -> str:
    csrf = csrf_in((await client.get("/ui/login")).text)
    cookie = client.cookies.get("kb_console_csrf") or client.cookies.get("__Host-kb_console_csrf")  # http, https
    assert cookie == csrf
    return csrf
