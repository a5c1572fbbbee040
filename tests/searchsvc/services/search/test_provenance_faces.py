"""A PDF hit names its page and a notebook hit its cell in every face: REST, MCP and the console."""

from __future__ import annotations

import base64

from tests.support.formatfiles import code_cell, markdown_cell, notebook, pdf_pages
from tests.support.mcpclient import ACCEPT, rpc
from tests.support.service import running_service

PDF_URI = "https://git.example/r/blob/main/manual.pdf"
NB_URI = "https://git.example/r/blob/main/tour.ipynb"


async def _index(client) -> None:
    pdf = pdf_pages("Installing the agent takes a minute. " * 25, "Quarantine mode isolates a failing node. " * 25)
    body = {"uri": PDF_URI, "content": base64.b64encode(pdf).decode(), "contentEncoding": "base64"}
    assert (await client.put("/api/v1/documents", json=body)).status_code == 200
    cells = [
        markdown_cell("# Tour\n\n" + "The tour walks through the dashboards one by one. " * 15),
        code_cell("setup()"),
        markdown_cell("## Latency\n\n" + "Latency histograms per shard show the tail. " * 15),
    ]
    tour = notebook(cells)
    assert (await client.put("/api/v1/documents", json={"uri": NB_URI, "content": tour.decode()})).status_code == 200


async def test_mcp_search_text_links_the_pdf_page_and_names_the_cell(tmp_path):
    async with running_service("edge", tmp_path / "data") as client:
        await _index(client)
        headers = {"accept": ACCEPT, "host": "127.0.0.1"}
        texts = {}
        for query in ("quarantine mode failing node", "latency histograms shard"):
            arguments = {"query": query, "mode": "keyword", "limit": 1}
            response = await client.post(
                "/mcp", json=rpc("tools/call", {"name": "search_knowledge", "arguments": arguments}), headers=headers
            )
            result = response.json()["result"]
            assert not result["isError"], response.text
            texts[query] = (result["content"][0]["text"], result["structuredContent"]["results"][0])
    text, structured = texts["quarantine mode failing node"]
    assert f"{PDF_URI}#page=2 (page 2)" in text and structured["page"] == 2
    text, structured = texts["latency histograms shard"]
    assert f"{NB_URI} (cell 3)" in text and structured["cell"] == 3


async def test_the_console_shows_the_page_and_links_to_it(tmp_path):
    async with running_service("edge", tmp_path / "data") as client:
        await _index(client)
        pdf_page = await client.get("/ui/", params={"q": "quarantine mode failing node", "mode": "keyword"})
        notebook_page = await client.get("/ui/", params={"q": "latency histograms shard", "mode": "keyword"})
    assert pdf_page.status_code == 200
    assert '<span class="location">page 2</span>' in pdf_page.text
    assert f'href="{PDF_URI}#page=2"' in pdf_page.text
    assert '<span class="location">cell 3</span>' in notebook_page.text
