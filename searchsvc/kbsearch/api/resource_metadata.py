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
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from kbsearch.settings import Settings

__all__ = ["METADATA_PATH", "challenge", "metadata", "router"]

METADATA_PATH = "/.well-known/oauth-protected-resource"
MCP_PATH = "/mcp"

router = APIRouter(tags=["system"])


def _base(request: Request) -> str:
    # Behind a trusted proxy, uvicorn has already put the client-facing scheme and host here.
    return str(request.base_url).rstrip("/")


def challenge(request: Request, *, invalid: bool) -> str:
    """The `WWW-Authenticate` value of a 401: Bearer, where the metadata is, and RFC 6750's error."""
    value = f'Bearer resource_metadata="{_base(request)}{METADATA_PATH}"'
    return value + ', error="invalid_token"' if invalid else value


def metadata(request: Request, settings: Settings) -> dict[str, Any]:
    if settings.auth_mode == "kubernetes":
        how: dict[str, Any] = {
            "tokens": "kubernetes-serviceaccount",
            "audiences": settings.audiences,
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
        "resource": f"{_base(request)}{MCP_PATH}",
        "resource_name": "Knowledge base",
        "bearer_methods_supported": ["header"],
        "x-kb-authentication": {"scheme": "Bearer", **how},
    }


@router.get(METADATA_PATH, include_in_schema=False)
@router.get(METADATA_PATH + MCP_PATH, include_in_schema=False)
async def protected_resource(request: Request) -> JSONResponse:
    """RFC 9728 metadata of the /mcp resource (and of the REST API, which takes the same tokens)."""
    settings: Settings = request.app.state.settings
    return JSONResponse(metadata(request, settings), headers={"Cache-Control": "max-age=3600"})
