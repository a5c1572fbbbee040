"""Jinja2 rendering for the console: an autoescaping environment, asset URLs, and the headers every page gets."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from fastapi import Request
from fastapi.templating import Jinja2Templates
from jinja2 import Environment, FileSystemLoader, StrictUndefined
from starlette.responses import HTMLResponse

from kbsearch.console.highlight import highlight, snippet
from kbsearch.console.session import csrf_token, remember_csrf, signed_in
from kbsearch.deps import authenticator as app_authenticator
from kbsearch.deps import face_state

PACKAGE = resources.files("kbsearch.console")
TEMPLATES = Path(str(PACKAGE / "templates"))
STATIC = Path(str(PACKAGE / "static"))

# No inline script or style anywhere: htmx reads its settings from a <meta> tag, and its own
# indicator <style> is switched off there (includeIndicatorStyles=false).
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "font-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
)
PAGE_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    # Queries sit in console URLs: links to documents' web pages must not carry them away.
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}


def asset_versions() -> dict[str, str]:
    """A short content hash per static file, put in its URL so that it can be cached for a year."""
    return {
        path.name: hashlib.sha256(path.read_bytes()).hexdigest()[:12] for path in STATIC.iterdir() if path.is_file()
    }


def when(value: str | datetime | None) -> str:
    """An RFC 3339 time as `2026-11-24 05:51 UTC`; '—' when unknown."""
    if value is None or value == "":
        return "—"
    moment = value if isinstance(value, datetime) else _parse(value)
    if moment is None:
        return str(value)
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")


def when_utc(value: str | datetime | None) -> str:
    """`when` without its " UTC": for narrow cells whose label says UTC."""
    return when(value).removesuffix(" UTC")


def age(value: str | None, now: datetime | None = None) -> str:
    """How long ago an RFC 3339 time was, coarsely (`42 s ago`, `7 min ago`, `3 h ago`, `2 d ago`)."""
    moment = _parse(value) if value else None
    if moment is None:
        return "—"
    return duration(max(0.0, ((now or datetime.now(UTC)) - moment).total_seconds())) + " ago"


def duration(seconds: float | None) -> str:
    """A span of time as a person reads it: `2.4 s`, `42 s`, `7 min`, `3 h`, `2 d`."""
    if seconds is None:
        return "—"
    if seconds < 10:
        return f"{seconds:.1f} s"
    for unit, size, up_to in (("s", 1, 90), ("min", 60, 90 * 60), ("h", 3600, 36 * 3600)):
        if seconds < up_to:
            return f"{seconds / size:.0f} {unit}"
    return f"{seconds / 86400:.0f} d"


def share(value: float | None) -> str:
    """A share in [0, 1] as a percentage (`85%`), `—` when there is none."""
    return "—" if value is None else f"{value * 100:.0f}%"


def _parse(value: str) -> datetime | None:
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def is_web(uri: str | None) -> bool:
    return bool(uri) and str(uri).startswith(("https://", "http://"))


def query_string(**params: Any) -> str:
    """`?a=1&b=2` from the parameters that have a value."""
    kept = {k: v for k, v in params.items() if v not in (None, "")}
    return "?" + urlencode(kept) if kept else ""


def chunk_link(uri: str, chunk_index: int) -> str:
    """The document page scrolled to a chunk's passage, which it highlights."""
    return f"/ui/document{query_string(uri=uri, chunk=chunk_index)}#passage"


class ConsoleTemplates:
    def __init__(self) -> None:
        environment = Environment(
            loader=FileSystemLoader(TEMPLATES), autoescape=True, undefined=StrictUndefined, trim_blocks=True
        )
        environment.filters.update(
            when=when,
            when_utc=when_utc,
            age=age,
            duration=duration,
            share=share,
            snippet=snippet,
            highlight=highlight,
        )
        environment.globals.update(is_web=is_web, query_string=query_string, chunk_link=chunk_link)
        self.versions = asset_versions()
        environment.globals["asset"] = lambda name: f"/ui/static/{name}?v={self.versions.get(name, '0')}"
        self.templates = Jinja2Templates(env=environment)

    def render(self, request: Request, name: str, context: dict[str, Any], status_code: int = 200) -> HTMLResponse:
        authenticator = app_authenticator(request)
        base = {
            "csrf_token": csrf_token(request),
            "signed_in": signed_in(request),
            "reads_need_token": authenticator.reads_need_token,
            "caller": getattr(request.state, "caller", None),
            "path": request.url.path,
        }
        response = self.templates.TemplateResponse(request, name, base | context, status_code=status_code)
        remember_csrf(request, response)
        return response


def render(request: Request, name: str, context: dict[str, Any], status_code: int = 200) -> HTMLResponse:
    """A page or fragment rendered by this app's templates (installed with the console)."""
    return face_state(request, ConsoleTemplates).render(request, name, context, status_code)
