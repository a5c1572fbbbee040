"""One extractive answer on every face: REST `/api/v1/ask`, the MCP `ask_knowledge` tool and the console's
ask panel show the same text and the same citations, numbered [1], [2], ... in the order the answer reads
them, against one real service process (the hashing embedder; every retrieved chunk counts as relevant)."""

from __future__ import annotations

import asyncio
import html
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.mcpclient import mcp_client, text_of
from tests.support.service_process import ServiceProcess

DOCS = {
    "https://git.example/ops/faq.md": (
        "# FAQ\n\n## Installing\n\n"
        "Argo CD installs into its own namespace, and most teams keep it in the one called argocd.\n"
        "Installing Argo CD twice into one cluster is not supported.\n"
    ),
    "https://git.example/ops/install.md": (
        "# Getting started\n\n## Install Argo CD\n\nCreate the namespace and apply the manifests:\n\n"
        "```bash\nkubectl create namespace argocd\n"
        "kubectl apply -n argocd -f https://raw.githubusercontent.com/argoproj/argo-cd/stable/manifests/install.yaml\n"
        "```\n"
    ),
    "https://git.example/kitchen/bread.md": "# Bread\n\n## Baking\n\nKnead the dough for ten minutes.\n",
}
QUESTION = "How do I install Argo CD into the argocd namespace?"


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceProcess]:
    root: Path = tmp_path_factory.mktemp("faces")
    settings = {"SEARCHSVC_DATA_DIR": str(root / "data"), "SEARCHSVC_RELEVANCE_THRESHOLD": "0"}
    process = ServiceProcess(root / "service.log", settings).start()
    try:
        process.wait_ready()
        for uri, content in DOCS.items():
            body = {"uri": uri, "content": content, "metadata": {"sourceIdentifier": "ops/docs"}}
            assert process.client.put("/api/v1/documents", json=body).status_code == 200
        yield process
    finally:
        process.stop()


def markers(text: str) -> list[int]:
    return [int(n) for n in re.findall(r"\[(\d{1,3})\]", text)]


def test_rest_mcp_and_the_console_show_the_same_answer_cited_in_reading_order(service):
    rest = service.client.post("/api/v1/ask", json={"question": QUESTION}).json()
    answer = rest["answer"]
    assert rest["grounded"] is True and "kubectl apply -n argocd" in answer  # the how-to answer holds the command
    first_seen = list(dict.fromkeys(markers(answer)))
    assert first_seen == list(range(1, len(first_seen) + 1))  # [1] is read first, then [2]...
    assert [c["n"] for c in rest["citations"]] == first_seen
    # One numbering everywhere: the searches' refs and sources name the same chunks by the same numbers.
    by_n = {s["n"]: s["uri"] for s in rest["sourcesRetrieved"]} | {c["n"]: c["uri"] for c in rest["citations"]}
    assert sorted(by_n) == list(range(1, len(by_n) + 1))
    streamed = service.client.post("/api/v1/ask", json={"question": QUESTION, "stream": True}).text
    sources = {
        int(n): uri
        for n, uri in re.findall(r'"n":(\d+),"id":"[^"]*","uri":"([^"]+)"', streamed.split("event: delta")[0])
    }
    assert sources and all(by_n[n] == uri for n, uri in sources.items())

    async def over_mcp() -> tuple[bool, str, dict]:
        async with mcp_client(str(service.client.base_url)) as client:
            result = await client.call_tool("ask_knowledge", {"question": QUESTION})
            return result.is_error, text_of(result), result.structured_content

    is_error, text, structured = asyncio.run(over_mcp())
    assert not is_error, text
    assert structured["answer"] == answer and [c["n"] for c in structured["citations"]] == first_seen
    assert text.startswith(answer + "\n\nCitations:\n")

    page = service.client.get("/ui/")
    csrf = re.search(r'name="csrf_token" value="([^"]+)"', page.text).group(1)
    panel = service.client.post(
        "/ui/ask", data={"question": QUESTION, "csrf_token": csrf}, headers={"HX-Request": "true"}
    ).text
    shown = re.search(r'<div class="answer">(.*?)</div>', panel, re.S).group(1)
    chips = [int(n) for n in re.findall(r'<a class="chip"[^>]*>(\d+)</a>', shown)]
    assert chips == markers(re.sub(r"```.*?```", "", answer, flags=re.S))
    as_text = html.unescape(re.sub(r'<a class="chip"[^>]*>(\d+)</a>', r"[\1]", shown))
    for line in answer.replace("```bash\n", "").replace("```", "").split("\n"):
        assert line.strip() in as_text
