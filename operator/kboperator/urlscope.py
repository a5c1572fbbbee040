"""Where a credential may be sent: URLs parsed into (scheme, host, port, path) and matched as prefixes.

A string prefix test is not enough: `http://allowed.example@evil` and `http://allowed.example.evil`
both start with `http://allowed.example`. Here both sides are parsed; user info, queries,
fragments, backslashes, percent-escapes in the path and dot segments are refused; the host is
compared whole, lower-cased and without a trailing dot; the port with its scheme's default filled
in; and the path by whole segments, so `/kb` covers `/kb/v2` but not `/kb-evil`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

from kboperator.errors import InvalidSpecError
from kboperator.repourl import RepoLocation

_DEFAULT_PORTS = {"http": 80, "https": 443, "ssh": 22}
_LABEL = r"[a-z0-9](?:[a-z0-9-]*[a-z0-9])?"
_HOSTNAME = re.compile(rf"^{_LABEL}(?:\.{_LABEL})*$")
_IPV6 = re.compile(r"^[0-9a-f:.]+$")
# scp-like `[user@]host:path`, as git reads it (a ':' before any '/').
_SCP = re.compile(r"^(?:[^@/:]+@)?(?P<host>[^@/:\[\]]+):(?P<path>.*)$")


@dataclass(frozen=True)
class Endpoint:
    """A normalised URL: what a credential is bound to, or where it would be sent."""

    scheme: str
    host: str
    port: int
    path: tuple[str, ...]

    def within(self, prefix: Endpoint) -> bool:
        """True when this URL is the prefix itself or below it (whole path segments)."""
        return (self.scheme, self.host, self.port) == (prefix.scheme, prefix.host, prefix.port) and self.path[
            : len(prefix.path)
        ] == prefix.path

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        port = "" if _DEFAULT_PORTS.get(self.scheme) == self.port else f":{self.port}"
        return f"{self.scheme}://{host}{port}" + "".join(f"/{part}" for part in self.path)


def parse_service_url(url: str) -> Endpoint:
    """A search service base URL, normalised; InvalidSpecError when it is not a plain http(s) URL."""
    if not isinstance(url, str) or not url:
        raise InvalidSpecError("the search service URL is empty")
    problem = _problem(url)
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if problem is None and scheme not in ("http", "https"):
        problem = "it is not an http(s) URL"
    if problem is None:
        try:
            return Endpoint(scheme, _host(parts.hostname), _port(parts.port, scheme), _segments(parts.path))
        except ValueError as exc:
            problem = str(exc)
    raise InvalidSpecError(f"the search service URL {url!r} cannot be used: {problem}")


def parse_repository_prefix(url: str) -> Endpoint:
    """A repository URL or URL prefix (https, http, ssh or scp-like), normalised; `.git` dropped."""
    problem = _problem(url) if isinstance(url, str) and url else "it is empty"
    scp = _SCP.match(url) if problem is None and "://" not in url else None
    try:
        if problem is not None:
            raise ValueError(problem)
        if scp:
            return Endpoint("ssh", _host(scp.group("host")), 22, _repo_segments(scp.group("path")))
        parts = urlsplit(url)
        scheme = parts.scheme.lower()
        if scheme not in _DEFAULT_PORTS:
            raise ValueError("it is not an https, http or ssh URL")
        if parts.password is not None or (scheme != "ssh" and parts.username is not None):
            raise ValueError("it contains user info")
        return Endpoint(scheme, _host(parts.hostname), _port(parts.port, scheme), _repo_segments(parts.path))
    except ValueError as exc:
        raise InvalidSpecError(f"{url!r} is not a repository URL prefix: {exc}") from None


def repository_endpoint(location: RepoLocation) -> Endpoint | None:
    """Where git sends a repository's credentials; None for local repositories, which get none."""
    if location.kind == "local":
        return None
    return parse_repository_prefix(location.fetch_url)


def _problem(url: str) -> str | None:
    if url != url.strip() or any(ord(c) <= 0x20 or c == "\x7f" for c in url):
        return "it contains whitespace or control characters"
    if "\\" in url:
        return "it contains a backslash"
    scheme, sep, rest = url.partition("://")
    authority = re.split(r"[/?#]", rest, maxsplit=1)[0] if sep else ""
    if "@" in authority and scheme.lower() != "ssh":
        return "it contains user info ('@' before the host)"
    if "?" in url or "#" in url:
        return "it has a query or a fragment"
    return None


def _host(host: str | None) -> str:
    host = (host or "").lower().removesuffix(".")
    if not host or not (_HOSTNAME.match(host) or (":" in host and _IPV6.match(host))):
        raise ValueError("it has no valid host")
    return host


def _port(port: int | None, scheme: str) -> int:
    # urlsplit(...).port raises ValueError itself for a port that is not a number in range.
    return _DEFAULT_PORTS[scheme] if port is None else port


def _segments(path: str) -> tuple[str, ...]:
    if "%" in path:
        raise ValueError("its path contains a percent-escape")
    parts = path.strip("/").split("/") if path.strip("/") else []
    if any(part in ("", ".", "..") for part in parts):
        raise ValueError("its path contains an empty, '.' or '..' segment")
    return tuple(parts)


def _repo_segments(path: str) -> tuple[str, ...]:
    parts = _segments(path)
    if parts and parts[-1].endswith(".git"):
        parts = (*parts[:-1], parts[-1][: -len(".git")])
    return tuple(part for part in parts if part)


class ServicePolicy:
    """The search services a KnowledgeSource may name: the operator's default and the allow-list."""

    def __init__(self, default_url: str, allowed: Iterable[str] = ()) -> None:
        self.default = parse_service_url(default_url)
        self.allowed = (self.default, *(parse_service_url(url) for url in allowed))

    def target(self, url: str | None) -> Endpoint:
        """Where a source's requests go; InvalidSpecError when its URL is not allowed."""
        if url is None:
            return self.default
        endpoint = parse_service_url(url)
        if not any(endpoint.within(prefix) for prefix in self.allowed):
            raise InvalidSpecError(
                f"spec.searchService.url {url!r} is not one of the search services this operator may "
                "send to (its default URL and KBOPERATOR_ALLOWED_SEARCH_URLS)"
            )
        return endpoint

    def is_default(self, url: str | None) -> bool:
        """Whether `url` (None: not set) is the operator's own search service."""
        if url is None:
            return True
        try:
            return parse_service_url(url) == self.default
        except InvalidSpecError:
            return False
