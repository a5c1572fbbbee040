"""The MCP Inspector CLI (npm @modelcontextprotocol/inspector, pinned in hack/mcp-inspector) against
the service as a real process: a client nobody here wrote connects, lists, calls and is refused as
the Python SDK is in test_mcp.py. `make mcp-inspector` installs it; the test never skips."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.scoped_access import A_DOCS, ADMIN, B_DOCS, TEAM_A, TOKENS, bearer, content
from tests.support.service_process import REPO, ServiceProcess

DEFAULT_INSPECTOR = REPO / ".tools" / "mcp-inspector" / "node_modules" / ".bin" / "mcp-inspector"


def inspector() -> str:
    path = Path(os.environ.get("KB_MCP_INSPECTOR") or DEFAULT_INSPECTOR)
    if not path.exists() or shutil.which("node") is None:
        pytest.fail(f"the MCP Inspector CLI is not at {path} (or node is missing): run `make mcp-inspector`")
    return str(path)


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceProcess]:
    root: Path = tmp_path_factory.mktemp("inspector")
    (root / "tokens.yaml").write_text(TOKENS)
    env = {"SEARCHSVC_DATA_DIR": str(root / "data"), "SEARCHSVC_TOKENS_FILE": str(root / "tokens.yaml")}
    process = ServiceProcess(root / "service.log", env).start()
    try:
        process.wait_ready()
        for uri, source in {**A_DOCS, **B_DOCS}.items():
            body = {"uri": uri, "content": content(uri, source), "metadata": {"sourceIdentifier": source}}
            assert process.client.put("/api/v1/documents", json=body, headers=bearer(ADMIN)).status_code == 200
        yield process
    finally:
        process.stop()


def run(service: ServiceProcess, *args: str, token: str | None) -> tuple[int, Any, str]:
    """One Inspector CLI call: its exit code, its JSON output (or the raw text) and stderr."""
    command = [inspector(), "--cli", f"http://127.0.0.1:{service.port}/mcp", *args]
    if token is not None:
        command += ["--header", f"Authorization: Bearer {token}"]
    else:
        command += ["--stored-auth-only"]  # report the 401, never start an interactive OAuth flow
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False, stdin=subprocess.DEVNULL)
    try:
        return done.returncode, json.loads(done.stdout), done.stderr
    except json.JSONDecodeError:
        return done.returncode, done.stdout, done.stderr


def test_tools_are_listed_by_what_the_token_may_do(service: ServiceProcess) -> None:
    code, admin, err = run(service, "--method", "tools/list", token=ADMIN)
    assert code == 0, err
    admin_tools = {tool["name"] for tool in admin["tools"]}
    assert {"search_knowledge", "fetch_document", "ask_knowledge", "ingest_document"} <= admin_tools
    code, reader, err = run(service, "--method", "tools/list", token=TEAM_A)
    assert code == 0, err
    assert "ingest_document" not in {tool["name"] for tool in reader["tools"]}  # a read-only token


def test_a_search_call_returns_only_what_the_scope_allows(service: ServiceProcess) -> None:
    args = ["--method", "tools/call", "--tool-name", "search_knowledge", "--tool-arg", "query=zebrafish secrets"]
    code, found, err = run(service, *args, "limit=10", token=TEAM_A)
    assert code == 0, err
    results = found["structuredContent"]["results"]
    assert results and {r["metadata"]["sourceIdentifier"] for r in results} == {"team-a/docs"}
    assert "zebrafish" not in json.dumps(results)  # nothing of team b's (the query itself is echoed back)


def test_bad_arguments_and_missing_tokens_are_clear_errors(service: ServiceProcess) -> None:
    args = ["--method", "tools/call", "--tool-name", "search_knowledge", "--tool-arg", "query=deploys", "limit=500"]
    code, refused, _ = run(service, *args, token=TEAM_A)
    assert code != 0
    assert refused["isError"] is True
    assert refused["content"][0]["text"].startswith("INVALID_ARGUMENT: limit: ")
    code, _, err = run(service, "--method", "tools/list", token=None)
    assert code != 0
    # The Inspector reports the service's own refusal, with its stable code.
    assert '\\"code\\":\\"UNAUTHENTICATED\\"' in err and "needs a bearer token" in err


def test_resources_the_viewer_and_the_prompt_are_served_to_the_inspector(service: ServiceProcess) -> None:
    code, listed, err = run(service, "--method", "resources/list", token=TEAM_A)
    assert code == 0, err
    assert {r["uri"]: r["mimeType"] for r in listed["resources"]} == {
        "kb://sources": "application/json",
        "ui://knowledge-base/citations.html": "text/html;profile=mcp-app",
    }
    code, read, err = run(service, "--method", "resources/read", "--uri", "kb://sources", token=TEAM_A)
    assert code == 0, err
    body = json.loads(read["contents"][0]["text"])
    assert {s["sourceIdentifier"] for s in body["sources"]} == {"team-a/docs"}  # the caller's scope
    code, viewer, err = run(
        service, "--method", "resources/read", "--uri", "ui://knowledge-base/citations.html", token=TEAM_A
    )
    assert code == 0, err
    assert "ui/notifications/tool-result" in viewer["contents"][0]["text"]
    args = ["--method", "prompts/get", "--prompt-name", "answer_with_citations", "--prompt-args", "question=How?"]
    code, prompt, err = run(service, *args, token=TEAM_A)
    assert code == 0, err
    assert "resolve_sources" in prompt["messages"][0]["content"]["text"]
    code, tools, err = run(service, "--method", "tools/list", token=TEAM_A)
    assert code == 0, err
    ask = next(t for t in tools["tools"] if t["name"] == "ask_knowledge")
    assert ask["_meta"]["ui"]["resourceUri"] == "ui://knowledge-base/citations.html"
