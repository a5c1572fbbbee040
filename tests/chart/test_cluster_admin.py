"""What a cluster admin asks of the chart: monitoring, Ingress/HTTPRoute, spreading, rollouts, probes, NOTES.

Each new value is rendered with real helm; the core objects (Deployments, Services, Ingress) are
validated strictly against the Kubernetes schemas. ServiceMonitor, PodMonitor and HTTPRoute are
custom resources the validator has no schema for; their fields are checked here one by one.
"""

from __future__ import annotations

import json

import kubernetes_validate
import pytest

from tests.chart.helmchart import (
    CHART,
    KUBE_VERSION,
    NAMESPACE,
    NO_CLUSTER_OK,
    OPERATOR,
    RELEASE,
    SEARCH,
    assert_schema_rejects,
    container,
    env_of,
    render_error,
    render_ok,
    run_helm,
)

SERVER = ["--set", "store.mode=server"]  # several search replicas need a Qdrant server
INGRESS = [
    "--set",
    "search.ingress.enabled=true",
    "--set",
    "search.ingress.className=nginx",
    "--set",
    "search.ingress.hosts={kb.example.com}",
    "--set-json",
    'search.ingress.tls=[{"hosts":["kb.example.com"],"secretName":"kb-tls"}]',
    "--set",
    "search.trustedProxies=10.0.0.0/8",
]
ROUTE = [
    "--set",
    "search.httpRoute.enabled=true",
    "--set-json",
    'search.httpRoute.parentRefs=[{"name":"public","namespace":"gateways"}]',
    "--set",
    "search.httpRoute.hostnames={kb.example.org}",
    "--set",
    "search.trustedProxies=10.0.0.0/8",
]


def validate_strictly(manifests) -> None:
    for doc in manifests:
        if doc["apiVersion"].startswith(("monitoring.coreos.com/", "gateway.networking.k8s.io/")):
            continue
        kubernetes_validate.validate(doc, KUBE_VERSION, strict=True)


def pod_template(manifests, name: str) -> dict:
    return manifests.one("Deployment", name)["spec"]["template"]


# --- monitoring ----------------------------------------------------------------------------------


def test_service_monitors_scrape_both_programs_and_turn_on_the_operators_metrics_service():
    manifests = render_ok(
        "--set", "monitoring.serviceMonitor.enabled=true", "--set", "monitoring.serviceMonitor.labels.release=prom"
    )
    validate_strictly(manifests)
    monitors = {m["metadata"]["name"]: m for m in manifests.all("ServiceMonitor")}
    assert set(monitors) == {SEARCH, OPERATOR}
    for name, port in ((SEARCH, "metrics"), (OPERATOR, "metrics")):
        spec = monitors[name]["spec"]
        assert monitors[name]["metadata"]["labels"]["release"] == "prom"
        assert spec["endpoints"] == [{"port": port, "path": "/metrics", "interval": "30s", "scrapeTimeout": "10s"}]
        assert spec["namespaceSelector"] == {"matchNames": [NAMESPACE]}
        # The selector picks exactly the Service that has the named port.
        services = [
            s
            for s in manifests.all("Service")
            if spec["selector"]["matchLabels"].items() <= s["metadata"]["labels"].items()
            and port in {p["name"] for p in s["spec"]["ports"]}
        ]
        assert len(services) == 1, (name, [s["metadata"]["name"] for s in services])
    assert f"{OPERATOR}-metrics" in manifests.names("Service")


def test_pod_monitors_select_each_programs_pods_by_their_port():
    manifests = render_ok("--set", "monitoring.podMonitor.enabled=true", "--set", "monitoring.podMonitor.interval=15s")
    monitors = {m["metadata"]["name"]: m["spec"] for m in manifests.all("PodMonitor")}
    assert set(monitors) == {SEARCH, OPERATOR}
    for name, port in ((SEARCH, "metrics"), (OPERATOR, "metrics")):
        template = pod_template(manifests, name)
        assert monitors[name]["selector"]["matchLabels"].items() <= template["metadata"]["labels"].items()
        ports = {p["name"] for c in template["spec"]["containers"] for p in c.get("ports", [])}
        assert monitors[name]["podMetricsEndpoints"][0]["port"] == port and port in ports
        assert monitors[name]["podMetricsEndpoints"][0]["interval"] == "15s"
    assert not manifests.all("ServiceMonitor")


def test_monitoring_is_off_by_default_and_one_kind_at_a_time():
    manifests = render_ok()
    assert not manifests.all("ServiceMonitor") and not manifests.all("PodMonitor")
    error = render_error(
        "--set", "monitoring.serviceMonitor.enabled=true", "--set", "monitoring.podMonitor.enabled=true"
    )
    assert "scraped twice" in error
    assert_schema_rejects(["--set", "monitoring.serviceMonitor.interval=often"], "interval")


# --- Ingress and HTTPRoute -----------------------------------------------------------------------


def test_an_ingress_routes_its_hosts_to_the_service_and_lets_them_reach_mcp():
    manifests = render_ok(*INGRESS)
    validate_strictly(manifests)
    ingress = manifests.one("Ingress", SEARCH)["spec"]
    assert ingress["ingressClassName"] == "nginx"
    assert ingress["tls"] == [{"hosts": ["kb.example.com"], "secretName": "kb-tls"}]
    (rule,) = ingress["rules"]
    assert rule["host"] == "kb.example.com"
    (path,) = rule["http"]["paths"]
    assert path["path"] == "/" and path["backend"]["service"] == {"name": SEARCH, "port": {"name": "http"}}
    env = env_of(container(manifests, "Deployment", SEARCH, "search"))
    assert "kb.example.com" in env["SEARCHSVC_MCP_ALLOWED_HOSTS"]["value"].split(",")
    assert env["SEARCHSVC_TRUSTED_PROXIES"]["value"] == "10.0.0.0/8"


def test_an_httproute_attaches_to_its_gateway_and_lets_its_hostnames_reach_mcp():
    manifests = render_ok(*ROUTE)
    validate_strictly(manifests)
    route = manifests.one("HTTPRoute", SEARCH)
    assert route["apiVersion"] == "gateway.networking.k8s.io/v1"
    spec = route["spec"]
    assert spec["parentRefs"] == [{"name": "public", "namespace": "gateways"}]
    assert spec["hostnames"] == ["kb.example.org"]
    (rule,) = spec["rules"]
    assert rule["matches"] == [{"path": {"type": "PathPrefix", "value": "/"}}]
    assert rule["backendRefs"] == [{"name": SEARCH, "port": 8000}]
    env = env_of(container(manifests, "Deployment", SEARCH, "search"))
    assert "kb.example.org" in env["SEARCHSVC_MCP_ALLOWED_HOSTS"]["value"].split(",")


@pytest.mark.parametrize(
    ("args", "problem"),
    [
        (["--set", "search.ingress.enabled=true", "--set", "search.ingress.hosts={kb.example.com}"], "trustedProxies"),
        (["--set", "search.ingress.enabled=true", "--set", "search.trustedProxies=10.0.0.0/8"], "ingress.hosts"),
        (["--set", "search.httpRoute.enabled=true", "--set", "search.trustedProxies=*"], "parentRefs"),
    ],
)
def test_an_ingress_or_route_that_cannot_work_is_refused_with_what_to_set(args, problem):
    assert problem in render_error(*args)


def test_the_schema_refuses_a_bad_ingress_host():
    args = ["--set", "search.ingress.enabled=true", "--set", "search.trustedProxies=10.0.0.0/8"]
    assert_schema_rejects([*args, "--set-json", 'search.ingress.hosts=["a,b"]'], "hosts")


# --- spreading replicas --------------------------------------------------------------------------


def test_topology_spread_gets_the_search_pods_selector_and_validates():
    manifests = render_ok(
        *SERVER,
        "--set",
        "search.replicas=3",
        "--set-json",
        'search.topologySpreadConstraints=[{"maxSkew":1,"topologyKey":"topology.kubernetes.io/zone",'
        '"whenUnsatisfiable":"ScheduleAnyway"}]',
    )
    validate_strictly(manifests)
    template = pod_template(manifests, SEARCH)
    (constraint,) = template["spec"]["topologySpreadConstraints"]
    assert constraint["topologyKey"] == "topology.kubernetes.io/zone" and constraint["maxSkew"] == 1
    assert constraint["labelSelector"]["matchLabels"].items() <= template["metadata"]["labels"].items()
    assert constraint["labelSelector"]["matchLabels"]["app.kubernetes.io/component"] == "search"


def test_several_replicas_are_spread_over_nodes_and_kept_by_a_disruption_budget_by_default():
    manifests = render_ok(*SERVER, "--set", "search.replicas=3")
    validate_strictly(manifests)
    template = pod_template(manifests, SEARCH)
    (constraint,) = template["spec"]["topologySpreadConstraints"]
    assert constraint["topologyKey"] == "kubernetes.io/hostname"
    assert constraint["whenUnsatisfiable"] == "ScheduleAnyway"  # a one-node cluster still schedules
    assert constraint["labelSelector"]["matchLabels"].items() <= template["metadata"]["labels"].items()
    assert manifests.one("PodDisruptionBudget", SEARCH)["spec"]["maxUnavailable"] == 1


def test_one_replica_gets_neither_a_spread_nor_a_budget_unless_asked():
    manifests = render_ok()
    assert "topologySpreadConstraints" not in pod_template(manifests, SEARCH)["spec"]
    assert manifests.all("PodDisruptionBudget") == []
    # An explicit choice wins either way.
    assert render_ok("--set", "search.podDisruptionBudget.enabled=true").all("PodDisruptionBudget")
    off = render_ok(*SERVER, "--set", "search.replicas=2", "--set", "search.podDisruptionBudget.enabled=false")
    assert off.all("PodDisruptionBudget") == []
    hard = render_ok(*SERVER, "--set", "search.replicas=2", "--set", "search.podAntiAffinity=hard")
    assert "topologySpreadConstraints" not in pod_template(hard, SEARCH)["spec"]


@pytest.mark.parametrize("preset", ["soft", "hard"])
def test_pod_anti_affinity_keeps_replicas_on_different_nodes(preset):
    manifests = render_ok(*SERVER, "--set", "search.replicas=2", "--set", f"search.podAntiAffinity={preset}")
    validate_strictly(manifests)
    template = pod_template(manifests, SEARCH)
    anti = template["spec"]["affinity"]["podAntiAffinity"]
    if preset == "hard":
        (term,) = anti["requiredDuringSchedulingIgnoredDuringExecution"]
    else:
        (weighted,) = anti["preferredDuringSchedulingIgnoredDuringExecution"]
        term = weighted["podAffinityTerm"]
    assert term["topologyKey"] == "kubernetes.io/hostname"
    assert term["labelSelector"]["matchLabels"].items() <= template["metadata"]["labels"].items()


def test_an_explicit_affinity_wins_and_bad_spread_values_are_refused():
    manifests = render_ok("--set", "search.podAntiAffinity=hard", "--set-json", 'search.affinity={"nodeAffinity":{}}')
    assert pod_template(manifests, SEARCH)["spec"]["affinity"] == {"nodeAffinity": {}}
    assert_schema_rejects(["--set", "search.podAntiAffinity=always"], "podAntiAffinity")
    assert_schema_rejects(
        ["--set-json", 'search.topologySpreadConstraints=[{"maxSkew":0,"topologyKey":"z","whenUnsatisfiable":"x"}]'],
        "topologySpreadConstraints",
    )


# --- rollouts, probes ----------------------------------------------------------------------------


def test_a_changed_ssh_known_hosts_rolls_the_operator_and_nothing_else():
    before = render_ok()
    after = render_ok("--set", "operator.ssh.knownHosts=git.example ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIExample")
    key = "checksum/ssh-known-hosts"
    assert (
        pod_template(before, OPERATOR)["metadata"]["annotations"][key]
        != (pod_template(after, OPERATOR)["metadata"]["annotations"][key])
    )
    assert pod_template(before, SEARCH) == pod_template(after, SEARCH)


def test_the_secrets_checksum_names_the_secrets_you_manage_and_is_stable_without_a_cluster():
    plain = pod_template(render_ok(), SEARCH)["metadata"]["annotations"]["checksum/secrets"]
    managed_args = ["--set", "auth.existingSecret=my-tokens"]
    managed = pod_template(render_ok(*managed_args), SEARCH)["metadata"]["annotations"]["checksum/secrets"]
    # A managed Secret joins the checksum (by name here; with a cluster, by its data too).
    assert plain != managed
    assert managed == pod_template(render_ok(*managed_args), SEARCH)["metadata"]["annotations"]["checksum/secrets"]
    operator = pod_template(render_ok(*managed_args), OPERATOR)["metadata"]["annotations"]
    assert operator["checksum/secrets"] == managed  # the operator reads the same token
    with_annotations = render_ok("--set", "search.podAnnotations.team=a")
    assert pod_template(with_annotations, SEARCH)["metadata"]["annotations"]["team"] == "a"


def test_the_operator_has_a_readiness_probe_on_kopfs_health_endpoint():
    manifests = render_ok("--set", "operator.readinessProbe.periodSeconds=7")
    operator = container(manifests, "Deployment", OPERATOR, "operator")
    assert operator["readinessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert operator["readinessProbe"]["periodSeconds"] == 7
    assert_schema_rejects(["--set", "operator.readinessProbe.periodSeconds=0"], "periodSeconds")


def test_the_operators_cache_volume_size_follows_its_value():
    manifests = render_ok("--set", "operator.cacheSizeLimit=5Gi")
    volumes = {v["name"]: v for v in pod_template(manifests, OPERATOR)["spec"]["volumes"]}
    assert volumes["cache"]["emptyDir"]["sizeLimit"] == "5Gi"


# --- NOTES ---------------------------------------------------------------------------------------


def test_notes_point_to_the_docs_the_console_and_ask_knowledge():
    args = ["--namespace", NAMESPACE, "--dry-run=client", "--output", "json", *NO_CLUSTER_OK, *INGRESS]
    result = run_helm("install", RELEASE, str(CHART), *args)
    assert result.returncode == 0, result.stderr
    text = json.loads(result.stdout)["info"]["notes"]
    assert "docs/operations/install.md" in text and "README" not in text
    assert "ask_knowledge" in text and f"http://{SEARCH}.{NAMESPACE}.svc:8000/ui/" in text
    assert "the same paths on kb.example.com (/ui/, /mcp, /api/v1/)" in text
