"""Who sent a webhook delivery: each git host's signature scheme, checked in constant time.

- GitHub: `X-Hub-Signature-256: sha256=<hex HMAC-SHA256 of the body>`.
- GitLab: `X-Gitlab-Token: <the secret itself>` (GitLab signs nothing; TLS protects it).
- Gitea and Forgejo: `X-Gitea-Signature` / `X-Forgejo-Signature: <hex HMAC-SHA256>`.
- Bitbucket Server / Data Center: `X-Hub-Signature: sha256=<hex HMAC-SHA256>`.
- Generic (any tool, e.g. a CI step): `X-KB-Signature-256: sha256=<hex HMAC-SHA256>`.

The host is told by its headers; a delivery with none of them, or a wrong signature, is refused.
Every comparison is `hmac.compare_digest`, so timing tells nothing about the secret.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["Delivery", "identify", "verify"]

GITHUB, GITLAB, GITEA, BITBUCKET_SERVER, GENERIC = "github", "gitlab", "gitea", "bitbucket-server", "generic"

# Header (lower-case) -> (host, prefix of the hex digest).
_HMAC_HEADERS = (
    ("x-hub-signature-256", GITHUB, "sha256="),
    ("x-gitea-signature", GITEA, ""),
    ("x-forgejo-signature", GITEA, ""),
    ("x-kb-signature-256", GENERIC, "sha256="),
    ("x-hub-signature", BITBUCKET_SERVER, "sha256="),
)
_DELIVERY_HEADERS = (
    "x-github-delivery",
    "x-gitea-delivery",
    "x-forgejo-delivery",
    "idempotency-key",  # GitLab 17.4+: the same for every retry of one event
    "x-gitlab-event-uuid",  # not X-Gitlab-Webhook-UUID: that one names the webhook, not the delivery
    "x-request-id",
    "x-kb-delivery",
)
_EVENT_HEADERS = ("x-github-event", "x-gitea-event", "x-forgejo-event", "x-gitlab-event", "x-event-key", "x-kb-event")


@dataclass(frozen=True)
class Delivery:
    """What the headers say about a delivery: the host, its event name and its unique id."""

    host: str
    event: str
    delivery_id: str | None


def _lower(headers: Mapping[str, str]) -> dict[str, str]:
    return {key.lower(): value for key, value in headers.items()}


def identify(headers: Mapping[str, str]) -> Delivery | None:
    """The host that sent the delivery (by its signature header), or None when none is present."""
    lowered = _lower(headers)
    host = GITLAB if "x-gitlab-token" in lowered else None
    if host is None:
        host = next((name for header, name, _ in _HMAC_HEADERS if header in lowered), None)
    if host is None:
        return None
    event = next((lowered[h] for h in _EVENT_HEADERS if h in lowered), "")
    delivery_id = next((lowered[h] for h in _DELIVERY_HEADERS if lowered.get(h)), None)
    return Delivery(host, event, delivery_id)


def verify(headers: Mapping[str, str], body: bytes, secret: bytes) -> bool:
    """True when the delivery carries a valid signature (or GitLab token) made with `secret`."""
    if not secret:
        return False
    lowered = _lower(headers)
    if "x-gitlab-token" in lowered:
        return hmac.compare_digest(lowered["x-gitlab-token"].encode(), secret)
    for header, _, prefix in _HMAC_HEADERS:
        if header in lowered:
            given = lowered[header].strip()
            expected = prefix + hmac.new(secret, body, hashlib.sha256).hexdigest()
            return hmac.compare_digest(given.lower().encode(), expected.encode())
    return False
