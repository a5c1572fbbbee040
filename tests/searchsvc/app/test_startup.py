"""`python -m kbsearch` refuses settings that would leave writes open or refuse every write."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from kbsearch.settings import Settings
from tests.support.mcpclient import ACCEPT, rpc
from tests.support.service_process import ServiceProcess, free_port, run_to_exit

SECRET = "zq-3f9a1c"  # its tail, 3f9a1c, must never be printed

UNUSABLE_TOKENS = {
    "empty": "",
    "trailing newline": SECRET + "\n",
    "leading space": " " + SECRET,
    "not ASCII": SECRET + "é",
    "control character": "zq-\x1b3f9a1c",
}


@pytest.mark.parametrize("variable", ["SEARCHSVC_API_TOKEN", "SEARCHSVC_READ_TOKEN"])
@pytest.mark.parametrize("case", sorted(UNUSABLE_TOKENS))
def test_an_unusable_token_stops_start_up_naming_the_variable_not_the_value(tmp_path, variable, case):
    settings = {"SEARCHSVC_API_TOKEN": "a-good-write-token", variable: UNUSABLE_TOKENS[case]}
    child = run_to_exit(SEARCHSVC_PORT=str(free_port()), SEARCHSVC_DATA_DIR=str(tmp_path), **settings)
    assert child.returncode == 2, child.stderr
    assert f"{variable}:" in child.stderr
    assert "3f9a1c" not in child.stderr + child.stdout and "a-good" not in child.stderr + child.stdout


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "10.1.2.3", "search.example"])
def test_a_reachable_address_without_a_write_token_stops_start_up(tmp_path, host):
    child = run_to_exit(SEARCHSVC_HOST=host, SEARCHSVC_PORT=str(free_port()), SEARCHSVC_DATA_DIR=str(tmp_path))
    assert child.returncode == 2, child.stderr
    assert "SEARCHSVC_API_TOKEN" in child.stderr and "SEARCHSVC_ALLOW_UNAUTHENTICATED_WRITES=true" in child.stderr


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.53", "::1", "localhost"])
def test_loopback_addresses_may_run_with_open_writes(host):
    assert Settings(host=host).auth.api_token is None


def test_open_writes_on_a_reachable_address_need_an_explicit_yes():
    with pytest.raises(ValidationError):
        Settings(host="0.0.0.0")
    assert Settings(host="0.0.0.0", allow_unauthenticated_writes=True).auth.api_token is None
    assert Settings(host="0.0.0.0", api_token="a-good-write-token").auth.api_token is not None


def test_validation_errors_never_show_a_token(monkeypatch):
    monkeypatch.setenv("SEARCHSVC_API_TOKEN", SECRET + "\n")
    with pytest.raises(ValidationError) as caught:
        Settings()
    assert SECRET not in str(caught.value) and SECRET not in repr(caught.value)


def test_start_up_ends_with_one_line_naming_the_console_mcp_and_the_api(tmp_path):
    process = ServiceProcess(tmp_path / "service.log", {"SEARCHSVC_DATA_DIR": str(tmp_path / "data")}).start()
    try:
        process.wait_ready()
        base = f"http://127.0.0.1:{process.port}"
        named = {
            "console": process.client.get("/ui/", follow_redirects=True),
            "mcp": process.client.post("/mcp", json=rpc("tools/list"), headers={"accept": ACCEPT}),
            "reference": process.client.get("/docs"),
        }
        entries = [json.loads(line) for line in process.log_text().splitlines() if line.startswith("{")]
    finally:
        process.stop()
    # Nothing is served before start-up is over: the line comes before the first request's.
    first_request = next(i for i, e in enumerate(entries) if e["message"] == "request")
    line = entries[first_request - 1]
    assert line["message"] == (
        f"serving: console {base}/ui/ - MCP {base}/mcp - API {base}/api/v1 (reference {base}/docs)"
    )
    assert (line["console"], line["mcp"], line["api"]) == (f"{base}/ui/", f"{base}/mcp", f"{base}/api/v1")
    assert sum(e["message"].startswith("serving: ") for e in entries) == 1
    assert all(response.status_code == 200 for response in named.values()), named
    # Start-up says nothing twice: the two MCP session managers start silently.
    assert not [e for e in entries[:first_request] if e["logger"].startswith("mcp.")]
