"""The console over plain HTTP (in-process): headers, sign-in, CSRF, scope and escaping."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import yaml

from kbsearch.console.rendering import ConsoleTemplates
from kbsearch.deps import parts_of
from tests.console.corpus import XSS_CONTENT, XSS_MARKER, XSS_URI
from tests.console.support import csrf_of
from tests.support.service import running_service

WRITER, READER = "http-writer-token", "http-reader-token"


# The app's lifespan is entered and left inside each test: in one task, as the MCP session manager needs.
@asynccontextmanager
async def scoped_service(tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    tokens = {
        "tokens": [
            {"name": "writer", "token": WRITER, "write": True, "sources": ["*"]},
            {"name": "reader", "token": READER, "sources": ["docs/*"]},
        ]
    }
    (tmp_path / "tokens.yaml").write_text(yaml.safe_dump(tokens))
    async with running_service("edge", tmp_path / "data", tokens_file=tmp_path / "tokens.yaml") as client:
        response = await client.put(
            "/api/v1/documents",
            json={"uri": XSS_URI, "content": XSS_CONTENT, "metadata": {"sourceIdentifier": "docs/a"}},
            headers={"Authorization": f"Bearer {WRITER}"},
        )
        assert response.status_code == 200, response.text
        yield client


@asynccontextmanager
async def open_app(tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    async with running_service("edge", tmp_path / "data") as client:
        yield client


async def sign_in(client: httpx.AsyncClient, token: str = READER) -> httpx.Response:
    csrf = await csrf_of(client)
    return await client.post("/ui/login", data={"token": token, "csrf_token": csrf, "next": "/ui/sources"})


async def test_every_console_response_carries_the_csp(tmp_path: Path) -> None:
    async with open_app(tmp_path) as open_service:
        for path in ("/ui/", "/ui/login", "/ui/documents", "/ui/sources", "/ui/insights", "/ui/document?uri=nope"):
            response = await open_service.get(path)
            assert response.status_code in (200, 404), (path, response.status_code)
            csp = response.headers["content-security-policy"]
            assert "script-src 'self'" in csp and "unsafe-inline" not in csp and "frame-ancestors 'none'" in csp
            assert response.headers["x-content-type-options"] == "nosniff"
            assert response.headers["cache-control"] == "no-store"
            # No inline script, handler or style: the one script is the vendored htmx file.
            assert not re.search(r"<[^>]+\son[a-z]+=", response.text) and " style=" not in response.text
            version = parts_of(open_service.app).faces[ConsoleTemplates].versions["htmx.min.js"]
            scripts = re.findall(r"<script[^>]*>", response.text)
            assert scripts == [f'<script src="/ui/static/htmx.min.js?v={version}" defer>']
        assert "content-security-policy" not in (await open_service.get("/api/v1/sources")).headers


async def test_static_files_are_cached_by_version(tmp_path: Path) -> None:
    async with open_app(tmp_path) as open_service:
        version = parts_of(open_service.app).faces[ConsoleTemplates].versions["htmx.min.js"]
        response = await open_service.get(f"/ui/static/htmx.min.js?v={version}")
        assert response.status_code == 200 and response.text.startswith("/*! htmx 2.0.11")
        assert response.headers["cache-control"] == "public, max-age=31536000, immutable"
        assert "javascript" in response.headers["content-type"]
        unversioned = await open_service.get("/ui/static/console.css")
        assert unversioned.headers["cache-control"] == "public, max-age=300"
        assert (await open_service.get("/ui/static/../templates/base.html")).status_code == 404


async def test_reads_that_need_a_token_go_to_the_login_form(tmp_path: Path) -> None:
    async with scoped_service(tmp_path) as scoped:
        response = await scoped.get("/ui/documents?source=docs%2Fa")
        assert response.status_code == 303
        assert response.headers["location"] == "/ui/login?next=/ui/documents%3Fsource%3Ddocs%252Fa"
        htmx = await scoped.get("/ui/", headers={"HX-Request": "true", "HX-Target": "results"})
        assert htmx.status_code == 200 and htmx.headers["hx-redirect"] == "/ui/login?next=/ui/"
        scoped.cookies.set("kb_console_session", "revoked-or-forged", path="/ui")
        assert (await scoped.get("/ui/")).headers["location"] == "/ui/login?next=/ui/&expired=1"


async def test_sign_in_sets_a_strict_httponly_cookie_and_the_pages_read_with_it(tmp_path: Path) -> None:
    async with scoped_service(tmp_path) as scoped:
        response = await sign_in(scoped)
        assert response.status_code == 303 and response.headers["location"] == "/ui/sources"
        cookies = response.headers.get_list("set-cookie")
        session = next(c for c in cookies if c.startswith("kb_console_session="))
        assert "HttpOnly" in session and "SameSite=strict" in session and "Path=/ui" in session
        assert "Secure" not in session  # plain http here; see the https test
        assert READER not in response.headers.get("location", "")
        page = await scoped.get("/ui/sources")
        assert page.status_code == 200 and "docs/a" in page.text and ">reader<" in page.text


async def test_cookies_are_secure_over_https(tmp_path: Path) -> None:
    (tmp_path / "tokens.yaml").write_text(yaml.safe_dump({"tokens": [{"name": "r", "token": READER, "sources": []}]}))
    async with running_service("edge", tmp_path / "data", tokens_file=tmp_path / "tokens.yaml") as client:
        client.base_url = httpx.URL("https://searchsvc")
        response = await sign_in(client)
        assert response.status_code == 303
        cookies = response.headers.get_list("set-cookie")
        assert all("Secure" in c for c in cookies)
        # __Host-: only this exact host may set them, with Path=/ and no Domain (the browser enforces it).
        assert {c.split("=", 1)[0] for c in cookies} == {"__Host-kb_console_session", "__Host-kb_console_csrf"}
        assert all("Path=/;" in c and "Domain" not in c for c in cookies)
        assert (await client.get("/ui/sources")).status_code == 200  # read back under the same names


async def test_the_session_cookie_is_not_the_token_and_sign_out_revokes_it(tmp_path: Path) -> None:
    async with scoped_service(tmp_path) as scoped:
        signed = await sign_in(scoped)
        session = scoped.cookies.get("kb_console_session")
        assert session and READER not in session and READER not in str(signed.headers)
        assert (await scoped.get("/ui/sources")).status_code == 200
        out = await scoped.post("/ui/logout", data={"csrf_token": scoped.cookies.get("kb_console_csrf")})
        assert out.status_code == 303
        # A copy of the cookie taken before sign-out (another tab, a stolen cookie) no longer works.
        scoped.cookies.set("kb_console_session", session, path="/ui")
        replayed = await scoped.get("/ui/sources")
        assert replayed.status_code == 303 and replayed.headers["location"].startswith("/ui/login")


async def test_rest_does_not_accept_the_console_cookie(tmp_path: Path) -> None:
    async with scoped_service(tmp_path) as scoped:
        await sign_in(scoped)
        scoped.cookies.set("kb_console_session", READER)  # even sent to every path
        assert (await scoped.get("/api/v1/sources")).status_code == 401
        assert (await scoped.get("/api/v1/search", params={"q": "x"})).status_code == 401


async def test_a_token_in_the_url_is_refused(tmp_path: Path) -> None:
    async with scoped_service(tmp_path) as scoped:
        response = await scoped.get("/ui/", params={"access_token": READER})
        assert response.status_code == 401 and READER not in response.text


async def test_state_changes_need_the_csrf_token(tmp_path: Path) -> None:
    async with scoped_service(tmp_path) as scoped:
        csrf = await csrf_of(scoped)
        without = await scoped.post("/ui/login", data={"token": READER})
        wrong = await scoped.post("/ui/login", data={"token": READER, "csrf_token": "x" + csrf})
        cross = await scoped.post(
            "/ui/login", data={"token": READER, "csrf_token": csrf}, headers={"Sec-Fetch-Site": "cross-site"}
        )
        # A sibling subdomain is same-site: it could have planted a matching cookie pair.
        sibling = await scoped.post(
            "/ui/login", data={"token": READER, "csrf_token": csrf}, headers={"Sec-Fetch-Site": "same-site"}
        )
        for refused in (without, wrong, cross, sibling):
            assert refused.status_code == 403 and "kb_console_session" not in refused.headers.get("set-cookie", "")
        scoped.cookies.delete("kb_console_csrf")
        assert (await scoped.post("/ui/login", data={"token": READER, "csrf_token": csrf})).status_code == 403

        signed = await sign_in(scoped)
        assert signed.status_code == 303
        assert (await scoped.post("/ui/logout")).status_code == 403
        assert (await scoped.get("/ui/sources")).status_code == 200  # still signed in
        fresh = scoped.cookies.get("kb_console_csrf")
        assert fresh != csrf  # a new session gets a new CSRF token
        out = await scoped.post("/ui/logout", data={"csrf_token": fresh})
        assert out.status_code == 303 and out.headers["location"] == "/ui/login"
        assert (await scoped.get("/ui/sources")).status_code == 303


async def test_a_wrong_token_is_refused_without_being_echoed(tmp_path: Path) -> None:
    async with scoped_service(tmp_path) as scoped:
        csrf = await csrf_of(scoped)
        response = await scoped.post("/ui/login", data={"token": "guess-123456", "csrf_token": csrf})
        assert response.status_code == 401 and "not accepted" in response.text and "guess-123456" not in response.text
        assert "kb_console_session" not in response.headers.get("set-cookie", "")


async def test_after_sign_in_only_console_paths_are_followed(tmp_path: Path) -> None:
    async with scoped_service(tmp_path) as scoped:
        for target in ("//evil.example/ui", "https://evil.example/", "/api/v1/sources", "/ui\\\\evil"):
            csrf = await csrf_of(scoped)
            response = await scoped.post("/ui/login", data={"token": READER, "csrf_token": csrf, "next": target})
            assert response.headers["location"] == "/ui/", target


async def test_document_text_queries_and_metadata_are_escaped(tmp_path: Path) -> None:
    async with scoped_service(tmp_path) as scoped:
        await sign_in(scoped)
        query = f"{XSS_MARKER} <script>alert(1)</script>"
        results = await scoped.get("/ui/", params={"q": query})
        assert results.status_code == 200 and "<mark>" in results.text
        document = await scoped.get("/ui/document", params={"uri": XSS_URI})
        for page in (results, document):
            assert (
                "<script>window" not in page.text and "<script>alert" not in page.text and "<img src=x" not in page.text
            )
            assert "&lt;script&gt;window.__xss" in page.text
        assert "&lt;img src=x" in document.text and "&lt;script&gt;alert(1)&lt;/script&gt;" in results.text


async def test_the_open_service_needs_no_sign_in(tmp_path: Path) -> None:
    async with open_app(tmp_path) as open_service:
        page = await open_service.get("/ui/")
        assert page.status_code == 200 and "open access" in page.text
        csrf = await csrf_of(open_service)
        unknown = await open_service.post("/ui/login", data={"token": "nobody-knows-it", "csrf_token": csrf})
        assert unknown.status_code == 401  # an unknown token does not pretend to sign in
