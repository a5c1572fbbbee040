"""TokenReview and SubjectAccessReview for the kmock emulator, with scripted decisions.

`ReviewScript` answers `POST /apis/authentication.k8s.io/v1/tokenreviews` from `users` (token ->
user info) and `POST /apis/authorization.k8s.io/v1/subjectaccessreviews` from `grants`:
(username, namespace, name) for a grant on one KnowledgeSource, name None for the namespace,
as a RoleBinding would give `get knowledgesources`. `failing` makes both answer 500, `delay_s`
makes them slow. Requests it answered are counted, so a test can see the caches at work, and
the most answered at once is kept. A token is valid for the audiences it was scripted with (any,
when none), and the answer's `status.audiences` says which of the asked ones it matched, as an
API server's does; `ignore_audiences` answers like an authenticator that never checks them.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

import aiohttp.web

TOKEN_REVIEWS = "/apis/authentication.k8s.io/v1/tokenreviews"
ACCESS_REVIEWS = "/apis/authorization.k8s.io/v1/subjectaccessreviews"
GROUP, RESOURCE = "kb.knowledgebase.dev", "knowledgesources"


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def jwt_token(name: str, audiences: tuple[str, ...] = ("search-service",), expires_at: int = 4_102_444_800) -> str:
    """A token shaped like a projected ServiceAccount token (a JWT for `audiences`); only the script trusts it.

    The same arguments give the same token; it expires in 2100 unless told otherwise.
    """
    header = {"alg": "RS256", "kid": "test"}
    payload = {"aud": list(audiences), "exp": expires_at, "sub": name}
    signature = hashlib.sha256(name.encode()).digest()
    return ".".join(_b64url(part) for part in (json.dumps(header).encode(), json.dumps(payload).encode(), signature))


@dataclass
class ReviewScript:
    users: dict[str, dict[str, Any]] = field(default_factory=dict)
    grants: set[tuple[str, str, str | None]] = field(default_factory=set)
    failing: bool = False
    delay_s: float = 0.0
    ignore_audiences: bool = False
    in_flight: int = 0
    most_in_flight: int = 0
    audiences: dict[str, list[str]] = field(default_factory=dict)
    token_reviews: list[dict[str, Any]] = field(default_factory=list)
    access_reviews: list[dict[str, Any]] = field(default_factory=list)

    def user(
        self, token: str, username: str, groups: list[str] | None = None, audiences: list[str] | None = None
    ) -> None:
        self.users[token] = {"username": username, "uid": f"uid-{username}", "groups": groups or []}
        if audiences is not None:
            self.audiences[token] = audiences

    async def answer(self, method: str, path: str, body: Any) -> aiohttp.web.StreamResponse | None:
        if path not in (TOKEN_REVIEWS, ACCESS_REVIEWS):
            return None
        if method != "POST":
            return _status(405, "MethodNotAllowed")
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            if self.delay_s:
                await asyncio.sleep(self.delay_s)
        finally:
            self.in_flight -= 1
        if self.failing:
            return _status(500, "InternalError")
        if path == TOKEN_REVIEWS:
            self.token_reviews.append(body)
            token = body.get("spec", {}).get("token", "")
            user = self.users.get(token)
            asked = body.get("spec", {}).get("audiences") or []
            has = self.audiences.get(token)
            matched = asked if has is None else [a for a in asked if a in has]
            if self.ignore_audiences:
                matched = has or []
            elif asked and not matched:
                user = None  # a token for another audience is not authenticated here
            status = (
                {"authenticated": True, "user": user, "audiences": matched}
                if user
                else {"authenticated": False, "error": "invalid"}
            )
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
