"""The operator's requests to the emulated API server, named as the RBAC authorizer names them.

kmock records them (a test checks, say, that the operator re-listed after a watch expired). It no
longer judges them against the chart's rules: the real API server does that in tests/kube/, with
the chart installed by helm and the operator holding its ServiceAccount's token.
"""

from __future__ import annotations

from dataclasses import dataclass


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
