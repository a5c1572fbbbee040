"""Helpers shared by the ask tests: a small corpus, and reading a server-sent event stream."""

from __future__ import annotations

import json
from typing import Any

import httpx

DOCS = {
    "https://git.example/ops/rollback.md": (
        "# Rollbacks\n\n## Rolling back a deployment\n\n"
        "A failed deployment is rolled back with kubectl rollout undo. "
        "The previous ReplicaSet is scaled up again while the new one is scaled down. "
        "Kubernetes keeps ten old revisions of every deployment by default.\n"
    ),
    "https://git.example/ops/canary.md": (
        "# Canary releases\n\n## Shifting traffic\n\n"
        "A canary release sends a small share of the traffic to the new version first. "
        "The share grows while the error rate of the canary stays low. "
        "A canary that fails is stopped before it reaches every user.\n"
    ),
    "https://git.example/kitchen/bread.md": (
        "# Bread\n\n## Baking\n\n"
        "Mix flour, water, yeast and salt, then knead the dough for ten minutes. "
        "Let the dough rise for an hour in a warm place. "
        "Bake the loaf at two hundred and twenty degrees until it sounds hollow.\n"
    ),
}


async def put_docs(client: httpx.AsyncClient, docs: dict[str, str] = DOCS, **headers: str) -> None:
    for uri, content in docs.items():
        body = {"uri": uri, "content": content, "metadata": {"sourceIdentifier": "ops/docs"}}
        response = await client.put("/api/v1/documents", json=body, headers=headers)
        assert response.status_code == 200, response.text


def server_sent_events(text: str) -> list[tuple[str, dict[str, Any]]]:
    """(event, data) pairs of a text/event-stream body, in order."""
    events = []
    for frame in text.split("\n\n"):
        if not frame.strip():
            continue
        fields = dict(line.split(": ", 1) for line in frame.splitlines())
        events.append((fields["event"], json.loads(fields["data"])))
    return events


def tool_result_uris(tool_results: list[str]) -> dict[int, str]:
    """The chunk numbers and URIs the service showed the model: "[n] title > heading — uri" lines."""
    numbered = {}
    for result in tool_results:
        for line in result.splitlines():
            if line.startswith("[") and "] " in line and " — " in line:
                numbered[int(line[1 : line.index("]")])] = line.rsplit(" — ", 1)[1]
    return numbered
