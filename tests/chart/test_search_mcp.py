"""The chart fills in the Host values /mcp answers (the Service's DNS names), and its compatibility switches.

The rendered value is then handed to the real app, which must answer a request addressed to the
Service by name and refuse any other host, as it would in the cluster.
"""

from __future__ import annotations

import pytest

from tests.chart.helmchart import (
    NAMESPACE,
    SEARCH,
    assert_schema_rejects,
    container,
    env_of,
    notes,
    render,
    render_ok,
)
from tests.support.mcpclient import ACCEPT, rpc
from tests.support.service import running_service

SERVICE_NAMES = [
    SEARCH,
    f"{SEARCH}.{NAMESPACE}",
    f"{SEARCH}.{NAMESPACE}.svc",
    f"{SEARCH}.{NAMESPACE}.svc.cluster.local",
]


def search_env(*args: str) -> dict[str, dict]:
    manifests = render_ok(*args) if args else render("default")
    return env_of(container(manifests, "Deployment", SEARCH, "search"))


def allowed_hosts(*args: str) -> list[str]:
    return search_env(*args)["SEARCHSVC_MCP_ALLOWED_HOSTS"]["value"].split(",")


def test_the_services_dns_names_are_allowed_with_and_without_its_port():
    hosts = allowed_hosts()
    for name in SERVICE_NAMES:
        assert name in hosts and f"{name}:8000" in hosts
    assert {"127.0.0.1:*", "localhost:*"} <= set(hosts)
    env = search_env()
    assert "SEARCHSVC_MCP_COMPAT_DOTAI" not in env and "SEARCHSVC_MCP_COMPAT_OPENAI" not in env
    assert "SEARCHSVC_DOTAI_API" not in env


def test_the_service_port_extra_hosts_and_cluster_domain_follow_the_values():
    hosts = allowed_hosts(
        "--set",
        "search.service.port=80",
        "--set",
        "search.mcp.extraAllowedHosts={kb.example.com,kb.internal:*}",
        "--set",
        "search.mcp.clusterDomain=corp.local",
    )
    assert f"{SEARCH}.{NAMESPACE}.svc:80" in hosts and f"{SEARCH}.{NAMESPACE}.svc.corp.local:80" in hosts
    assert f"{SEARCH}.{NAMESPACE}.svc:8000" not in hosts
    assert {"kb.example.com", "kb.internal:*"} <= set(hosts)


def test_the_compatibility_switches_set_their_variables():
    env = search_env("--set", "search.mcp.compat.dotAi=true", "--set", "search.mcp.compat.openai=true")
    assert env["SEARCHSVC_MCP_COMPAT_DOTAI"]["value"] == "true"
    assert env["SEARCHSVC_MCP_COMPAT_OPENAI"]["value"] == "true"


def test_dot_ais_rest_routes_follow_their_value():
    env = search_env("--set", "search.dotAi.api=true")
    assert env["SEARCHSVC_DOTAI_API"]["value"] == "true"
    assert_schema_rejects(["--set", "search.dotAi.route=true"], "route")


@pytest.mark.parametrize("bad", ["a,b", "has space", ""])
def test_the_schema_refuses_a_host_that_would_break_the_list(bad):
    assert_schema_rejects(["--set-json", f'search.mcp.extraAllowedHosts=["{bad}"]'], "extraAllowedHosts")


async def test_the_app_answers_the_charts_service_names_and_refuses_other_hosts(tmp_path):
    hosts = ",".join(allowed_hosts())
    async with running_service("edge", tmp_path / "data", mcp_allowed_hosts=hosts) as client:
        for name in SERVICE_NAMES:
            for host in (name, f"{name}:8000"):
                response = await client.post("/mcp", json=rpc("tools/list"), headers={"accept": ACCEPT, "host": host})
                assert response.status_code == 200, (host, response.text)
        for host in ("evil.example", f"{SEARCH}.other-namespace.svc:8000", "10.0.0.7:8000"):
            response = await client.post("/mcp", json=rpc("tools/list"), headers={"accept": ACCEPT, "host": host})
            assert response.status_code == 421, host


async def test_a_lone_star_lets_any_host_through(tmp_path):
    async with running_service("edge", tmp_path / "data", mcp_allowed_hosts="*") as client:
        response = await client.post("/mcp", json=rpc("tools/list"), headers={"accept": ACCEPT, "host": "kb.example"})
        assert response.status_code == 200


def test_the_notes_point_agents_at_the_mcp_endpoint():
    assert f"http://{SEARCH}.{NAMESPACE}.svc:8000/mcp" in notes("default")


def test_every_route_answers_the_same_host_names_as_mcp():
    # An open service (no read token) refuses any other Host on every route, not only /mcp.
    env = search_env()
    assert env["SEARCHSVC_ALLOWED_HOSTS"]["value"] == env["SEARCHSVC_MCP_ALLOWED_HOSTS"]["value"]
