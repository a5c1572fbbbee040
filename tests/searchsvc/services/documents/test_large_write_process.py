"""The real service with the bundled MiniLM: one team's large write does not slow another team down.

Team A writes one large markdown of ordinary words (hundreds of chunks, a minute of embedding on
a busy 2-core machine). Meanwhile team B searches one query at a time and writes one tiny
document. B's search p95 during A's write stays within 3x of B's p95 alone (measured in this
test, before A starts), and B's tiny write ends long before A's. Before query embedding had a lane
of its own and documents were embedded in bounded turns, B's searches and its write each waited
for A's whole document.
"""

from __future__ import annotations

import math
import threading
import time

import httpx
import pytest

from tests.support.ordinary import ordinary_markdown
from tests.support.service_process import REAL_MODEL_START_S, ServiceProcess

A_TOKEN, B_TOKEN = "large-write-team-a-0001", "large-write-team-b-0002"
TOKENS = (
    "tokens:\n"
    f'  - {{name: team-a, token: "{A_TOKEN}", write: true, sources: ["team-a/*"]}}\n'
    f'  - {{name: team-b, token: "{B_TOKEN}", write: true, sources: ["team-b/*"]}}\n'
)
DOCUMENT_BYTES = 300_000  # ~600 chunks: on main, every one of B's searches waited for all of them
SEARCHES_ALONE = 30
TINY = "# Tiny\n\nTeam b feeds the zebrafish at nine.\n"


def bearer(token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


def p95(latencies: list[float]) -> float:
    return sorted(latencies)[math.ceil(0.95 * len(latencies)) - 1]


def search(client: httpx.Client, i: int) -> float:
    started = time.monotonic()
    response = client.post(
        "/api/v1/search", json={"query": f"how does team b restart the zebrafish pump {i}"}, headers=bearer(B_TOKEN)
    )
    elapsed = time.monotonic() - started
    assert response.status_code == 200, response.text
    assert response.json()["results"], "team b's runbooks are found"
    return elapsed


def put(client: httpx.Client, token: str, uri: str, source: str, content: str) -> httpx.Response:
    body = {"uri": uri, "content": content, "metadata": {"sourceIdentifier": source}}
    return client.put("/api/v1/documents", json=body, headers=bearer(token), timeout=900)


@pytest.mark.slow
def test_one_teams_large_write_does_not_stall_another_teams_searches_or_writes(tmp_path):
    (tmp_path / "tokens.yaml").write_text(TOKENS)
    service = ServiceProcess(
        tmp_path / "service.log",
        {"SEARCHSVC_DATA_DIR": str(tmp_path / "data"), "SEARCHSVC_TOKENS_FILE": str(tmp_path / "tokens.yaml")},
        real_model=True,
    ).start()
    try:
        service.wait_ready(REAL_MODEL_START_S)
        with httpx.Client(base_url=service.url, timeout=900) as client:
            for n in range(3):
                text = f"# Runbook {n}\n\nHow team b restarts the zebrafish pump, step {n}.\n"
                assert put(client, B_TOKEN, f"b/runbook{n}.md", "team-b/docs", text).status_code == 200
            for i in range(5):  # warm: first calls pay for lazy set-up
                search(client, -i)
            alone = [search(client, i) for i in range(SEARCHES_ALONE)]

            large = ordinary_markdown(DOCUMENT_BYTES)
            a_result: dict[str, object] = {}

            def team_a() -> None:
                started = time.monotonic()
                with httpx.Client(base_url=service.url, timeout=900) as own:
                    a_result["response"] = put(own, A_TOKEN, "a/handbook.md", "team-a/docs", large)
                a_result["seconds"] = time.monotonic() - started

            def team_b_put() -> None:
                started = time.monotonic()
                with httpx.Client(base_url=service.url, timeout=900) as own:
                    b_result["response"] = put(own, B_TOKEN, "b/tiny.md", "team-b/docs", TINY)
                b_result["seconds"] = time.monotonic() - started

            b_result: dict[str, object] = {}
            writer, tiny = threading.Thread(target=team_a), threading.Thread(target=team_b_put)
            writer.start()
            time.sleep(3)  # A's document is past chunking and being embedded
            tiny.start()
            during: list[float] = []
            while writer.is_alive() and len(during) < 400:
                during.append(search(client, 1000 + len(during)))
            writer.join(timeout=900)
            tiny.join(timeout=900)
            b_response = b_result["response"]
            assert isinstance(b_response, httpx.Response) and b_response.status_code == 200, b_response
            b_put_seconds = float(b_result["seconds"])  # type: ignore[arg-type]
            a_response = a_result["response"]
            assert isinstance(a_response, httpx.Response) and a_response.status_code == 200, a_response
            a_chunks = a_response.json()["chunks"]
            a_seconds = float(a_result["seconds"])  # type: ignore[arg-type]
    finally:
        service.stop()

    figures = (
        f"A: {a_chunks} chunks in {a_seconds:.1f} s; B alone p95 {p95(alone) * 1000:.0f} ms, during A "
        f"p95 {p95(during) * 1000:.0f} ms over {len(during)} searches; B's tiny PUT {b_put_seconds:.1f} s"
    )
    assert a_chunks >= 300, figures
    # 2x held on a busy machine (1.6x at load 8-11); on a quiet one B's query shares the two cores
    # with A's embedding and took 3x (16 ms alone, 48 ms during): the CPU share, not a wait.
    assert p95(during) <= 3 * p95(alone), figures
    assert b_put_seconds <= 0.2 * a_seconds, figures
    assert len(during) >= 10, figures  # B searched all through A's write
