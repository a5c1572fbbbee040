"""Kubernetes identities: a TokenReview says who a bearer token is, SubjectAccessReviews which sources it reads.

The one module of the search service that talks to the Kubernetes API. A caller may read source
`<namespace>/<name>` when it may `get` `knowledgesources` (group kb.knowledgebase.dev) in that
namespace, namespace-wide or for that name. Sources named otherwise are for static tokens only.
Usernames in SEARCHSVC_KUBERNETES_WRITERS may write every source; other identities only read.

Both reviews are cached (bounded, for SEARCHSVC_AUTH_CACHE_SECONDS): token reviews by the sha256
of the token, access decisions per identity and namespace (or name); a refused token for
SEARCHSVC_AUTH_NEGATIVE_CACHE_SECONDS. With audiences configured, a TokenReview answer must name
one of them in `status.audiences`. At most SEARCHSVC_AUTH_MAX_REVIEWS_IN_FLIGHT reviews run at
once, and at most SEARCHSVC_AUTH_MAX_REVIEWS_PER_CLIENT TokenReviews for one client address.

A token that cannot be a ServiceAccount token is refused without a review, so junk cannot fill
the review slots that real tokens need: one that is not a JWT (three base64url parts, the first two
JSON objects), whose unverified `aud` names none of the configured audiences, or whose unverified
`exp` has passed. Nothing is trusted from these claims: they only decide that a review is pointless;
a token that passes still needs the TokenReview to be accepted.

Fail closed: a review that errors, times out (waiting for its turn included) or cannot be
reached is a 503 AUTH_UNAVAILABLE, and nothing expired is reused.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import json
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import anyio
import anyio.to_thread
import kubernetes.client
import kubernetes.config

from kbsearch.aio.locks import KeyedSemaphores
from kbsearch.errors import AuthUnavailableError
from kbsearch.services.access.scope import Caller, SourceScope

log = logging.getLogger(__name__)

GROUP, RESOURCE, VERB = "kb.knowledgebase.dev", "knowledgesources", "get"
RETRY_AFTER_S = 1
# An `exp` this far past still gets its review: the API server's clock may lag ours.
EXPIRY_LEEWAY_S = 60
K = TypeVar("K", bound=Hashable)
V = TypeVar("V")
_MISSING = object()


class TtlCache(Generic[K, V]):
    """At most `size` entries, each for `ttl` seconds; the least recently used goes first."""

    def __init__(self, size: int, ttl: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.size, self.ttl, self._clock = size, ttl, clock
        self._entries: OrderedDict[K, tuple[float, V]] = OrderedDict()

    def get(self, key: K) -> V | object:
        found = self._entries.get(key)
        if found is None:
            return _MISSING
        expires, value = found
        if self._clock() >= expires:
            del self._entries[key]  # never an answer past its lifetime
            return _MISSING
        self._entries.move_to_end(key)
        return value

    def put(self, key: K, value: V) -> None:
        if self.ttl <= 0:
            return
        self._entries[key] = (self._clock() + self.ttl, value)
        self._entries.move_to_end(key)
        while len(self._entries) > self.size:
            self._entries.popitem(last=False)


@dataclass(frozen=True, slots=True)
class KubeUser:
    username: str
    uid: str | None
    groups: tuple[str, ...]
    extra: tuple[tuple[str, tuple[str, ...]], ...]


def namespace_and_name(source_identifier: str) -> tuple[str, str] | None:
    """The KnowledgeSource a source identifier names, if it has the operator's `<namespace>/<name>` form."""
    namespace, slash, name = source_identifier.partition("/")
    if not slash or not namespace or not name or "/" in name:
        return None
    return namespace, name


class KubernetesAuth:
    def __init__(
        self,
        api_client: kubernetes.client.ApiClient,
        *,
        audiences: list[str],
        writers: list[str],
        cache_seconds: float,
        cache_size: int,
        timeout_s: float,
        negative_cache_seconds: float = 5.0,
        max_reviews_in_flight: int = 16,
        max_reviews_per_client: int = 4,
    ) -> None:
        self._client = api_client
        self._authn = kubernetes.client.AuthenticationV1Api(api_client)
        self._authz = kubernetes.client.AuthorizationV1Api(api_client)
        self.audiences = audiences
        self.writers = frozenset(writers)
        self.timeout_s = timeout_s
        self._users: TtlCache[bytes, KubeUser] = TtlCache(cache_size, cache_seconds)
        # A refused token is remembered briefly: a client retrying a bad token costs one review, yet a
        # token refused in a race (just created) is not refused for long.
        self._refused: TtlCache[bytes, bool] = TtlCache(cache_size, min(negative_cache_seconds, cache_seconds))
        # Made-up tokens each cost a review: at most this many reviews run at once, the rest wait
        # within the review timeout, then get 503 AUTH_UNAVAILABLE (the API server is not flooded).
        self._in_flight = asyncio.Semaphore(max_reviews_in_flight)
        # One address's flood waits behind itself, leaving the global slots to everyone else.
        self._per_client = KeyedSemaphores(max_reviews_per_client)
        self._decisions: TtlCache[tuple[KubeUser, str, str | None], bool] = TtlCache(cache_size, cache_seconds)

    @classmethod
    def from_environment(cls, **options: Any) -> KubernetesAuth:
        """In a pod: its ServiceAccount token and CA; elsewhere: the kubeconfig (KUBECONFIG)."""
        configuration = kubernetes.client.Configuration()
        try:
            kubernetes.config.load_incluster_config(client_configuration=configuration)
        except kubernetes.config.ConfigException:
            kubernetes.config.load_kube_config(client_configuration=configuration)
        return cls(kubernetes.client.ApiClient(configuration), **options)

    def close(self) -> None:
        self._client.close()

    async def caller(
        self, token: str, known_sources: Callable[[], Awaitable[list[str]]], client: str | None = None
    ) -> Caller | None:
        """The caller a token is, with the sources it may read now; None when the token is not valid.

        `client` is the caller's address: TokenReviews are bounded per address as well.
        """
        user = await self._user(token, client or "")
        if user is None:
            return None
        if user.username in self.writers:
            return Caller(user.username, True, SourceScope.everything())
        by_namespace: dict[str, list[str]] = {}
        for source in await known_sources():
            parts = namespace_and_name(source)
            if parts is not None:
                by_namespace.setdefault(parts[0], []).append(parts[1])
        granted = await asyncio.gather(*(self._readable(user, ns, names) for ns, names in by_namespace.items()))
        allowed = tuple(f"{ns}/{name}" for ns, names in zip(by_namespace, granted, strict=True) for name in names)
        return Caller(user.username, False, SourceScope(allowed))

    async def _readable(self, user: KubeUser, namespace: str, names: list[str]) -> list[str]:
        if await self._may_get(user, namespace, None):
            return names
        decisions = await asyncio.gather(*(self._may_get(user, namespace, name) for name in names))
        return [name for name, allowed in zip(names, decisions, strict=True) if allowed]

    async def _user(self, token: str, client: str) -> KubeUser | None:
        if not self.plausible(token):
            return None
        key = hashlib.sha256(token.encode()).digest()
        cached = self._users.get(key)
        if cached is not _MISSING:
            return cached  # type: ignore[return-value]
        if self._refused.get(key) is not _MISSING:
            return None
        spec = kubernetes.client.V1TokenReviewSpec(token=token, audiences=self.audiences or None)
        body = kubernetes.client.V1TokenReview(spec=spec)
        review = await self._call("TokenReview", self._authn.create_token_review, body, client)
        status = review.status
        user = None
        if (
            status is not None
            and status.authenticated
            and status.user is not None
            and status.user.username
            and self._audience_confirmed(status.audiences)
        ):
            info = status.user
            extra = tuple(sorted((k, tuple(v)) for k, v in (info.extra or {}).items()))
            user = KubeUser(info.username, info.uid, tuple(info.groups or ()), extra)
            self._users.put(key, user)
        else:
            self._refused.put(key, True)
        return user

    def plausible(self, token: str, now: float | None = None) -> bool:
        """Whether a TokenReview could accept `token`: a JWT for our audience, not expired (claims unverified)."""
        claims = _unverified_claims(token)
        if claims is None:
            return False
        expires = claims.get("exp")
        if isinstance(expires, bool) or not isinstance(expires, int | float):
            expires = None  # no expiry claimed (a legacy token): the review decides
        if expires is not None and expires + EXPIRY_LEEWAY_S < (time.time() if now is None else now):
            return False
        if self.audiences:
            audience = claims.get("aud")
            named = [audience] if isinstance(audience, str) else audience if isinstance(audience, list) else []
            if not set(self.audiences) & {a for a in named if isinstance(a, str)}:
                return False
        return True

    def _audience_confirmed(self, audiences: list[str] | None) -> bool:
        """With audiences asked for, the answer must name one of them: an authenticator that ignored
        them (a webhook, an old API server) must not pass a token minted for another service."""
        return not self.audiences or bool(set(audiences or ()) & set(self.audiences))

    async def _may_get(self, user: KubeUser, namespace: str, name: str | None) -> bool:
        key = (user, namespace, name)
        cached = self._decisions.get(key)
        if cached is not _MISSING:
            return bool(cached)
        attributes = kubernetes.client.V1ResourceAttributes(
            namespace=namespace, verb=VERB, group=GROUP, resource=RESOURCE, name=name
        )
        spec = kubernetes.client.V1SubjectAccessReviewSpec(
            user=user.username,
            uid=user.uid,
            groups=list(user.groups),
            extra={k: list(v) for k, v in user.extra} or None,
            resource_attributes=attributes,
        )
        body = kubernetes.client.V1SubjectAccessReview(spec=spec)
        review = await self._call("SubjectAccessReview", self._authz.create_subject_access_review, body)
        allowed = bool(review.status is not None and review.status.allowed)
        self._decisions.put(key, allowed)
        return allowed

    async def _call(self, what: str, method: Callable[..., Any], body: Any, client: str | None = None) -> Any:
        def call() -> Any:
            return method(body, _request_timeout=self.timeout_s)

        try:
            with anyio.fail_after(self.timeout_s + 1):  # the client's own timeout should come first
                # Waiting for a turn counts against the same timeout; a client's own turn comes first.
                async with self._per_client.hold(client or ""), self._in_flight:
                    return await anyio.to_thread.run_sync(call, abandon_on_cancel=True)
        except Exception as exc:  # noqa: BLE001 - any failure is "cannot decide": fail closed
            reason = getattr(exc, "status", None) or type(exc).__name__
            log.warning("kubernetes review failed", extra={"review": what, "reason": str(reason)})
            raise AuthUnavailableError(
                f"the Kubernetes {what} could not be made ({reason}); retry",
                details={"retryAfterSeconds": RETRY_AFTER_S},
            ) from None


def _unverified_claims(token: str) -> dict[str, Any] | None:
    """The payload of a JWT-shaped token (header and payload JSON objects), unverified; None for anything else."""
    parts = token.split(".")
    if len(parts) != 3 or not all(parts[:2]):
        return None
    try:
        header, payload = (json.loads(_b64url(part)) for part in parts[:2])
    except (binascii.Error, ValueError):  # not base64url, not UTF-8 or not JSON
        return None
    if not isinstance(header, dict) or not isinstance(payload, dict) or "alg" not in header:
        return None
    return payload


def _b64url(part: str) -> bytes:
    if not all(ch.isalnum() or ch in "-_" for ch in part) or not part.isascii():
        raise ValueError("not base64url")
    return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))
