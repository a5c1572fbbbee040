"""Each document's URI: a web link to the file that is right for the repository's host.

- GitHub (and any host we do not recognise): `https://host/org/repo/blob/<ref>/<path>`
- GitLab (gitlab.com, or a host name containing "gitlab"): `.../-/blob/<ref>/<path>`
- Bitbucket Cloud (bitbucket.org, or a host name containing "bitbucket"): `.../src/<ref>/<path>`
- Gitea/Forgejo (codeberg.org, or a host containing "gitea"/"forgejo"):
  `.../src/branch/<ref>/<path>`, or `/src/tag/<ref>/` for a tag
- a local repository: `file:///abs/folder/<path>`
- any repository given a web address (`knowledge-sync --web-url`, for a CI checkout whose
  links should point at the forge, not at the runner's disk): that address in place of the
  one derived from the URL, in the shape of its host's flavour

Unknown hosts get GitHub's shape because it is the most common one and GitHub Enterprise
hosts are rarely named after the product; pass `provider` to choose explicitly.
SSH addresses map to https on the same host (the SSH port is dropped, it is not the web
port). No URI ever holds credentials, and refs and paths are percent-encoded.
"""

from __future__ import annotations

from urllib.parse import quote, urlsplit

from kboperator.repourl import RepoLocation

PROVIDERS = ("github", "gitlab", "bitbucket", "gitea")

_KNOWN_HOSTS = {
    "github.com": "github",
    "gitlab.com": "gitlab",
    "bitbucket.org": "bitbucket",
    "codeberg.org": "gitea",
    "gitea.com": "gitea",
}


def detect_provider(host: str) -> str:
    """The web UI flavour of a host, guessed from its name."""
    host = host.lower()
    if host in _KNOWN_HOSTS:
        return _KNOWN_HOSTS[host]
    for marker in ("gitlab", "bitbucket", "gitea", "forgejo"):
        if marker in host:
            return "gitea" if marker == "forgejo" else marker
    return "github"


def short_ref(ref: str) -> str:
    """`refs/heads/x` and `refs/tags/x` are shown as `x`, like the web UIs do."""
    for prefix in ("refs/heads/", "refs/tags/"):
        if ref.startswith(prefix):
            return ref[len(prefix) :]
    return ref


def web_base(location: RepoLocation) -> str:
    """`https://host[:port]/org/repo` for a remote repository."""
    if location.kind == "local" or location.host is None:
        raise ValueError("a local repository has no web address")
    host = f"[{location.host}]" if ":" in location.host else location.host
    scheme = "https"
    if location.kind in ("https", "http"):
        parts = urlsplit(location.fetch_url)
        scheme = location.kind
        if parts.port:
            host = f"{host}:{parts.port}"
    return f"{scheme}://{host}/{quote(location.path, safe='/')}"


def check_web_url(url: str) -> str:
    """A repository's web address (`https://host/org/repo`), normalised; ValueError when unusable."""
    parts = urlsplit(url.strip())
    if parts.scheme not in ("https", "http") or not parts.hostname:
        raise ValueError(f"web URL {url!r} must be an http(s) address such as https://github.com/org/repo")
    if parts.username or parts.password:
        raise ValueError("the web URL must not carry credentials")
    if parts.query or parts.fragment or not parts.path.strip("/"):
        raise ValueError(f"web URL {url!r} must be the repository's page: no query or fragment, a path")
    return f"{parts.scheme}://{parts.netloc}{parts.path.rstrip('/')}".removesuffix(".git")


def document_uri(
    location: RepoLocation,
    ref: str,
    path: str,
    *,
    is_tag: bool = False,
    provider: str | None = None,
    web_url: str | None = None,
) -> str:
    """The URI of the file at `path` (repository-relative, '/'-separated) on `ref`.

    `web_url` (checked by check_web_url) replaces the web address derived from `location`.
    """
    quoted_path = quote(path, safe="/")
    if location.kind == "local" and web_url is None:
        return "file://" + quote(location.path.rstrip("/"), safe="/") + "/" + quoted_path
    host = urlsplit(web_url).hostname if web_url else location.host
    flavour = provider or detect_provider(host or "")
    if flavour not in PROVIDERS:
        raise ValueError(f"unknown provider {flavour!r}; expected one of {', '.join(PROVIDERS)}")
    quoted_ref = quote(short_ref(ref), safe="/")
    middle = {
        "github": f"blob/{quoted_ref}",
        "gitlab": f"-/blob/{quoted_ref}",
        "bitbucket": f"src/{quoted_ref}",
        "gitea": f"src/{'tag' if is_tag else 'branch'}/{quoted_ref}",
    }[flavour]
    return f"{web_url or web_base(location)}/{middle}/{quoted_path}"
