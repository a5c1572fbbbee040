"""Reading the Secrets a KnowledgeSource names, through the Kubernetes API.

kopf ships no API client for handlers, so this uses the official `kubernetes` client (the same
configuration kopf's own login uses: in-cluster first, then kubeconfig), in a worker thread so
that the event loop never blocks.

Who can make the operator read what (docs/operations/security.md, "Locking it down", has the whole model):
- only the Secret named in the spec, in the object's own namespace;
- only when the Secret opts in with the label `kb.knowledgebase.dev/secret-type` set to the use
  it is named for (`repository`, `search-token` or `webhook`), as Argo CD's repository Secrets do: a
  Secret made for something else (a service-account token, a TLS key) is refused;
- only fixed keys, and nothing else of it is decoded: `token`, `username`, `ssh-privatekey`,
  `known_hosts` and `url` for a repository; `token` and `url` for a search service;
- when it has a `url` key, only for that URL prefix (its scheme, host, port and path prefix).
A refusal is an InvalidSpecError (fixed by the Secret's owner, not retried on its own) that
names the Secret and what is missing, never a value.

Errors say whether retrying helps: 404 and 403 are a missing or unreadable Secret (retried with
backoff, in case it appears or RBAC is fixed); 429, 5xx and connection failures are transient;
TLS, configuration and authentication failures of the operator's own API access are reported as
such (KubernetesAccessError), not dressed up as an outage. Anything else is a bug and propagates.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import logging
import ssl
from collections.abc import Callable, Iterable

import kubernetes.client
import kubernetes.config
import urllib3.exceptions
from kubernetes.client.exceptions import ApiException

from kboperator.errors import (
    InvalidSpecError,
    KubernetesAccessError,
    KubernetesUnavailableError,
    SecretError,
    SecretNotAllowedError,
)
from kboperator.models import Credentials
from kboperator.repourl import RepoLocation
from kboperator.urlscope import Endpoint, parse_repository_prefix, parse_service_url, repository_endpoint

log = logging.getLogger(__name__)

SECRET_TYPE_LABEL = "kb.knowledgebase.dev/secret-type"
REPOSITORY = "repository"
SEARCH_TOKEN = "search-token"
WEBHOOK = "webhook"
#: The only keys ever read, per kind of Secret.
REPOSITORY_KEYS = ("token", "username", "ssh-privatekey", "known_hosts", "url")
SEARCH_TOKEN_KEYS = ("token", "url")
WEBHOOK_KEYS = ("token",)


class SecretReader:
    """Fetches Secrets and decodes their fixed keys; values never appear in messages."""

    def __init__(self, api_client: kubernetes.client.ApiClient) -> None:
        self._api = kubernetes.client.CoreV1Api(api_client)
        self._api_client = api_client

    @classmethod
    def from_environment(cls) -> SecretReader:
        """Configure like kopf's own login: the service account in a pod, else kubeconfig."""
        configuration = kubernetes.client.Configuration()
        try:
            kubernetes.config.load_incluster_config(client_configuration=configuration)
        except kubernetes.config.ConfigException:
            kubernetes.config.load_kube_config(client_configuration=configuration)
        return cls(kubernetes.client.ApiClient(configuration))

    @property
    def api_client(self) -> kubernetes.client.ApiClient:
        """The configured API client, for the few other calls the operator makes (webhooks.SyncRequester)."""
        return self._api_client

    def close(self) -> None:
        """Release the connection pool."""
        self._api_client.close()

    async def read(self, namespace: str, name: str, secret_type: str, keys: Iterable[str]) -> dict[str, str]:
        """The decoded `keys` of a Secret labelled for `secret_type` (stringData is folded into data)."""
        return await asyncio.to_thread(self._read, namespace, name, secret_type, tuple(keys))

    def _read(self, namespace: str, name: str, secret_type: str, keys: tuple[str, ...]) -> dict[str, str]:
        where = f"Secret {namespace}/{name}"
        try:
            secret = self._api.read_namespaced_secret(name, namespace, _request_timeout=30)
        except Exception as exc:  # noqa: BLE001 - classified below; a bug is re-raised as it is
            raise _classified(exc, where) from None
        labels = (secret.metadata.labels if secret.metadata else None) or {}
        if labels.get(SECRET_TYPE_LABEL) != secret_type:
            raise SecretNotAllowedError(
                f"{where} is not labelled {SECRET_TYPE_LABEL}={secret_type}, so the operator will not use it; "
                "label it, then change the spec or request a sync"
            )
        decoded: dict[str, str] = {}
        for key in keys:
            value = (secret.data or {}).get(key)
            if value is None:
                continue
            try:
                decoded[key] = base64.b64decode(value).decode("utf-8")
            except (binascii.Error, UnicodeDecodeError):
                raise SecretError(f"{where} key {key!r} is not UTF-8 text") from None
        return decoded


def _classified(exc: Exception, where: str) -> Exception:
    """What a failed read means: a missing Secret, an outage, or broken access of our own."""
    if isinstance(exc, ApiException):
        if exc.status == 404:
            return SecretError(f"{where} does not exist")
        if exc.status == 403:
            return SecretError(f"the operator may not read {where} (RBAC)")
        if exc.status == 429 or (exc.status or 0) >= 500:
            return KubernetesUnavailableError(f"reading {where} failed: HTTP {exc.status}")
        if exc.status == 401:
            return _access(f"reading {where}: the Kubernetes API refused the operator's credentials (HTTP 401)")
        return _access(f"reading {where}: the Kubernetes API answered HTTP {exc.status}")
    reason = exc.reason if isinstance(exc, urllib3.exceptions.MaxRetryError) else exc
    if isinstance(reason, (ssl.SSLError, urllib3.exceptions.SSLError)):
        return _access(f"reading {where}: TLS with the Kubernetes API failed ({type(reason).__name__})")
    if isinstance(reason, urllib3.exceptions.LocationValueError):  # a bad server address in the config
        return _access(f"reading {where}: the Kubernetes API address is invalid ({type(reason).__name__})")
    if isinstance(reason, (urllib3.exceptions.HTTPError, ConnectionError, TimeoutError)):
        return KubernetesUnavailableError(f"reading {where} failed: {type(reason).__name__}")
    if isinstance(exc, (kubernetes.config.ConfigException, ValueError)):
        return _access(f"reading {where}: the Kubernetes client is misconfigured ({type(exc).__name__})")
    return exc


def _access(message: str) -> KubernetesAccessError:
    log.error("%s; fix the operator's Kubernetes access (retries back off meanwhile)", message)
    return KubernetesAccessError(message)


async def repository_credentials(
    reader: SecretReader, namespace: str, name: str, location: RepoLocation
) -> Credentials:
    """Credentials for the repository at `location`, from a Secret labelled `repository`.

    `token` (+`username`) for https, `ssh-privatekey` (+`known_hosts`) for ssh; an optional
    `url` binds the Secret to the repositories under that URL prefix.
    """
    data = await reader.read(namespace, name, REPOSITORY, REPOSITORY_KEYS)
    where = f"Secret {namespace}/{name}"
    bound = data.get("url", "").strip()
    target = repository_endpoint(location)
    if bound and (target is None or not target.within(_prefix(bound, where, parse_repository_prefix))):
        raise SecretNotAllowedError(f"{where} is bound (key 'url') to other repositories than {location.display_url}")
    ssh = location.kind == "ssh"
    needed = "ssh-privatekey" if ssh else "token"
    if not data.get(needed, "").strip():
        raise SecretError(f"{where} has no {needed!r} key")
    if ssh:
        return Credentials(ssh_private_key=data[needed], known_hosts=data.get("known_hosts") or None)
    return Credentials(username=data.get("username") or None, token=data[needed].strip())


async def service_token(reader: SecretReader, namespace: str, name: str, target: Endpoint) -> str:
    """The search service token (key `token`) from a Secret labelled `search-token`, for `target`."""
    data = await reader.read(namespace, name, SEARCH_TOKEN, SEARCH_TOKEN_KEYS)
    where = f"Secret {namespace}/{name}"
    bound = data.get("url", "").strip()
    if bound and not target.within(_prefix(bound, where, parse_service_url)):
        raise SecretNotAllowedError(f"{where} is bound (key 'url') to another search service than {target}")
    token = data.get("token", "").strip()
    if not token:
        raise SecretError(f"{where} has no 'token' key")
    return token


async def webhook_token(reader: SecretReader, namespace: str, name: str) -> str:
    """A source's webhook secret (key `token`) from a Secret of its own namespace labelled `webhook`."""
    data = await reader.read(namespace, name, WEBHOOK, WEBHOOK_KEYS)
    token = data.get("token", "").strip()
    if len(token) < 16:
        raise SecretError(f"Secret {namespace}/{name} key 'token' is missing or shorter than 16 characters")
    return token


def _prefix(value: str, where: str, parse: Callable[[str], Endpoint]) -> Endpoint:
    try:
        return parse(value)
    except InvalidSpecError:
        raise SecretNotAllowedError(f"{where} key 'url' is not a usable URL prefix") from None
