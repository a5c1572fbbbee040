"""The real service under one team's slow documents: another team's searches, writes and the probes go on.

Team A sends forty long PDFs at once (retrying on 429, as the operator does); each holds a
conversion until the (lowered) conversion time limit ends it. A's documents take turns among
themselves, one conversion at a time (its share of the two slots), so A's queue lasts many times
longer than anything team B waits: B's searches, its own PDF and markdown writes and /readyz all
answer within seconds throughout. Every A document ends 200 or 422 with a stable code, and a
refused one is not stored at all.
"""

from __future__ import annotations

import base64
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx

from tests.support.formatfiles import long_pdf, pdf_pages
from tests.support.service_process import ServiceProcess

TOKEN = "budget-test-token-0123456789"
AUTH = {"authorization": f"Bearer {TOKEN}"}
A_DOCUMENTS = 40  # more than the shared pool's 40 threads, past A's 32 queued writes (it retries on 429)
WALL_SECONDS = 2  # the conversion limit: each of A's documents holds its slot this long
PROMPT_S = 5.0  # what B may wait for a search, a markdown write or /readyz, even on a loaded machine
B_PDF_S = 20.0  # B's own one-page PDF: a conversion of its own, never behind A's queue
REFUSED_CODES = {"CONVERSION_LIMIT_EXCEEDED", "DOCUMENT_TOO_COMPLEX"}


def put(client: httpx.Client, uri: str, source: str, content: str, encoding: str = "utf-8") -> httpx.Response:
    body = {
        "uri": uri,
        "content": content,
        "contentEncoding": encoding,
        "metadata": {"sourceIdentifier": source},
    }
    return client.put("/api/v1/documents", json=body, headers=AUTH, timeout=600)


def put_until_taken(client: httpx.Client, uri: str, source: str, content: str, encoding: str) -> httpx.Response:
    """A PUT retried after its Retry-After while the writer's queue is full (429), for at most 10 minutes."""
    end = time.monotonic() + 600
    while True:
        response = put(client, uri, source, content, encoding)
        if response.status_code != 429 or time.monotonic() > end:
            return response
        time.sleep(float(response.headers.get("retry-after", "1")))


def timed(call) -> tuple[float, httpx.Response]:  # type: ignore[no-untyped-def]
    started = time.monotonic()
    response = call()
    return time.monotonic() - started, response


def test_one_teams_slow_conversions_never_stall_another_team_or_the_probes(tmp_path):
    slow = base64.b64encode(long_pdf(1500)).decode()
    small = base64.b64encode(pdf_pages("team b quarterly plans for the zebrafish tank")).decode()
    service = ServiceProcess(
        tmp_path / "service.log",
        {
            "SEARCHSVC_DATA_DIR": str(tmp_path / "data"),
            "SEARCHSVC_API_TOKEN": TOKEN,
            "SEARCHSVC_CONVERT_WALL_SECONDS": str(WALL_SECONDS),
            "SEARCHSVC_CONVERT_CONCURRENCY": "2",
        },
    ).start()
    try:
        service.wait_ready()
        client = httpx.Client(base_url=service.url, timeout=600)
        for n in range(3):
            text = f"# Runbook {n}\n\nHow team b restarts the zebrafish pump, step {n}.\n"
            assert put(client, f"b/runbook{n}.md", "team-b/docs", text).status_code == 200

        a_answers: list[httpx.Response] = []
        a_started = time.monotonic()
        with ThreadPoolExecutor(A_DOCUMENTS) as pool:
            a_futures = [
                pool.submit(put_until_taken, client, f"a/slow{n}.pdf", "team-a/docs", slow, "base64")
                for n in range(A_DOCUMENTS)
            ]
            time.sleep(WALL_SECONDS)  # A's queue has formed
            b_waits: dict[str, list[float]] = {"search": [], "readyz": [], "write": [], "pdf": []}
            b_pdf: list[httpx.Response] = []

            def b_pdf_write() -> None:
                wait, response = timed(lambda: put(client, "b/plans.pdf", "team-b/docs", small, "base64"))
                b_waits["pdf"].append(wait)
                b_pdf.append(response)

            writer = threading.Thread(target=b_pdf_write)
            writer.start()
            n = 0
            while not all(f.done() for f in a_futures):
                wait, found = timed(
                    lambda: client.post("/api/v1/search", json={"query": "zebrafish pump"}, headers=AUTH)
                )
                assert found.status_code == 200 and found.json()["results"], found.text
                b_waits["search"].append(wait)
                wait, ready = timed(lambda: client.get("/readyz"))
                assert ready.status_code == 200, ready.text
                b_waits["readyz"].append(wait)
                if n % 5 == 0:
                    text = f"# Note {n}\n\nTeam b writes while team a waits, note {n}.\n"
                    wait, written = timed(lambda: put(client, f"b/note{n}.md", "team-b/docs", text))  # noqa: B023
                    assert written.status_code == 200, written.text
                    b_waits["write"].append(wait)
                n += 1
                time.sleep(0.2)
            a_answers = [f.result() for f in a_futures]
            a_elapsed = time.monotonic() - a_started
            writer.join(60)

        slowest = {kind: max(waits) for kind, waits in b_waits.items() if waits}
        assert slowest["search"] < PROMPT_S and slowest["readyz"] < PROMPT_S and slowest["write"] < PROMPT_S, slowest
        # B's PDF is answered by its own conversion, not after A's queue (on a loaded machine even
        # one page may pass the lowered limit: then it too is refused, promptly and with its code).
        assert b_pdf and slowest["pdf"] < B_PDF_S, slowest
        assert b_pdf[0].status_code == 200 or b_pdf[0].json()["error"]["code"] in REFUSED_CODES, b_pdf[0].text
        # A's documents took their turns one after another: its queue lasted far longer than any B wait.
        assert a_elapsed > 3 * max(slowest["search"], slowest["readyz"], slowest["write"]), (a_elapsed, slowest)
        refused = []
        for n, answer in enumerate(a_answers):
            assert answer.status_code in (200, 422), answer.text
            if answer.status_code == 422:
                assert answer.json()["error"]["code"] in REFUSED_CODES, answer.text
                refused.append(f"a/slow{n}.pdf")
        for uri in refused:  # nothing half-stored
            assert client.get("/api/v1/documents/text", params={"uri": uri}, headers=AUTH).status_code == 404
        listed = client.get("/api/v1/documents", params={"sourceIdentifier": "team-a/docs"}, headers=AUTH).json()
        assert len(listed["documents"]) == A_DOCUMENTS - len(refused)
        client.close()
    finally:
        service.stop()
