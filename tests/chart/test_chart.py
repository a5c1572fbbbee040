"""The Helm chart: lint, render every scenario, validate strictly, and prove least privilege and hardening."""

from __future__ import annotations

import copy
import json
import re
import shlex
import textwrap

import jsonschema
import kubernetes_validate
import pytest
import yaml

from tests.chart.helmchart import (
    CHART,
    KUBE_VERSION,
    NAMESPACE,
    OPERATOR,
    QDRANT,
    REPO,
    SCENARIOS,
    SEARCH,
    TOKENS,
    assert_schema_rejects,
    container,
    env_of,
    notes,
    render,
    render_error,
    render_ok,
    run_helm,
    values_args,
)
from tests.chart.support import crd_schema

ALL = sorted(SCENARIOS)
KS_GROUP = "kb.knowledgebase.dev"

# The operator's complete permissions inside a namespace it serves, as (group, resource, verbs).
OPERATOR_RULES = {
    (KS_GROUP, "knowledgesources", ("get", "list", "patch", "watch")),
    (KS_GROUP, "knowledgesources/status", ("patch",)),
    ("", "events", ("create",)),
    ("", "secrets", ("get",)),
}
CRD_WATCH = ("apiextensions.k8s.io", "customresourcedefinitions", ("list", "watch"))
NAMESPACE_WATCH = ("", "namespaces", ("list", "watch"))


def rule_set(role: dict) -> set[tuple[str, str, tuple[str, ...]]]:
    """Flatten rules to (group, resource, sorted verbs); a rule must not carry resourceNames or URLs."""
    out = set()
    for rule in role["rules"]:
        assert set(rule) == {"apiGroups", "resources", "verbs"}, rule
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                out.add((group, resource, tuple(sorted(rule["verbs"]))))
    return out


def workload_containers(spec: dict) -> list[dict]:
    return [*spec.get("initContainers", []), *spec["containers"]]


# --- lint, render, validate ---------------------------------------------------------------


@pytest.mark.parametrize("scenario", ALL)
def test_helm_lint_strict(scenario: str) -> None:
    result = run_helm("lint", "--strict", str(CHART), "--namespace", NAMESPACE, *values_args(scenario))
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("scenario", ALL)
def test_every_manifest_validates_strictly(scenario: str) -> None:
    manifests = render(scenario)
    assert len(manifests.docs) >= 8
    for doc in manifests:
        where = f"{doc['kind']}/{doc['metadata']['name']}"
        try:
            kubernetes_validate.validate(doc, KUBE_VERSION, strict=True)
        except kubernetes_validate.SchemaNotFoundError as exc:  # pragma: no cover - a failure path
            pytest.fail(f"{where}: no schema to validate against: {exc.message}")
        except kubernetes_validate.ValidationError as exc:  # pragma: no cover - a failure path
            path = ".".join(str(p) for p in exc.path)
            pytest.fail(f"{where} is invalid for Kubernetes {KUBE_VERSION}: {path}: {exc.message}")


def test_the_validator_is_strict() -> None:
    """A guard on the guard: an unknown field in a pod spec must be rejected."""
    deployment = copy.deepcopy(render("default").one("Deployment", SEARCH))
    kubernetes_validate.validate(deployment, KUBE_VERSION, strict=True)
    deployment["spec"]["template"]["spec"]["containers"][0]["readOnlyRootFS"] = True
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, KUBE_VERSION, strict=True)


@pytest.mark.parametrize(
    ("scenario", "present", "absent"),
    [
        ("default", {"PersistentVolumeClaim", "ClusterRole", "Secret"}, {"StatefulSet", "Role", "NetworkPolicy"}),
        ("embedded", {"PersistentVolumeClaim", "PodDisruptionBudget", "Service"}, {"StatefulSet"}),
        ("qdrant-server", {"StatefulSet", "NetworkPolicy", "PodDisruptionBudget"}, {"PersistentVolumeClaim"}),
        ("external-openai", {"Deployment"}, {"StatefulSet", "Secret", "PersistentVolumeClaim"}),
        ("namespaced-netpol", {"Role", "RoleBinding", "NetworkPolicy"}, {"StatefulSet"}),
        ("kubernetes-auth", {"ClusterRoleBinding", "NetworkPolicy", "Secret"}, {"StatefulSet", "RoleBinding"}),
    ],
)
def test_scenario_renders_its_objects(scenario: str, present: set[str], absent: set[str]) -> None:
    kinds = {doc["kind"] for doc in render(scenario)}
    assert present <= kinds
    assert not absent & kinds


def test_namespaced_objects_carry_the_release_namespace() -> None:
    cluster_scoped = {"ClusterRole", "ClusterRoleBinding", "CustomResourceDefinition"}
    for scenario in ALL:
        for doc in render(scenario):
            if doc["kind"] in cluster_scoped:
                assert "namespace" not in doc["metadata"]
            elif doc["kind"] not in ("Role", "RoleBinding"):
                assert doc["metadata"]["namespace"] == NAMESPACE, doc["metadata"]


# --- RBAC ---------------------------------------------------------------------------------


@pytest.mark.parametrize("scenario", ALL)
def test_rbac_has_no_wildcards_and_secrets_are_get_only(scenario: str) -> None:
    manifests = render(scenario)
    roles = manifests.all("Role") + manifests.all("ClusterRole")
    assert roles
    for role in roles:
        for rule in role["rules"]:
            for field in ("apiGroups", "resources", "verbs"):
                assert "*" not in rule[field], (role["metadata"]["name"], rule)
            if "secrets" in rule["resources"]:
                assert rule["verbs"] == ["get"], rule
                assert rule["resources"] == ["secrets"], "secrets share no rule with other resources"
    # Nothing in the chart is ever bound to a built-in role such as cluster-admin or edit; the one
    # built-in role, system:auth-delegator, goes to the search service in auth.mode=kubernetes only.
    for binding in manifests.all("RoleBinding") + manifests.all("ClusterRoleBinding"):
        if binding["roleRef"]["name"] == "system:auth-delegator":
            assert scenario == "kubernetes-auth" and binding["kind"] == "ClusterRoleBinding"
            assert binding["subjects"] == [{"kind": "ServiceAccount", "name": SEARCH, "namespace": NAMESPACE}]
            continue
        assert binding["roleRef"]["name"].startswith(OPERATOR)
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": OPERATOR, "namespace": NAMESPACE}]


def test_cluster_wide_rbac_is_exactly_the_operators_needs() -> None:
    manifests = render("default")
    role = manifests.one("ClusterRole", OPERATOR)
    assert rule_set(role) == OPERATOR_RULES | {CRD_WATCH}
    binding = manifests.one("ClusterRoleBinding", OPERATOR)
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": OPERATOR}
    assert manifests.all("Role") == [] and manifests.all("RoleBinding") == []
    env = env_of(container(manifests, "Deployment", OPERATOR, "operator"))
    assert env["KBOPERATOR_NAMESPACES"]["value"] == ""


def test_namespaced_rbac_keeps_secrets_to_the_watched_namespaces() -> None:
    manifests = render("namespaced-netpol")
    roles = {r["metadata"]["namespace"]: r for r in manifests.all("Role")}
    assert set(roles) == {"team-a", "team-b"}
    for role in roles.values():
        assert role["metadata"]["name"] == OPERATOR
        assert rule_set(role) == OPERATOR_RULES
    bindings = {b["metadata"]["namespace"]: b for b in manifests.all("RoleBinding")}
    assert set(bindings) == {"team-a", "team-b"}
    for binding in bindings.values():
        assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": OPERATOR}
    # The only cluster-wide grant is kopf's discovery: names of namespaces and CRDs, no Secrets.
    (cluster_role,) = manifests.all("ClusterRole")
    assert cluster_role["metadata"]["name"] == f"{OPERATOR}-discovery"
    assert rule_set(cluster_role) == {CRD_WATCH, NAMESPACE_WATCH}
    (cluster_binding,) = manifests.all("ClusterRoleBinding")
    assert cluster_binding["roleRef"]["name"] == f"{OPERATOR}-discovery"
    env = env_of(container(manifests, "Deployment", OPERATOR, "operator"))
    assert env["KBOPERATOR_NAMESPACES"]["value"] == "team-a,team-b"


def test_namespaced_rbac_without_discovery_has_no_cluster_grants() -> None:
    manifests = render_ok(*values_args("namespaced-netpol"), "--set", "operator.rbac.discovery=false")
    assert manifests.all("ClusterRole") == [] and manifests.all("ClusterRoleBinding") == []
    assert len(manifests.all("Role")) == 2


def test_only_the_operator_gets_a_service_account_token() -> None:
    """And the search service, in auth.mode=kubernetes only: it sends TokenReviews then."""
    for scenario in ALL:
        manifests = render(scenario)
        for name, _, spec in manifests.pod_specs():
            expected = name == f"Deployment/{OPERATOR}" or (
                scenario == "kubernetes-auth" and name == f"Deployment/{SEARCH}"
            )
            assert spec["automountServiceAccountToken"] is expected, name
        assert manifests.one("ServiceAccount", SEARCH)["automountServiceAccountToken"] is False
        assert manifests.one("Deployment", OPERATOR)["spec"]["template"]["spec"]["serviceAccountName"] == OPERATOR


# --- hardening ----------------------------------------------------------------------------


@pytest.mark.parametrize("scenario", ALL)
def test_every_pod_and_container_is_hardened(scenario: str) -> None:
    pods = render(scenario).pod_specs()
    assert len(pods) >= 3  # operator, search, helm test (and Qdrant when in the chart)
    for name, _, spec in pods:
        pod_sc = spec["securityContext"]
        assert pod_sc["runAsNonRoot"] is True, name
        assert pod_sc["runAsUser"] > 0, name
        assert pod_sc["seccompProfile"] == {"type": "RuntimeDefault"}, name
        assert not spec.get("hostNetwork") and not spec.get("hostPID") and not spec.get("hostIPC"), name
        for c in workload_containers(spec):
            where = f"{name}/{c['name']}"
            sc = c["securityContext"]
            assert sc["runAsNonRoot"] is True, where
            assert sc["runAsUser"] > 0, where
            assert sc["allowPrivilegeEscalation"] is False, where
            assert sc["privileged"] is False, where
            assert sc["readOnlyRootFilesystem"] is True, where
            assert sc["capabilities"] == {"drop": ["ALL"]}, where
            assert sc["seccompProfile"] == {"type": "RuntimeDefault"}, where
            resources = c["resources"]
            assert {"cpu", "memory"} <= set(resources["requests"]), where
            assert {"cpu", "memory"} <= set(resources["limits"]), where
            assert "@" in c["image"] or re.search(r":[^/:]+$", c["image"]), f"{where}: image without a tag"
            assert not c["image"].endswith(":latest"), where


@pytest.mark.parametrize("scenario", ALL)
def test_writable_paths_are_volumes(scenario: str) -> None:
    """With a read-only root, /tmp and every cache must be a mounted volume."""
    manifests = render(scenario)
    for name, _, spec in manifests.pod_specs():
        if name.startswith("Pod/"):
            continue  # the test pod writes nothing (wget -O -)
        volumes = {v["name"]: v for v in spec["volumes"]}
        for c in spec["containers"]:
            mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
            assert "emptyDir" in volumes[mounts["/tmp"]], f"{name}: /tmp is not an emptyDir"
            if c["name"] == "operator":
                cache = env_of(c)["KBOPERATOR_CACHE_DIR"]["value"]
                assert "emptyDir" in volumes[mounts[cache]]
                assert env_of(c)["HOME"]["value"] == "/tmp"


def test_operator_is_a_single_kopf_instance_with_its_liveness_probe() -> None:
    deployment = render("default").one("Deployment", OPERATOR)
    assert deployment["spec"]["replicas"] == 1
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}
    c = deployment["spec"]["template"]["spec"]["containers"][0]
    assert c["command"] == ["python", "-m", "kboperator"]
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert ports == {"health": 8080, "metrics": 9090}
    assert env_of(c)["KBOPERATOR_METRICS_PORT"]["value"] == "9090"


def test_operator_tuning_is_passed_only_when_set() -> None:
    default_env = env_of(container(render("default"), "Deployment", OPERATOR, "operator"))
    assert "KBOPERATOR_MAX_CONCURRENT_SYNCS" not in default_env
    assert default_env["KBOPERATOR_ALLOW_LOCAL_REPOSITORIES"]["value"] == "false"
    env = env_of(container(render("namespaced-netpol"), "Deployment", OPERATOR, "operator"))
    assert env["KBOPERATOR_MAX_CONCURRENT_SYNCS"]["value"] == "2"
    assert env["KBOPERATOR_FULL_RECONCILE_INTERVAL"]["value"] == "43200"


def test_metrics_service_is_optional() -> None:
    assert f"{OPERATOR}-metrics" not in render("default").names("Service")
    service = render("namespaced-netpol").one("Service", f"{OPERATOR}-metrics")
    assert service["spec"]["ports"] == [{"name": "metrics", "port": 9090, "targetPort": "metrics", "protocol": "TCP"}]
    assert service["spec"]["selector"]["app.kubernetes.io/component"] == "operator"


# --- the token ----------------------------------------------------------------------------


def token_refs(scenario: str) -> tuple[dict, dict]:
    manifests = render(scenario)
    operator_env = env_of(container(manifests, "Deployment", OPERATOR, "operator"))
    search_env = env_of(container(manifests, "Deployment", SEARCH, "search"))
    return (
        operator_env["KBOPERATOR_SEARCH_TOKEN"]["valueFrom"]["secretKeyRef"],
        search_env["SEARCHSVC_API_TOKEN"]["valueFrom"]["secretKeyRef"],
    )


@pytest.mark.parametrize("scenario", ALL)
def test_token_is_wired_from_the_same_secret_into_both_programs(scenario: str) -> None:
    operator_ref, search_ref = token_refs(scenario)
    assert operator_ref == search_ref
    assert (
        "value"
        not in env_of(container(render(scenario), "Deployment", OPERATOR, "operator"))["KBOPERATOR_SEARCH_TOKEN"]
    )


def test_generated_token_secret_holds_the_wired_key() -> None:
    manifests = render("default")
    operator_ref, _ = token_refs("default")
    secret = manifests.one("Secret", TOKENS)
    assert operator_ref == {"name": TOKENS, "key": "api-token"}
    assert set(secret["data"]) == {"api-token", "read-token"}
    assert secret["data"]["api-token"] != secret["data"]["read-token"]
    search_env = env_of(container(manifests, "Deployment", SEARCH, "search"))
    assert search_env["SEARCHSVC_READ_TOKEN"]["valueFrom"]["secretKeyRef"] == {"name": TOKENS, "key": "read-token"}


def test_generated_secrets_are_looked_up_so_upgrades_keep_them() -> None:
    """`helm template` cannot reach a cluster, so only the template's reuse of the live Secret is checked."""
    helpers = (CHART / "templates" / "_helpers.tpl").read_text()
    assert re.search(r'lookup "v1" "Secret" \.ctx\.Release\.Namespace \.name', helpers)
    for name in ("search-token-secret.yaml", "qdrant-secret.yaml"):
        assert 'include "knowledge-base.persistentRandom"' in (CHART / "templates" / name).read_text()


def test_existing_token_secret_is_used_by_both_and_none_is_generated() -> None:
    manifests = render("external-openai")
    assert manifests.all("Secret") == []
    operator_ref, search_ref = token_refs("external-openai")
    assert operator_ref == search_ref == {"name": "kb-tokens", "key": "write"}


def test_read_token_can_be_turned_off() -> None:
    manifests = render("embedded")
    assert set(manifests.one("Secret", TOKENS)["data"]) == {"api-token"}
    assert "SEARCHSVC_READ_TOKEN" not in env_of(container(manifests, "Deployment", SEARCH, "search"))


def test_operator_reaches_the_search_service_by_its_service() -> None:
    manifests = render("default")
    service = manifests.one("Service", SEARCH)
    url = env_of(container(manifests, "Deployment", OPERATOR, "operator"))["KBOPERATOR_SEARCH_URL"]["value"]
    assert url == f"http://{SEARCH}.{NAMESPACE}.svc:{service['spec']['ports'][0]['port']}"


# --- the search service and its store -----------------------------------------------------


def test_search_service_listens_on_all_interfaces_with_probes() -> None:
    c = container(render("default"), "Deployment", SEARCH, "search")
    env = env_of(c)
    assert c["command"] == ["python", "-m", "kbsearch"]
    assert env["SEARCHSVC_HOST"]["value"] == "0.0.0.0"
    assert env["SEARCHSVC_PORT"]["value"] == "8000"
    assert (
        env["SEARCHSVC_METRICS_PORT"]["value"] == "9464"
    )  # metrics apart from the API (docs/operations/monitoring.md)
    assert c["ports"] == [
        {"name": "http", "containerPort": 8000, "protocol": "TCP"},
        {"name": "metrics", "containerPort": 9464, "protocol": "TCP"},
    ]
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert c["startupProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert env["HF_HUB_OFFLINE"]["value"] == "1"


@pytest.mark.parametrize("scenario", ["default", "embedded"])
def test_embedded_store_lives_on_a_pvc_with_one_replica(scenario: str) -> None:
    manifests = render(scenario)
    deployment = manifests.one("Deployment", SEARCH)
    assert deployment["spec"]["replicas"] == 1
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}
    spec = deployment["spec"]["template"]["spec"]
    env = env_of(spec["containers"][0])
    assert env["SEARCHSVC_STORE"]["value"] == "edge"
    assert env["SEARCHSVC_DATA_DIR"]["value"] == "/data"
    assert "SEARCHSVC_QDRANT_URL" not in env
    pvc = manifests.one("PersistentVolumeClaim", f"{SEARCH}-data")
    volumes = {v["name"]: v for v in spec["volumes"]}
    mounts = {m["mountPath"]: m["name"] for m in spec["containers"][0]["volumeMounts"]}
    assert volumes[mounts["/data"]]["persistentVolumeClaim"] == {"claimName": pvc["metadata"]["name"]}


def test_embedded_pvc_settings() -> None:
    pvc = render("embedded").one("PersistentVolumeClaim", f"{SEARCH}-data")
    assert pvc["spec"]["storageClassName"] == "standard"
    assert pvc["spec"]["resources"]["requests"]["storage"] == "20Gi"
    assert pvc["metadata"]["annotations"] == {"helm.sh/resource-policy": "keep"}


def test_embedded_store_refuses_two_replicas_with_a_clear_message() -> None:
    error = render_error("--set", "search.replicas=2")
    assert "search.replicas is 2, but store.mode=embedded allows exactly one replica" in error
    assert "store.mode=server or store.mode=external" in error
    # The same replica count is fine with a server.
    render_ok("--set", "search.replicas=2", "--set", "store.mode=server")


def test_embedded_store_on_an_existing_claim() -> None:
    manifests = render_ok("--set", "store.embedded.persistence.existingClaim=kb-data")
    assert manifests.all("PersistentVolumeClaim") == []
    volumes = {v["name"]: v for v in manifests.one("Deployment", SEARCH)["spec"]["template"]["spec"]["volumes"]}
    assert volumes["data"]["persistentVolumeClaim"] == {"claimName": "kb-data"}


def test_embedded_index_settings_reach_the_search_service() -> None:
    defaults = env_of(container(render_ok(), "Deployment", SEARCH, "search"))
    assert defaults["SEARCHSVC_EDGE_INDEX_THRESHOLD"]["value"] == "20000"
    assert defaults["SEARCHSVC_EDGE_INDEX_THREADS"]["value"] == "1"
    tuned = render_ok("--set", "store.embedded.index.threshold=0", "--set", "store.embedded.index.threads=2")
    env = env_of(container(tuned, "Deployment", SEARCH, "search"))
    assert (env["SEARCHSVC_EDGE_INDEX_THRESHOLD"]["value"], env["SEARCHSVC_EDGE_INDEX_THREADS"]["value"]) == ("0", "2")
    server = env_of(container(render_ok("--set", "store.mode=server"), "Deployment", SEARCH, "search"))
    assert "SEARCHSVC_EDGE_INDEX_THRESHOLD" not in server


def test_qdrant_server_in_the_chart() -> None:
    manifests = render("qdrant-server")
    sts = manifests.one("StatefulSet", QDRANT)
    assert sts["spec"]["replicas"] == 1
    assert sts["spec"]["serviceName"] == QDRANT
    (claim,) = sts["spec"]["volumeClaimTemplates"]
    assert claim["spec"]["resources"]["requests"]["storage"] == "50Gi"
    qdrant = sts["spec"]["template"]["spec"]["containers"][0]
    assert qdrant["image"].startswith("docker.io/qdrant/qdrant:v") and qdrant["image"].endswith("-unprivileged")
    key_ref = env_of(qdrant)["QDRANT__SERVICE__API_KEY"]["valueFrom"]["secretKeyRef"]
    assert key_ref == {"name": QDRANT, "key": "api-key"}
    assert set(manifests.one("Secret", QDRANT)["data"]) == {"api-key"}
    assert {m["mountPath"]: m["name"] for m in qdrant["volumeMounts"]}["/qdrant/storage"] == claim["metadata"]["name"]

    search = manifests.one("Deployment", SEARCH)
    assert search["spec"]["replicas"] == 3
    assert search["spec"]["strategy"]["type"] == "RollingUpdate"
    env = env_of(search["spec"]["template"]["spec"]["containers"][0])
    assert env["SEARCHSVC_STORE"]["value"] == "qdrant"
    assert env["SEARCHSVC_QDRANT_URL"]["value"] == f"http://{QDRANT}.{NAMESPACE}.svc:6333"
    assert env["SEARCHSVC_QDRANT_API_KEY"]["valueFrom"]["secretKeyRef"] == key_ref
    assert "SEARCHSVC_DATA_DIR" not in env
    assert {p["port"] for p in manifests.one("Service", QDRANT)["spec"]["ports"]} == {6333, 6334}

    pdb = manifests.one("PodDisruptionBudget", SEARCH)
    assert pdb["spec"]["minAvailable"] == 2 and "maxUnavailable" not in pdb["spec"]


def test_external_qdrant_with_openai() -> None:
    manifests = render("external-openai")
    env = env_of(container(manifests, "Deployment", SEARCH, "search"))
    assert env["SEARCHSVC_STORE"]["value"] == "qdrant"
    assert env["SEARCHSVC_QDRANT_URL"]["value"] == "https://qdrant.example.com:6333"
    assert env["SEARCHSVC_QDRANT_API_KEY"]["valueFrom"]["secretKeyRef"] == {
        "name": "qdrant-credentials",
        "key": "api-key",
    }
    assert env["SEARCHSVC_COLLECTION"]["value"] == "docs_openai"
    assert env["SEARCHSVC_EMBEDDER"]["value"] == "openai"
    assert env["SEARCHSVC_OPENAI_API_KEY"]["valueFrom"]["secretKeyRef"] == {
        "name": "openai-credentials",
        "key": "OPENAI_API_KEY",
    }
    assert env["SEARCHSVC_OPENAI_BASE_URL"]["value"] == "https://llm-gateway.example.com/v1"
    assert env["SEARCHSVC_OPENAI_MODEL"]["value"] == "text-embedding-3-large"
    assert env["SEARCHSVC_OPENAI_DIMENSIONS"]["value"] == "1024"
    assert manifests.one("Deployment", SEARCH)["spec"]["replicas"] == 2
    assert manifests.all("StatefulSet") == []


def test_external_qdrant_without_api_key() -> None:
    env = env_of(
        container(
            render_ok("--set", "store.mode=external", "--set", "store.external.url=http://qdrant.db:6333"),
            "Deployment",
            SEARCH,
            "search",
        )
    )
    assert env["SEARCHSVC_QDRANT_URL"]["value"] == "http://qdrant.db:6333"
    assert "SEARCHSVC_QDRANT_API_KEY" not in env


def test_local_embeddings_pass_no_openai_settings() -> None:
    env = env_of(container(render("default"), "Deployment", SEARCH, "search"))
    assert env["SEARCHSVC_EMBEDDER"]["value"] == "local"
    assert not [name for name in env if name.startswith("SEARCHSVC_OPENAI_")]


def test_local_backend_is_passed_and_defaults_to_the_services_default() -> None:
    from kbsearch.settings import Settings

    env = env_of(container(render("default"), "Deployment", SEARCH, "search"))
    assert env["SEARCHSVC_LOCAL_BACKEND"]["value"] == Settings.variables()["local_backend"].default
    fp32 = render_ok(*values_args("default"), "--set", "embeddings.local.backend=onnx")
    env = env_of(container(fp32, "Deployment", SEARCH, "search"))
    assert env["SEARCHSVC_LOCAL_BACKEND"]["value"] == "onnx"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--set", "store.mode=external"], "store.mode=external needs store.external.url"),
        (["--set", "embeddings.provider=openai"], "embeddings.provider=openai needs embeddings.openai.existingSecret"),
    ],
)
def test_incomplete_settings_fail_with_a_clear_message(args: list[str], message: str) -> None:
    assert message in render_error(*args)


# --- the schema -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "where"),
    [
        (["--set", "search.replicas=two"], "/search/replicas"),
        (["--set", "search.replicas=0"], "/search/replicas"),
        (["--set", "embeddings.provider=cohere"], "/embeddings/provider"),
        (["--set", "embeddings.local.backend=cuda"], "/embeddings/local/backend"),
        (["--set", "store.mode=sqlite"], "/store/mode"),
        (["--set", "operator.watchNamespaces=team-a"], "/operator/watchNamespaces"),
        (["--set", "operator.watchNamespaces[0]=Team_A"], "/operator/watchNamespaces/0"),
        (["--set", "networkPolicy.enabled=yes"], "/networkPolicy/enabled"),
        (["--set", "search.port=70000"], "/search/port"),
        (["--set", "operator.maxConcurrentSyncs=many"], "/operator/maxConcurrentSyncs"),
        (["--set", "embeddings.openai.dimensions=-1"], "/embeddings/openai/dimensions"),
        (["--set", "store.external.url=qdrant:6333"], "/store/external/url"),
        (["--set", "store.embedded.index.threads=0"], "/store/embedded/index/threads"),
        (["--set", "store.embedded.index.threshold=-1"], "/store/embedded/index/threshold"),
        (["--set", "operator.image.digest=latest"], "/operator/image/digest"),
        (
            ["--set", "containerSecurityContext.readOnlyRootFilesystem=false"],
            "/containerSecurityContext/readOnlyRootFilesystem",
        ),
        (["--set", "podSecurityContext.runAsNonRoot=false"], "/podSecurityContext/runAsNonRoot"),
        (["--set", "search.resources=null"], "/search"),
        (["--set", "serach.replicas=2"], "serach"),
    ],
)
def test_schema_rejects_bad_values(args: list[str], where: str) -> None:
    assert_schema_rejects(args, where)


def values_tree() -> list[dict]:
    """values.yaml as nested {key, path, documented, children}, from its lines (comments are lost to YAML)."""
    root: dict = {"children": [], "indent": -1}
    stack = [root]
    lines = (CHART / "values.yaml").read_text().splitlines()
    for number, line in enumerate(lines):
        match = re.match(r"^( *)([A-Za-z][A-Za-z0-9]*):", line)
        if not match:
            continue
        indent = len(match.group(1))
        while stack[-1]["indent"] >= indent:
            stack.pop()
        parent = stack[-1]
        node = {
            "key": match.group(2),
            "indent": indent,
            "children": [],
            "path": ".".join(filter(None, [parent.get("path"), match.group(2)])),
            "documented": number > 0 and lines[number - 1].strip().startswith("#"),
        }
        parent["children"].append(node)
        stack.append(node)
    return root["children"]


def test_every_value_has_a_comment() -> None:
    """Every value has a comment right above it. A commented block whose keys have none (a probe's
    timing, resources, a security context) counts as one documented value."""
    missing: list[str] = []

    def check(nodes: list[dict]) -> None:
        for node in nodes:
            children = node["children"]
            if node["documented"] and children and not any(c["documented"] for c in children):
                continue  # one value given as a block
            if not children and not node["documented"]:
                missing.append(node["path"])
            check(children)

    tree = values_tree()
    assert len(tree) >= 10
    check(tree)
    assert not missing, f"values without a comment above them: {missing}"


# --- network policies -----------------------------------------------------------------------


def matches(selector: dict, labels: dict) -> bool:
    return all(labels.get(k) == v for k, v in selector["matchLabels"].items())


def test_network_policy_admits_only_the_operator_and_chosen_namespaces() -> None:
    manifests = render("namespaced-netpol")
    policy = manifests.one("NetworkPolicy", SEARCH)
    pods = {name: meta["labels"] for name, meta, _ in manifests.pod_specs()}
    assert matches(policy["spec"]["podSelector"], pods[f"Deployment/{SEARCH}"])
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    rule, metrics = policy["spec"]["ingress"]
    assert rule["ports"] == [{"port": "http", "protocol": "TCP"}]
    # The monitoring namespace reaches the metrics port alone, and nothing else does.
    assert metrics == {
        "from": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}],
        "ports": [{"port": "metrics", "protocol": "TCP"}],
    }
    peers = rule["from"]
    pod_peers = [p["podSelector"] for p in peers if set(p) == {"podSelector"}]
    ns_peers = [p["namespaceSelector"] for p in peers if set(p) == {"namespaceSelector"}]
    assert len(pod_peers) + len(ns_peers) == len(peers)
    # Pod peers without a namespaceSelector only match pods of the release namespace.
    assert any(matches(sel, pods[f"Deployment/{OPERATOR}"]) for sel in pod_peers)
    assert any(matches(sel, pods[f"Pod/{RELEASE_TEST_POD}"]) for sel in pod_peers)
    assert {"matchLabels": {"kb.knowledgebase.dev/search-client": "true"}} in pod_peers
    for sel in pod_peers:  # no peer admits the search pods' own siblings at large
        assert sel["matchLabels"], sel
    assert {
        "matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["apps", "team-a"]}]
    } in ns_peers
    assert len(ns_peers) == 1
    # The named ports exist on the search container.
    ports = {p["name"] for p in container(manifests, "Deployment", SEARCH, "search")["ports"]}
    assert {"http", "metrics"} <= ports


RELEASE_TEST_POD = "kb-knowledge-base-test-search"


def test_operator_network_policy_only_opens_metrics() -> None:
    policy = render("namespaced-netpol").one("NetworkPolicy", OPERATOR)
    (rule,) = policy["spec"]["ingress"]
    assert rule["ports"] == [{"port": "metrics", "protocol": "TCP"}]
    closed = render_ok("--set", "networkPolicy.enabled=true").one("NetworkPolicy", OPERATOR)
    assert closed["spec"]["ingress"] == [] and closed["spec"]["policyTypes"] == ["Ingress"]


def test_qdrant_network_policy_admits_only_the_search_service() -> None:
    manifests = render("qdrant-server")
    policy = manifests.one("NetworkPolicy", QDRANT)
    (rule,) = policy["spec"]["ingress"]
    (peer,) = rule["from"]
    search_labels = manifests.one("Deployment", SEARCH)["spec"]["template"]["metadata"]["labels"]
    operator_labels = manifests.one("Deployment", OPERATOR)["spec"]["template"]["metadata"]["labels"]
    assert matches(peer["podSelector"], search_labels)
    assert not matches(peer["podSelector"], operator_labels)


def test_no_network_policy_unless_enabled() -> None:
    assert render("default").all("NetworkPolicy") == []
    assert render("external-openai").all("NetworkPolicy") == []


# --- helm test, NOTES, CRD -------------------------------------------------------------------


def test_helm_test_pod_checks_search_readiness() -> None:
    manifests = render("default")
    pod = manifests.one("Pod", RELEASE_TEST_POD)
    assert pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    assert pod["spec"]["restartPolicy"] == "Never"
    script = " ".join(pod["spec"]["containers"][0]["command"])
    assert f"http://{SEARCH}.{NAMESPACE}.svc:8000/readyz" in script
    assert "wget" in script


def test_notes_explain_the_next_steps() -> None:
    text = notes("namespaced-netpol")
    assert "kubectl get ks" in text
    assert "kubectl apply -n team-a" in text
    assert f"curl -sS http://{SEARCH}.{NAMESPACE}.svc:8000/api/v1/search" in text
    assert "--labels=kb.knowledgebase.dev/search-client=true" in text
    # The read token reaches the client pod from its Secret, never through the pod's spec or a shell variable.
    assert "base64 -d" not in text and "get secret" not in text
    (command,) = re.findall(r"kubectl -n \S+ run kb-search-client.*?'\n", text, re.S)
    args = shlex.split(command.replace("\\\n", " "))
    (overrides,) = [a.removeprefix("--overrides=") for a in args if a.startswith("--overrides=")]
    (client,) = json.loads(overrides)["spec"]["containers"]
    assert client["env"] == [
        {"name": "READ_TOKEN", "valueFrom": {"secretKeyRef": {"name": TOKENS, "key": "read-token"}}}
    ]
    script = shlex.split(client["command"][2])
    assert script[:3] == ["curl", "-sS", f"http://{SEARCH}.{NAMESPACE}.svc:8000/api/v1/search"]
    assert "Authorization: Bearer $READ_TOKEN" in script
    assert json.loads(script[script.index("-d") + 1]) == {"query": "how do pods get scheduled", "limit": 5}
    assert f"http://{SEARCH}.{NAMESPACE}.svc:8000/ui/" in text and "ask_knowledge" in text
    # The repository pages the notes point to exist.
    pages = re.findall(r"docs/[\w/.-]+\.md", text)
    assert "docs/operations/install.md" in pages
    assert [page for page in pages if not (REPO / page).is_file()] == []
    # The example KnowledgeSource is valid against the CRD.
    example = re.search(r"<<'YAML'\n(.*?)\n\s*YAML\n", text, re.S)
    assert example, text
    source = yaml.safe_load(textwrap.dedent(example.group(1)))
    assert source["apiVersion"] == f"{KS_GROUP}/v1alpha1" and source["kind"] == "KnowledgeSource"
    jsonschema.validate(source, crd_schema())


def test_notes_without_read_token_send_no_authorization() -> None:
    assert "Authorization" not in notes("embedded")


def test_chart_crd_is_a_byte_identical_copy_of_the_top_level_crd() -> None:
    chart_crds = sorted(p.name for p in (CHART / "crds").iterdir())
    assert chart_crds == ["knowledgesources.yaml", "kopfpeerings.yaml"]
    source = (REPO / "crds" / "knowledgesources.yaml").read_bytes()
    copy_ = (CHART / "crds" / "knowledgesources.yaml").read_bytes()
    assert copy_ == source, (
        "charts/knowledge-base/crds/knowledgesources.yaml drifted from crds/knowledgesources.yaml; "
        "run: cp crds/knowledgesources.yaml charts/knowledge-base/crds/"
    )


def test_rbac_names_the_crd_group_and_plural() -> None:
    crd = yaml.safe_load((REPO / "crds" / "knowledgesources.yaml").read_text())
    assert crd["spec"]["group"] == KS_GROUP
    assert crd["spec"]["names"]["plural"] == "knowledgesources"
    assert "status" in crd["spec"]["versions"][0]["subresources"]
    rendered = render("default").one("CustomResourceDefinition", "knowledgesources.kb.knowledgebase.dev")
    assert rendered == crd


def test_readme_examples_are_valid_knowledge_sources() -> None:
    pages = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]  # the install guide is in docs/operations
    blocks = [block for page in pages for block in re.findall(r"```yaml\n(.*?)```", page.read_text(), re.S)]
    sources = [
        doc
        for block in blocks
        for doc in yaml.safe_load_all(block)
        if isinstance(doc, dict) and doc.get("kind") == "KnowledgeSource"
    ]
    assert sources, "the docs show at least one KnowledgeSource"
    for source in sources:
        jsonschema.validate(source, crd_schema())
