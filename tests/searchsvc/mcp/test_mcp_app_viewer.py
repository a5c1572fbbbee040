"""The citation viewer (an MCP App) in real Chromium: served by the service, it is handed a real
ask_knowledge result from the SDK client and shows its citations.

The host side is this test's page: it speaks the MCP Apps host half (spec.types of
@modelcontextprotocol/ext-apps, pinned with the Inspector): it answers `ui/initialize`, then sends
`ui/notifications/tool-result` with the tool's result, as a chat host does, and records what the
view asks of it (`ui/open-link`).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import httpx2
import pytest
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client
from playwright.async_api import Page, async_playwright

from tests.searchsvc.ask_support import put_docs
from tests.support.service import BASE_URL, running_service

pytestmark = pytest.mark.slow

CHROMIUM = Path(os.environ.get("KB_CHROMIUM", "/usr/bin/chromium"))
FLAGS = ["--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking"]
TOKEN = "s3cret-token-for-the-viewer"
VIEWER = "ui://knowledge-base/citations.html"
QUESTION = "how is a failed deployment rolled back"

HOST = """<!doctype html><html><body><iframe id="view" sandbox="allow-scripts"></iframe><script>
window.received = [];
window.sendResult = (result) => document.getElementById("view").contentWindow.postMessage(
  {jsonrpc: "2.0", method: "ui/notifications/tool-result", params: result}, "*");
window.addEventListener("message", (event) => {
  const m = event.data; window.received.push(m);
  const view = document.getElementById("view").contentWindow;
  if (m.method === "ui/initialize") view.postMessage({jsonrpc: "2.0", id: m.id, result: {
    protocolVersion: m.params.protocolVersion, hostInfo: {name: "test-host", version: "1"},
    hostCapabilities: {openLinks: {}}, hostContext: {theme: "light"}}}, "*");
  else if (m.method === "ui/notifications/initialized") window.sendResult(window.toolResult);
  else if (m.method === "ui/open-link") view.postMessage({jsonrpc: "2.0", id: m.id, result: {}}, "*");
});
</script></body></html>"""


async def ask_and_read_viewer(tmp_path: Path) -> tuple[dict, str]:
    async with running_service("edge", tmp_path, api_token=TOKEN) as client:
        await put_docs(client, Authorization=f"Bearer {TOKEN}")
        transport = httpx2.ASGITransport(app=client.app)  # type: ignore[attr-defined]
        async with (
            httpx2.AsyncClient(transport=transport, headers={"authorization": f"Bearer {TOKEN}"}) as http,
            Client(streamable_http_client(f"{BASE_URL}/mcp", http_client=http), cache=None) as mcp,
        ):
            result = await mcp.call_tool("ask_knowledge", {"question": QUESTION})
            page = await mcp.read_resource(VIEWER)
    assert not result.is_error
    return result.model_dump(mode="json", by_alias=True, exclude_none=True), page.contents[0].text


async def open_viewer(page: Page, html: str, result: dict) -> None:
    await page.set_content(HOST)
    await page.evaluate("(r) => { window.toolResult = r; }", result)
    await page.eval_on_selector("#view", "(frame, html) => { frame.srcdoc = html; }", html)


@pytest.fixture
def chromium() -> Path:
    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} is missing: run `make chromium`", pytrace=False)
    return CHROMIUM


async def test_the_viewer_shows_a_real_answers_citations_and_opens_their_links(tmp_path, chromium):
    result, html = await ask_and_read_viewer(tmp_path)
    citations = result["structuredContent"]["citations"]
    assert citations  # the extractive answer cites what it found
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=str(chromium), args=FLAGS)
        try:
            page = await browser.new_page()
            await open_viewer(page, html, result)
            view = page.frame_locator("#view")
            items = view.locator("#citations li")
            await items.first.wait_for()
            assert await items.count() == len(citations)
            first = citations[0]
            text = await items.first.inner_text()
            assert f"[{first['n']}]" in text and first["uri"] in text and first["quote"][:40] in text
            assert result["structuredContent"]["answer"][:40] in await view.locator("#answer").inner_text()
            # A link opens through the host (ui/open-link), never inside the sandboxed frame.
            await items.first.locator("a").click()
            await page.wait_for_function("window.received.some(m => m.method === 'ui/open-link')")
            received = await page.evaluate("window.received")
            assert [m["params"]["url"] for m in received if m.get("method") == "ui/open-link"] == [first["uri"]]
            methods = [m.get("method") for m in received]
            assert methods[:2] == ["ui/initialize", "ui/notifications/initialized"]
            assert "ui/notifications/size-changed" in methods

            # A quote is a document's text: markup in it is shown as text, never run or parsed.
            hostile = json.loads(json.dumps(result))
            hostile["structuredContent"]["citations"][0]["quote"] = '<img src=x onerror="window.parent.pwned=1">'
            await page.evaluate("(r) => window.sendResult(r)", hostile)
            await view.locator("blockquote", has_text="<img src=x").first.wait_for()
            assert await view.locator("img").count() == 0
        finally:
            await browser.close()
