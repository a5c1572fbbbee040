"""OAuth 2.0 Protected Resource Metadata (RFC 9728): how a client authenticates to this service.

An MCP client that meets a 401 reads `resource_metadata` in `WWW-Authenticate` and fetches this
document before anything else (MCP's authorization spec, 2025-06-18 and later). The service
issues no tokens and runs no authorization server, so the document lists none
(`authorization_servers` is absent): a client has nothing to start an OAuth flow against and
sends a bearer token it was given instead. The `x-kb-authentication` member (extensions are
allowed by RFC 9728 §2) says which token that is: one from the service's tokens file, or a
Kubernetes ServiceAccount token for the named audiences.

Served at `/.well-known/oauth-protected-resource` and, for the `/mcp` resource,
`/.well-known/oauth-protected-resource/mcp` (RFC 9728 §3.1 inserts the resource's path), without
authentication: it holds nothing secret.

Both name this service's URL. With SEARCHSVC_PUBLIC_URL set, that is the URL, whatever Host a
request names, and the document may be cached for an hour. Without it the URL comes from the
request's Host, so neither answer may be kept by a cache (`no-store`, `Vary: Host`): a cache shared
with other clients would otherwise hand them a URL an attacker's Host header chose. And a Host /mcp
does not answer (SEARCHSVC_MCP_ALLOWED_HOSTS, loopback by default), or one outside
SEARCHSVC_ALLOWED_HOSTS when that is set, is never reflected: the challenge names no metadata and
the document answers 421.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from kbsearch.api.hosts import host_allowed
from kbsearch.deps import settings as app_settings
from kbsearch.presenters import error_response
from kbsearch.settings import Settings

__all__ = ["METADATA_PATH", "challenge_headers", "metadata", "router"]

METADATA_PATH = "/.well-known/oauth-protected-resource"
MCP_PATH = "/mcp"

router = APIRouter(tags=["system"])


# Where the URL does not come from the request, the metadata may be cached; else it must not be.
_CACHED = {"Cache-Control": "max-age=3600"}
_UNCACHED = {"Cache-Control": "no-store", "Vary": "Host"}


def _base(request: Request, settings: Settings) -> str | None:
    """This service's URL: the configured one, else the request's (None for a Host it does not answer to)."""
    if settings.http.public_url is not None:
        return settings.http.public_url
    host = request.headers.get("host", "")
    # The document describes /mcp: it names no Host that /mcp itself would refuse.
    if not host_allowed(host, settings.http.mcp_hosts):
        return None
    if settings.http.allowed_hosts is not None and not host_allowed(host, settings.http.allowed_host_names):
        return None
    # Behind a trusted proxy, uvicorn has already put the client-facing scheme and host here.
    return str(request.base_url).rstrip("/")


def challenge_headers(request: Request, *, invalid: bool) -> dict[str, str]:
    """The headers of a 401: `WWW-Authenticate` (Bearer, where the metadata is, RFC 6750's error), and
    what a cache may do with it."""
    settings = app_settings(request)
    base = _base(request, settings)
    value = f'Bearer resource_metadata="{base}{METADATA_PATH}"' if base is not None else "Bearer"
    if invalid:
        value += ', error="invalid_token"' if base is not None else ' error="invalid_token"'
    return {"WWW-Authenticate": value, **_UNCACHED}  # a refusal is never kept, whatever names the URL


def metadata(request: Request, settings: Settings, base: str | None = None) -> dict[str, Any]:
    if settings.auth.auth_mode == "kubernetes":
        how: dict[str, Any] = {
            "tokens": "kubernetes-serviceaccount",
            "audiences": settings.auth.audiences,
            "description": (
                "Send a Kubernetes ServiceAccount token as 'Authorization: Bearer <token>' (kubectl create token "
                "<serviceaccount> --audience <one of audiences>); the service checks it with a TokenReview."
            ),
        }
    else:
        how = {
            "tokens": "static",
            "description": (
                "Send a token the operator of this service gave you as 'Authorization: Bearer <token>'. "
                "There is no OAuth flow: this service issues no tokens."
            ),
        }
    return {
        "resource": f"{base or _base(request, settings)}{MCP_PATH}",
        "resource_name": "Knowledge base",
        "bearer_methods_supported": ["header"],
        "x-kb-authentication": {"scheme": "Bearer", **how},
    }


@router.get(METADATA_PATH, include_in_schema=False)
@router.get(METADATA_PATH + MCP_PATH, include_in_schema=False)
async def protected_resource(request: Request) -> JSONResponse:
    """RFC 9728 metadata of the /mcp resource (and of the REST API, which takes the same tokens)."""
    settings = app_settings(request)
    base = _base(request, settings)
    if base is None:
        return error_response(
            421,
            "MISDIRECTED_REQUEST",
            "this service does not answer to that Host; add it to SEARCHSVC_MCP_ALLOWED_HOSTS (and "
            "SEARCHSVC_ALLOWED_HOSTS, when set) if it is yours",
            headers=_UNCACHED,
        )
    headers = _CACHED if settings.http.public_url is not None else _UNCACHED
    return JSONResponse(metadata(request, settings, base), headers=headers)
