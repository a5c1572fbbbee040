"""auth.mode: static tokens only (as before), or Kubernetes identities scoped by RBAC; and the tokens file."""

from __future__ import annotations

import re

import kubernetes_validate
import pytest
import yaml

from tests.chart.helmchart import (
    CHART,
    KUBE_VERSION,
    NAMESPACE,
    OPERATOR,
    OPERATOR_USERNAME,
    REPO,
    SEARCH,
    assert_schema_rejects,
    container,
    env_of,
    notes,
    render,
    render_ok,
)

AUTH_ENV = {
    "SEARCHSVC_AUTH_MODE",
    "SEARCHSVC_KUBERNETES_AUDIENCES",
    "SEARCHSVC_AUTH_CACHE_SECONDS",
    "SEARCHSVC_KUBERNETES_WRITERS",
}
DELEGATOR = f"{SEARCH}-auth-delegator"
EXAMPLE = CHART / "examples" / "team-agent-access.yaml"


def without_random_values(docs) -> list[dict]:
    """The objects with each generated Secret value replaced by its key: renders differ only there."""
    out = []
    for doc in docs:
        if doc["kind"] == "Secret":
            doc = {**doc, "data": {key: key for key in doc.get("data", {})}}
        out.append(doc)
    return out


def search_pod(manifests) -> dict:
    return manifests.one("Deployment", SEARCH)["spec"]["template"]["spec"]


def search_env(manifests) -> dict[str, dict]:
    return env_of(container(manifests, "Deployment", SEARCH, "search"))


def validate_strictly(docs) -> None:
    for doc in docs:
        where = f"{doc['kind']}/{doc['metadata']['name']}"
        try:
            kubernetes_validate.validate(doc, KUBE_VERSION, strict=True)
        except kubernetes_validate.ValidationError as exc:  # pragma: no cover - a failure path
            pytest.fail(f"{where} is invalid for Kubernetes {KUBE_VERSION}: {exc.message}")


# --- tokens mode: nothing changes ---------------------------------------------------------------


def test_tokens_mode_is_the_default_and_renders_what_it_did_before() -> None:
    default = render("default")
    assert without_random_values(render_ok("--set", "auth.mode=tokens")) == without_random_values(default)
    assert DELEGATOR not in default.names("ClusterRoleBinding")
    assert search_pod(default)["automountServiceAccountToken"] is False
    env = search_env(default)
    assert not AUTH_ENV & set(env) and "SEARCHSVC_TOKENS_FILE" not in env
    assert {v["name"] for v in search_pod(default)["volumes"]} == {"tmp", "data"}


# --- kubernetes mode ------------------------------------------------------------------------------


def test_kubernetes_mode_binds_the_search_service_account_to_auth_delegator() -> None:
    manifests = render("kubernetes-auth")
    binding = manifests.one("ClusterRoleBinding", DELEGATOR)
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": "system:auth-delegator",
    }
    # The subject is the very ServiceAccount the search pods run as.
    account = manifests.one("ServiceAccount", SEARCH)
    assert search_pod(manifests)["serviceAccountName"] == account["metadata"]["name"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": SEARCH, "namespace": NAMESPACE}]
    # No other grant reaches the search service.
    for other in manifests.all("RoleBinding") + manifests.all("ClusterRoleBinding"):
        if other is not binding:
            assert all(s["name"] != SEARCH for s in other["subjects"]), other["metadata"]["name"]


def test_kubernetes_mode_mounts_the_search_token_in_the_pod_only() -> None:
    manifests = render("kubernetes-auth")
    assert search_pod(manifests)["automountServiceAccountToken"] is True
    # The ServiceAccount itself stays off, so no other pod using it gets the token by accident.
    assert manifests.one("ServiceAccount", SEARCH)["automountServiceAccountToken"] is False


def test_kubernetes_mode_passes_the_auth_settings() -> None:
    manifests = render("kubernetes-auth")
    env = search_env(manifests)
    assert env["SEARCHSVC_AUTH_MODE"] == {"name": "SEARCHSVC_AUTH_MODE", "value": "kubernetes"}
    assert env["SEARCHSVC_KUBERNETES_AUDIENCES"]["value"] == "kb-search,https://kb.example.com"
    assert env["SEARCHSVC_AUTH_CACHE_SECONDS"]["value"] == "15"
    # The only writer is the operator's ServiceAccount, the one its Deployment runs as.
    writers = env["SEARCHSVC_KUBERNETES_WRITERS"]["value"]
    assert writers == OPERATOR_USERNAME
    operator = manifests.one("Deployment", OPERATOR)
    account = operator["spec"]["template"]["spec"]["serviceAccountName"]
    assert writers == f"system:serviceaccount:{operator['metadata']['namespace']}:{account}"
    # The operator keeps writing with its static API token, from the same Secret as before.
    operator_ref = env_of(container(manifests, "Deployment", OPERATOR, "operator"))["KBOPERATOR_SEARCH_TOKEN"]
    assert operator_ref["valueFrom"]["secretKeyRef"] == env["SEARCHSVC_API_TOKEN"]["valueFrom"]["secretKeyRef"]
    # requireReadToken=false drops the all-namespaces read token: every reader is scoped.
    assert "SEARCHSVC_READ_TOKEN" not in env


def test_kubernetes_mode_defaults() -> None:
    manifests = render_ok("--set", "auth.mode=kubernetes")
    env = search_env(manifests)
    assert env["SEARCHSVC_KUBERNETES_AUDIENCES"]["value"] == ""  # the API server's default audience
    assert env["SEARCHSVC_AUTH_CACHE_SECONDS"]["value"] == "30"
    assert env["SEARCHSVC_KUBERNETES_WRITERS"]["value"] == OPERATOR_USERNAME
    assert "SEARCHSVC_READ_TOKEN" in env and "SEARCHSVC_TOKENS_FILE" not in env
    validate_strictly(manifests)


def test_kubernetes_mode_leaves_the_operator_and_the_network_policy_alone() -> None:
    tokens = render_ok("--set", "networkPolicy.enabled=true")
    kubernetes = render_ok("--set", "networkPolicy.enabled=true", "--set", "auth.mode=kubernetes")
    for kind in ("Role", "ClusterRole", "RoleBinding", "NetworkPolicy", "Secret"):
        assert without_random_values(kubernetes.all(kind)) == without_random_values(tokens.all(kind)), kind
    assert kubernetes.one("Deployment", OPERATOR) == tokens.one("Deployment", OPERATOR)
    operator_bindings = [b for b in kubernetes.all("ClusterRoleBinding") if b["metadata"]["name"] != DELEGATOR]
    assert operator_bindings == tokens.all("ClusterRoleBinding")


def test_kubernetes_mode_notes_show_an_agent_calling_with_its_own_token() -> None:
    text = notes("kubernetes-auth")
    assert "examples/team-agent-access.yaml" in text and "with audience kb-search" in text
    assert 'curl -sS -H "Authorization: Bearer $(cat /var/run/secrets/kb/token)"' in text
    # Without a read token, no example calls without a token (it would get a 401).
    assert "READ_TOKEN" not in text and "kubectl -n kb-system run" not in text


# --- the tokens file ------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["tokens", "kubernetes"])
def test_tokens_file_is_a_whole_secret_volume_mounted_read_only(mode: str) -> None:
    manifests = render_ok("--set", f"auth.mode={mode}", "--set", "auth.tokensFile.existingSecret=kb-tokens-file")
    spec = search_pod(manifests)
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["tokens-file"]["secret"]["secretName"] == "kb-tokens-file"
    assert volumes["tokens-file"]["secret"]["items"] == [{"key": "tokens.yaml", "path": "tokens.yaml"}]
    (mount,) = [m for m in spec["containers"][0]["volumeMounts"] if m["name"] == "tokens-file"]
    # A subPath mount would never see the kubelet's in-place update of the Secret.
    assert mount["readOnly"] is True and "subPath" not in mount
    assert search_env(manifests)["SEARCHSVC_TOKENS_FILE"]["value"] == f"{mount['mountPath']}/tokens.yaml"
    # The Secret is the user's: the chart does not render it.
    assert "kb-tokens-file" not in manifests.names("Secret")
    validate_strictly(manifests)


def test_tokens_file_key_is_configurable() -> None:
    volumes = {v["name"]: v for v in search_pod(render("kubernetes-auth"))["volumes"]}
    assert volumes["tokens-file"]["secret"]["items"] == [{"key": "tokens", "path": "tokens.yaml"}]


# --- the schema -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "where"),
    [
        (["--set", "auth.mode=oidc"], "/auth/mode"),
        (["--set", "auth.mode=Kubernetes"], "/auth/mode"),
        (["--set", "auth.kubernetes.audiences=kb-search"], "/auth/kubernetes/audiences"),
        (["--set", "auth.kubernetes.audiences[0]=a\\,b"], "/auth/kubernetes/audiences/0"),
        (["--set", "auth.kubernetes.cacheSeconds=0"], "/auth/kubernetes/cacheSeconds"),
        (["--set", "auth.kubernetes.cacheSeconds=soon"], "/auth/kubernetes/cacheSeconds"),
        (["--set", "auth.kubernetes.audience[0]=kb"], "audience"),
        (["--set", "auth.tokensFile.existingSecret=Tokens_File"], "/auth/tokensFile/existingSecret"),
        (["--set", "auth.tokensFile=kb-tokens"], "/auth/tokensFile"),
    ],
)
def test_schema_rejects_bad_auth_values(args: list[str], where: str) -> None:
    assert_schema_rejects(args, where)


# --- the example Role and RoleBinding for a team's agent ---------------------------------------


def example_docs() -> list[dict]:
    return [doc for doc in yaml.safe_load_all(EXAMPLE.read_text()) if doc]


def test_team_agent_example_validates_strictly() -> None:
    docs = example_docs()
    assert {d["kind"] for d in docs} == {"ServiceAccount", "Role", "RoleBinding", "Pod"}
    validate_strictly(docs)


def test_team_agent_example_grants_get_knowledgesources_in_its_own_namespace_only() -> None:
    docs = {d["kind"]: d for d in example_docs()}
    account, role, binding, pod = (docs[k] for k in ("ServiceAccount", "Role", "RoleBinding", "Pod"))
    namespace = account["metadata"]["namespace"]
    assert {d["metadata"]["namespace"] for d in docs.values()} == {namespace}
    assert role["rules"] == [
        {"apiGroups": ["kb.knowledgebase.dev"], "resources": ["knowledgesources"], "verbs": ["get"]}
    ]
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": role["metadata"]["name"],
    }
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": account["metadata"]["name"], "namespace": namespace}
    ]
    # The agent calls with a projected token for the search service's audience, not its API token.
    spec = pod["spec"]
    assert spec["serviceAccountName"] == account["metadata"]["name"]
    assert spec["automountServiceAccountToken"] is False
    (volume,) = spec["volumes"]
    (source,) = volume["projected"]["sources"]
    assert source["serviceAccountToken"]["audience"] == "kb-search"
    (mount,) = spec["containers"][0]["volumeMounts"]
    assert f"{mount['mountPath']}/{source['serviceAccountToken']['path']}" == "/var/run/secrets/kb/token"


def readme_section() -> str:
    readme = (REPO / "docs" / "operations" / "security.md").read_text()
    start = readme.index("## Give a team's agent access to its own knowledge")
    following = re.search(r"\n##+ ", readme[start + 4 :])
    return readme[start : start + 4 + following.start()] if following else readme[start:]


def test_readme_section_gives_the_commands() -> None:
    section = readme_section()
    assert "--set auth.mode=kubernetes" in section
    assert "--set 'auth.kubernetes.audiences={kb-search}'" in section  # the example token's audience
    assert "charts/knowledge-base/examples/team-agent-access.yaml" in section
    assert 'curl -sS -H "Authorization: Bearer $(cat /var/run/secrets/kb/token)"' in section
    assert "AUTH_UNAVAILABLE" in section and "503" in section
    # The YAML it shows is valid too.
    blocks = [b.split("```", 1)[0] for b in section.split("```yaml\n")[1:]]
    docs = [doc for block in blocks for doc in yaml.safe_load_all(block) if doc and "kind" in doc]
    assert {d["kind"] for d in docs} == {"Role", "RoleBinding"}
    validate_strictly(docs)
    # They are the example file's, word for word.
    example = {d["kind"]: d for d in example_docs()}
    for doc in docs:
        assert doc == example[doc["kind"]], doc["kind"]
