"""The environment one git subprocess runs in: isolated config, and credentials for that call only.

- Nothing from the user's or system's git config applies (GIT_CONFIG_GLOBAL=/dev/null,
  GIT_CONFIG_NOSYSTEM=1), and inherited GIT_* variables are dropped (a CI hook's GIT_DIR, or a
  GIT_TRACE_CURL that would log the Authorization header), except the TLS CA settings.
- GIT_TERMINAL_PROMPT=0 and ssh BatchMode: a missing credential fails, it never hangs.
- GIT_ALLOW_PROTOCOL names only the transport of the validated URL.
- HTTPS token: an inline credential helper (`-c credential.helper=...`, on the command line,
  never in any config file) prints the user name and token from environment variables that
  exist only in that subprocess's environment. The default user name is `x-access-token`,
  which GitHub, GitLab and Gitea accept with a token. It answers only when git asks for the
  repository's own protocol and host (with its port): git follows a redirect of its first
  request to any host, and would otherwise hand the token to whoever the server points it at.
  Refusing redirects instead would break the harmless same-host ones (a renamed repository).
- SSH key: written to a 0600 file in a private 0700 temp folder that is removed afterwards,
  used with `-i <file> -o IdentitiesOnly=yes`.
- SSH host keys (HostKeys): known hosts are configuration. A Secret's `known_hosts` and the
  configured file (the chart mounts it from a ConfigMap) are checked with
  StrictHostKeyChecking=yes: an unknown or changed host key is refused. Only with trust on
  first use (the CLI's default; off in the operator unless configured) is an unknown key
  accepted and pinned in a per-source file of the cache (StrictHostKeyChecking=accept-new),
  which refuses later changes but does not outlive the cache.
- Without an SSH key and without configured known hosts, the user's own ssh setup (agent,
  ~/.ssh/config, ~/.ssh/known_hosts) is used, in batch mode; that is what the CLI on a laptop wants.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shlex
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from kboperator.models import Credentials
from kboperator.repourl import RepoLocation

log = logging.getLogger(__name__)

DEFAULT_TOKEN_USERNAME = "x-access-token"
_KEEP_GIT_VARS = ("GIT_SSL_CAINFO", "GIT_SSL_CAPATH", "GIT_PROXY_SSL_CAINFO")
_PROTOCOL = {"https": "https", "http": "http", "ssh": "ssh", "local": "file"}
# The helper ignores `store`/`erase`, so git can never ask it to persist anything. git writes
# the request as `key=value` lines on stdin; the answer is empty for any other protocol or host.
_HELPER = (
    '!f() { test "$1" = get || return 0; protocol=; host=; '
    'while IFS= read -r line && test -n "$line"; do case "$line" in '
    "protocol=*) protocol=${line#protocol=} ;; host=*) host=${line#host=} ;; esac; done; "
    'test "$protocol" = "$KB_GIT_PROTOCOL" && test "$host" = "$KB_GIT_HOST" || return 0; '
    'printf "username=%s\\npassword=%s\\n" "$KB_GIT_USERNAME" "$KB_GIT_PASSWORD"; }; f'
)


@dataclass(frozen=True)
class HostKeys:
    """How ssh checks a repository host's key (see the module docstring)."""

    file: Path | None = None  # known hosts from configuration, read-only
    trust_on_first_use: bool = True


@dataclass
class GitCall:
    """Extra `-c` options and the environment for one git subprocess."""

    config: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    secrets: tuple[str, ...] = ()  # values to scrub from any message, just in case

    def scrub(self, text: str) -> str:
        for secret in self.secrets:
            if secret:
                text = text.replace(secret, "***")
        return text


def base_env(protocol: str | None = None) -> dict[str, str]:
    """A clean environment for local git commands (no network, no credentials)."""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("GIT_") and key not in ("SSH_ASKPASS", "SSH_ASKPASS_REQUIRE")
    }
    env.update({key: os.environ[key] for key in _KEEP_GIT_VARS if key in os.environ})
    env.update(
        LC_ALL="C",
        LANGUAGE="C",
        GIT_TERMINAL_PROMPT="0",
        GIT_CONFIG_NOSYSTEM="1",
        GIT_CONFIG_GLOBAL=os.devnull,
        GIT_ALLOW_PROTOCOL=protocol or "file",
        SSH_ASKPASS_REQUIRE="never",
    )
    return env


@contextlib.contextmanager
def git_call(
    location: RepoLocation,
    credentials: Credentials | None,
    *,
    pinned_known_hosts: Path,
    host_keys: HostKeys = HostKeys(),
) -> Iterator[GitCall]:
    """Everything a network git command needs; temp files are removed on exit."""
    call = GitCall(config=["credential.helper="], env=base_env(_PROTOCOL[location.kind]))
    creds = credentials or Credentials()
    if location.kind == "local":
        yield call
        return
    if creds.token and location.kind in ("https", "http"):
        if location.kind == "http":
            log.warning("sending a repository token over plain http to %s; prefer https", location.host)
        call.config.append(f"credential.helper={_HELPER}")
        # What git sends as `host=`: the URL's authority exactly as written in the fetch URL.
        call.env["KB_GIT_PROTOCOL"] = location.kind
        call.env["KB_GIT_HOST"] = urlsplit(location.fetch_url).netloc
        call.env["KB_GIT_USERNAME"] = creds.username or DEFAULT_TOKEN_USERNAME
        call.env["KB_GIT_PASSWORD"] = creds.token
        call.secrets = (creds.token,)
    if location.kind != "ssh":
        yield call
        return
    private_dir = Path(tempfile.mkdtemp(prefix="kb-git-"))  # mkdtemp makes it 0700
    try:
        call.env["GIT_SSH_COMMAND"] = _ssh_command(creds, private_dir, pinned_known_hosts, host_keys)
        call.secrets = tuple(s for s in (creds.ssh_private_key,) if s)
        yield call
    finally:
        shutil.rmtree(private_dir, ignore_errors=True)


def _ssh_command(creds: Credentials, private_dir: Path, pinned_known_hosts: Path, host_keys: HostKeys) -> str:
    options = ["ssh", "-o", "BatchMode=yes"]
    configured = host_keys != HostKeys()  # the operator's; the CLI keeps the defaults
    if not creds.ssh_private_key and not creds.known_hosts and not configured:
        return shlex.join(options)  # the user's own ssh setup
    files = [host_keys.file] if host_keys.file else []
    if creds.known_hosts:
        known_hosts = private_dir / "known_hosts"
        _write_private(known_hosts, creds.known_hosts.rstrip("\n") + "\n")
        files, strict = [known_hosts, *files], "yes"
    elif host_keys.trust_on_first_use:
        pinned_known_hosts.parent.mkdir(parents=True, exist_ok=True)
        # ssh pins a new key in the first file; a key listed in any of them must match.
        files, strict = [pinned_known_hosts, *files], "accept-new"
    else:
        strict = "yes"
    quoted = " ".join(f'"{path}"' for path in files or [Path(os.devnull)])
    if creds.ssh_private_key:
        key_file = private_dir / "id"
        _write_private(key_file, creds.ssh_private_key.rstrip("\n") + "\n")  # ssh needs the newline
        options += [
            "-F", os.devnull,
            "-i", str(key_file),
            "-o", "IdentitiesOnly=yes",
            "-o", "IdentityAgent=none",
        ]  # fmt: skip
    options += ["-o", f"UserKnownHostsFile={quoted}", "-o", f"StrictHostKeyChecking={strict}"]
    if configured:  # the configured files are the only source: not the image's /etc/ssh
        options += ["-o", f"GlobalKnownHostsFile={os.devnull}"]
    return shlex.join(options)


def _write_private(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(text)
