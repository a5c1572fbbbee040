"""Extractive ask with the real bundled MiniLM: the question's answer is in one document, and it is cited."""

from __future__ import annotations

import pytest

from kbsearch.services.answers.ask import NOTHING_FOUND
from tests.support.service import running_service

DOCS = {
    "https://git.example/ops/rollback.md": (
        "# Rollbacks\n\n## Undoing a release\n\n"
        "When a new version misbehaves, run kubectl rollout undo to return the deployment to its previous "
        "revision. The earlier ReplicaSet is scaled back up while the faulty one is scaled down. "
        "Kubernetes keeps ten old revisions of every deployment unless revisionHistoryLimit says otherwise.\n"
    ),
    "https://git.example/ops/certificates.md": (
        "# Certificates\n\n## Renewal\n\n"
        "cert-manager renews a certificate thirty days before it expires. "
        "The renewed key pair is written to the same Secret, and ingress controllers reload it on their own. "
        "An expired certificate makes browsers refuse the connection.\n"
    ),
    "https://git.example/ops/autoscaling.md": (
        "# Autoscaling\n\n## Horizontal scaling\n\n"
        "The HorizontalPodAutoscaler adds replicas when the average CPU use passes its target. "
        "It removes them again after the load has stayed low for five minutes. "
        "Set resource requests on every container, or the autoscaler has nothing to compare against.\n"
    ),
    "https://git.example/kitchen/bread.md": (
        "# Bread\n\n## Baking\n\n"
        "Mix flour, water, yeast and salt, then knead the dough for ten minutes. "
        "Let the dough rise for an hour in a warm place. "
        "Bake the loaf at two hundred and twenty degrees until it sounds hollow.\n"
    ),
}
ROLLBACK = "https://git.example/ops/rollback.md"


@pytest.mark.slow
async def test_a_question_answered_by_one_document_cites_that_document(tmp_path, minilm):
    async with running_service("edge", tmp_path / "data", embedder=minilm) as client:
        for uri, content in DOCS.items():
            response = await client.put("/api/v1/documents", json={"uri": uri, "content": content})
            assert response.status_code == 200, response.text
        # Paraphrased: "go back", "broken", "earlier version" are not the document's words.
        response = await client.post(
            "/api/v1/ask", json={"question": "How can I go back to the earlier version after a broken release?"}
        )
        unrelated = await client.post("/api/v1/ask", json={"question": "Who won the football world cup in 1998?"})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["mode"] == "extractive" and body["grounded"] is True
    assert {c["uri"] for c in body["citations"]} == {ROLLBACK}
    assert "kubectl rollout undo" in body["answer"]
    assert body["citations"][0]["quote"] in DOCS[ROLLBACK]
    # Retrieved, but no sentence is close enough to the question: said plainly, nothing cited.
    assert unrelated.json()["answer"] == NOTHING_FOUND
    assert unrelated.json()["grounded"] is False and unrelated.json()["sourcesRetrieved"]
