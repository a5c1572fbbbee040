"""The operator's Kubernetes permissions as the chart grants them, and a check of its requests.

The rules come from the real chart rendered by helm: the Roles and ClusterRoles bound to the
operator's ServiceAccount, each in the scope of its binding. A request is allowed when one rule
matches it the way the API server's RBAC authorizer matches: group, resource (with
`resource/subresource` for subresources), verb and, when listed, resource name.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from dataclasses import dataclass

from tests.chart.helmchart import NAMESPACE as RELEASE_NAMESPACE
from tests.chart.helmchart import OPERATOR, render_ok

#: What every authenticated user may read (the built-in system:discovery ClusterRole).
_DISCOVERY_PATHS = ("/api", "/apis", "/version", "/openapi", "/healthz", "/livez", "/readyz")


@dataclass(frozen=True)
class ApiRequest:
    """One request as the RBAC authorizer sees it; `resource` is None for a non-resource URL."""

    verb: str
    group: str | None
    resource: str | None
    subresource: str | None
    namespace: str | None
    name: str | None
    path: str

    def __str__(self) -> str:
        if self.resource is None:
            return f"{self.verb} {self.path}"
        what = f"{self.resource}/{self.subresource}" if self.subresource else self.resource
        group = f".{self.group}" if self.group else ""
        where = f" in namespace {self.namespace}" if self.namespace else " cluster-wide"
        return f"{self.verb} {what}{group}{where} ({self.path})"


def verb_of(method: str, *, named: bool, watch: bool) -> str:
    """The RBAC verb of an HTTP request to a resource URL."""
    method = method.upper()
    if method == "GET":
        return "watch" if watch else "get" if named else "list"
    if method == "DELETE":
        return "delete" if named else "deletecollection"
    return {"POST": "create", "PUT": "update", "PATCH": "patch"}.get(method, method.lower())


@dataclass(frozen=True)
class Rule:
    api_groups: frozenset[str]
    resources: frozenset[str]
    verbs: frozenset[str]
    names: frozenset[str]
    non_resource_urls: frozenset[str]
    namespace: str | None  # None: granted in every namespace and cluster-wide (a ClusterRoleBinding)

    def allows(self, request: ApiRequest) -> bool:
        if not ({request.verb, "*"} & self.verbs):
            return False
        if request.resource is None:
            return any(_url_matches(pattern, request.path) for pattern in self.non_resource_urls)
        resource = f"{request.resource}/{request.subresource}" if request.subresource else request.resource
        return (
            (self.namespace is None or request.namespace == self.namespace)
            and bool({request.group or "", "*"} & self.api_groups)
            and bool({resource, "*", f"*/{request.subresource}" if request.subresource else "*"} & self.resources)
            and (not self.names or request.name in self.names)
        )


def _url_matches(pattern: str, path: str) -> bool:
    return path == pattern or (pattern.endswith("*") and path.startswith(pattern[:-1]))


class Rules:
    """The rules granted to one ServiceAccount."""

    def __init__(self, rules: Iterable[Rule]) -> None:
        self.rules = tuple(rules)

    def allows(self, request: ApiRequest) -> bool:
        if (
            request.resource is None
            and request.verb == "get"
            and any(request.path == p or request.path.startswith(p + "/") for p in _DISCOVERY_PATHS)
        ):
            return True
        return any(rule.allows(request) for rule in self.rules)

    def without(self, group: str, resource: str, verb: str) -> Rules:
        """These rules less one verb on one resource: what a chart missing that grant would give."""
        kept = []
        for rule in self.rules:
            if group in rule.api_groups and resource in rule.resources and verb in rule.verbs:
                rule = Rule(
                    rule.api_groups,
                    rule.resources,
                    rule.verbs - {verb},
                    rule.names,
                    rule.non_resource_urls,
                    rule.namespace,
                )
            kept.append(rule)
        return Rules(kept)


def _rules_of(role: dict, namespace: str | None) -> list[Rule]:
    return [
        Rule(
            api_groups=frozenset(r.get("apiGroups", [])),
            resources=frozenset(r.get("resources", [])),
            verbs=frozenset(r.get("verbs", [])),
            names=frozenset(r.get("resourceNames", [])),
            non_resource_urls=frozenset(r.get("nonResourceURLs", [])),
            namespace=namespace,
        )
        for r in role.get("rules") or []
    ]


@functools.cache
def chart_rules(mode: str, watched: tuple[str, ...] = ()) -> Rules:
    """The operator's rules from `helm template`: mode "clusterwide" or "namespaced" (over `watched`)."""
    args = [] if mode == "clusterwide" else ["--set", "operator.watchNamespaces={" + ",".join(watched) + "}"]
    manifests = render_ok(*args)
    roles = {
        (d["kind"], d["metadata"].get("namespace"), d["metadata"]["name"]): d
        for d in manifests
        if d["kind"] in ("Role", "ClusterRole")
    }
    granted: list[Rule] = []
    for binding in manifests:
        if binding["kind"] not in ("RoleBinding", "ClusterRoleBinding"):
            continue
        subjects = binding.get("subjects") or []
        if not any(
            s.get("kind") == "ServiceAccount" and s.get("name") == OPERATOR and s.get("namespace") == RELEASE_NAMESPACE
            for s in subjects
        ):
            continue
        ref = binding["roleRef"]
        scope = binding["metadata"].get("namespace") if binding["kind"] == "RoleBinding" else None
        role_namespace = scope if ref["kind"] == "Role" else None
        role = roles.get((ref["kind"], role_namespace, ref["name"]))
        assert role is not None, f"{binding['kind']} {binding['metadata']['name']} binds a missing {ref['kind']}"
        granted += _rules_of(role, scope)
    assert granted, f"the chart binds no rules to the operator in {mode} mode"
    return Rules(granted)
