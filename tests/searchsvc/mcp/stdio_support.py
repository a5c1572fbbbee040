"""The stdio bridge as a child process, shared by the stdio tests."""

from __future__ import annotations

import os
import sys

from mcp.client.stdio import StdioServerParameters

from tests.support.service_process import REPO

A_URI, B_URI = "https://git.example/a/stdio.md", "https://git.example/b/stdio.md"
TOKEN_VARIABLE = "KB_TEST_TOKEN"


def bridge_env(token: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != TOKEN_VARIABLE}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "searchsvc"), str(REPO)])
    return env | ({TOKEN_VARIABLE: token} if token is not None else {})


def bridge(service: str, token: str | None) -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "kbsearch.mcp.stdio", "--service", service, "--token-env", TOKEN_VARIABLE],
        env=bridge_env(token),
    )
