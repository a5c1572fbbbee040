"""TokenReview and SubjectAccessReview for the kmock emulator, with scripted decisions.

`ReviewScript` answers `POST /apis/authentication.k8s.io/v1/tokenreviews` from `users` (token ->
user info) and `POST /apis/authorization.k8s.io/v1/subjectaccessreviews` from `grants`:
(username, namespace, name) for a grant on one KnowledgeSource, name None for the namespace,
as a RoleBinding would give `get knowledgesources`. `failing` makes both answer 500, `delay_s`
makes them slow. Requests it answered are counted, so a test can see the caches at work.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import aiohttp.web

TOKEN_REVIEWS = "/apis/authentication.k8s.io/v1/tokenreviews"
ACCESS_REVIEWS = "/apis/authorization.k8s.io/v1/subjectaccessreviews"
GROUP, RESOURCE = "kb.knowledgebase.dev", "knowledgesources"


@dataclass
class ReviewScript:
    users: dict[str, dict[str, Any]] = field(default_factory=dict)
    grants: set[tuple[str, str, str | None]] = field(default_factory=set)
    failing: bool = False
    delay_s: float = 0.0
    token_reviews: list[dict[str, Any]] = field(default_factory=list)
    access_reviews: list[dict[str, Any]] = field(default_factory=list)

    def user(self, token: str, username: str, groups: list[str] | None = None) -> None:
        self.users[token] = {"username": username, "uid": f"uid-{username}", "groups": groups or []}

    async def answer(self, method: str, path: str, body: Any) -> aiohttp.web.StreamResponse | None:
        if path not in (TOKEN_REVIEWS, ACCESS_REVIEWS):
            return None
        if method != "POST":
            return _status(405, "MethodNotAllowed")
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        if self.failing:
            return _status(500, "InternalError")
        if path == TOKEN_REVIEWS:
            self.token_reviews.append(body)
            user = self.users.get(body.get("spec", {}).get("token", ""))
            status = {"authenticated": True, "user": user} if user else {"authenticated": False, "error": "invalid"}
            return aiohttp.web.json_response({**body, "status": status})
        self.access_reviews.append(body)
        spec = body.get("spec", {})
        attributes = spec.get("resourceAttributes", {})
        user, namespace = spec.get("user"), attributes.get("namespace")
        wanted = {(user, namespace, None), (user, namespace, attributes.get("name"))}
        allowed = (
            attributes.get("verb") == "get"
            and attributes.get("group") == GROUP
            and attributes.get("resource") == RESOURCE
            and bool(wanted & self.grants)
        )
        return aiohttp.web.json_response({**body, "status": {"allowed": allowed}})


def _status(code: int, reason: str) -> aiohttp.web.StreamResponse:
    body = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": reason, "code": code}
    return aiohttp.web.json_response(body, status=code)
